"""Rule 16: kube-scheduler's filters (taints and tolerations, node selector and required node affinity,
extended resources by name): every replica the plan places or moves is on a node that admits its
alternative (:func:`gpuplan.models.rules.scheduling.admits`); a running replica that stays where the
filters now refuse it keeps that (kept, :meth:`CheckContext.only_kept`).
"""

from __future__ import annotations

from gpuplan.models.cluster import Node
from gpuplan.models.rules.scheduling import admits, advertised
from gpuplan.planner.validation.context import CheckContext

#: The rule of this family (one of :data:`~gpuplan.planner.validation.report.KEPT_RULES`).
SCHEDULING = "scheduling"


def check_scheduling(ctx: CheckContext) -> None:
    """Rule 16: each placed replica on a node that admits its alternative, with the resources the node
    advertises in the sharing mode the plan leaves it in."""
    modes = {change.node: change.sharing for change in ctx.plan.sharing}
    after: dict[str, Node] = {}
    for p in ctx.placed:
        if p.shape is None:
            continue
        node = p.node
        if node.name in modes and node.resources:
            if node.name not in after:
                after[node.name] = node.model_copy(update={"resources": advertised(node, modes[node.name])})
            node = after[node.name]
        reason = admits(node, p.workload, p.shape)
        if reason is not None:
            ctx.add(
                SCHEDULING,
                p.subject,
                f"{p.subject} is placed on node '{node.name}', which kube-scheduler's filters refuse it: "
                f"{reason}.",
                kept=ctx.only_kept([p]),
            )

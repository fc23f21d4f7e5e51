"""Rule 14b: the sharing-mode changes a plan makes (exclusive or time-sliced) are allowed and drain
their node first.
"""

from __future__ import annotations

from gpuplan.models.cluster import TimeSliced, describe_sharing, sharing_text
from gpuplan.models.plan import SET_SHARING
from gpuplan.models.workload import describe_uses
from gpuplan.planner.validation.context import CheckContext
from gpuplan.planner.validation.report import replica_subject


def check_sharing_changes(ctx: CheckContext) -> None:
    """Rule 14b: a plan changes the sharing mode of existing nodes only, only when the policy allows
    it (``sharing.allow_change``), only between exclusive and time-slicing with the policy's
    ``sharing.replicas``, and only of a node whose non-MIG GPUs the plan drains: every replica
    running on them is moved or preempted."""
    nodes = ctx.inp.cluster.node_by_name
    target = {(a.workload, a.replica): a for a in ctx.plan.assignments}
    for change in ctx.plan.sharing:
        node = nodes.get(change.node)
        if node is None:
            ctx.add(
                "unknown-ref",
                f"node {change.node}",
                f"The plan changes the sharing mode of node '{change.node}', not in the cluster.",
            )
            continue
        if change.sharing == node.sharing:
            continue
        what = f"The plan changes node '{node.name}' to {describe_sharing(change.sharing)}"
        if not ctx.inp.policy.sharing.allow_change:
            ctx.add(
                "sharing-change",
                f"node {node.name}",
                f"{what}, but the policy does not allow it (sharing.allow_change is false).",
            )
        replicas = ctx.inp.policy.sharing.replicas
        if isinstance(change.sharing, TimeSliced) and isinstance(node.sharing, TimeSliced):
            ctx.add(
                "sharing-change",
                f"node {node.name}",
                f"{what}, but the node is time-sliced with {node.sharing.time_slicing.replicas} "
                "replicas already: a plan switches a node between exclusive and time-slicing, it does "
                "not change its replicas.",
            )
        elif isinstance(change.sharing, TimeSliced) and change.sharing.time_slicing.replicas != replicas:
            ctx.add(
                "sharing-change",
                f"node {node.name}",
                f"{what}, but a node switched to time-slicing gets the policy's {replicas} replicas "
                "(sharing.replicas).",
            )
        plain = {g.index for g in node.gpus if g.mig is None}
        for w in ctx.inp.workloads:
            for r, place in enumerate(w.running_on):
                held = [g for g in place.gpus if place.node == node.name and g.index in plain]
                a = target.get((w.id, r))
                stays = a is not None and w.stays(r, a.node, a.gpus)
                if held and stays:
                    ctx.add(
                        "sharing-change",
                        f"node {node.name}",
                        f"{what}, but {replica_subject(w.id, r)} keeps running on "
                        f"{describe_uses(held)} there: the node must be drained first.",
                    )


def check_sharing_actions(ctx: CheckContext) -> None:
    """Rule 14c: every sharing-mode change has its ``set-sharing`` action to that mode (a mode change is
    applied through its action, like a MIG layout change)."""
    nodes = ctx.inp.cluster.node_by_name
    done = {(a.node, a.to) for a in ctx.plan.actions if a.kind == SET_SHARING}
    for change in ctx.plan.sharing:
        node = nodes.get(change.node)
        if node is None or change.sharing == node.sharing:
            continue
        if (node.name, sharing_text(change.sharing)) not in done:
            ctx.add(
                "sharing-unscheduled",
                f"node {node.name}",
                f"The plan changes node '{node.name}' to {describe_sharing(change.sharing)} but has no "
                f"set-sharing action for it.",
            )

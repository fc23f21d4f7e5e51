"""kube-scheduler's filters in the Kubernetes export: a ``v1 Binding`` skips the scheduler, so each one is
checked against the rules the plan kept (:func:`gpuplan.models.rules.scheduling.admits`, on the node in
the sharing mode the round leaves it) before it is written, and a pod gpuplan creates carries the
tolerations, node selector and required node affinity of its workload, so that the scheduler admits it
where the plan pins it."""

from __future__ import annotations

from typing import Any

from gpuplan.models.cluster import Node, Sharing
from gpuplan.models.plan import Assignment
from gpuplan.models.rules.scheduling import admits, advertised
from gpuplan.models.scheduling import SelectorOperator, TolerationOperator
from gpuplan.models.workload import Workload


def binding_refusal(node: Node | None, w: Workload, a: Assignment, sharing: Sharing | None) -> str | None:
    """Why the Binding (or the ungating patch, which ends in one) of the pending imported pod of ``w`` to
    ``a.node`` is not written: the filter that refuses it there, with ``node`` advertising the resources
    of ``sharing``, its mode in that round; ``None`` when the node admits it (or the pod runs now: its
    controller re-creates it and the scheduler places the new pod)."""
    if w.running_on or node is None or a.alternative >= len(w.shapes):
        return None
    if node.resources and sharing is not None:
        node = node.model_copy(update={"resources": advertised(node, sharing)})
    reason = admits(node, w, w.shapes[a.alternative])
    if reason is None:
        return None
    return (
        f"{w.namespace}/{w.pod_name}: not bound to {node.name}, which kube-scheduler's filters refuse it "
        f"({reason}); it stays pending"
    )


def pod_filters(w: Workload) -> dict[str, Any]:
    """The pod spec's ``tolerations`` (its workload's), ``nodeSelector`` (its workload's pairs) and
    required node ``affinity`` (its workload's terms), for a pod gpuplan creates; empty parts left out."""
    out: dict[str, Any] = {}
    tolerations = []
    for t in w.tolerations:
        item: dict[str, Any] = {"operator": str(t.operator)}
        if t.key:
            item["key"] = t.key
        if t.operator is TolerationOperator.EQUAL:
            item["value"] = t.value
        if t.effect is not None:
            item["effect"] = str(t.effect)
        tolerations.append(item)
    if tolerations:
        out["tolerations"] = tolerations
    if w.node_selector:
        out["nodeSelector"] = dict(w.node_selector)
    if w.node_affinity:
        terms = [
            {
                "matchExpressions": [
                    {
                        "key": r.key,
                        "operator": str(r.operator),
                        **(
                            {}
                            if r.operator in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST)
                            else {"values": list(r.values)}
                        ),
                    }
                    for r in term
                ]
            }
            for term in w.node_affinity
        ]
        out["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms
        }}}  # fmt: skip
    return out

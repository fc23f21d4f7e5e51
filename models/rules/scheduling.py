"""kube-scheduler's node filters as rules of the model: whether a node admits one alternative of a workload.

A ``v1 Binding`` skips the scheduler, so a plan applied to Kubernetes must keep the filters itself. Three
of them are rules here, written once and asked by the compile (which turns them into the nodes each
alternative may not go to), the explainer, the validator and the Kubernetes export:

- **TaintToleration**: a taint with effect ``NoSchedule`` or ``NoExecute`` needs a toleration: the same
  key (or an empty key with ``Exists``), the same value (or ``Exists``), the same effect (or none).
  ``PreferNoSchedule`` taints only lower a node's score in kube-scheduler; they are ignored here.
- **NodeAffinity**: every ``node_selector`` pair is a label of the node, and when the workload has
  required node affinity, at least one term holds: each of its match expressions (``In``, ``NotIn``,
  ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt``) holds for the node's labels.
- **NodeResourcesFit, by name**: a node that lists the extended resources it advertises offers the one
  the alternative asks for (``resource``); a node listing none is not known and offers every resource.
  Amounts are the planner's own rules (GPUs, milli-GPU, MIG instances, CPU and memory), and so is which
  MIG profiles a node's layout has (:func:`offers`); a sharing-mode change swaps the device plugin's
  whole and shared GPU names (:func:`advertised`).

Not modelled: ``PreferNoSchedule`` and preferred affinity (scores only), inter-pod affinity, topology
spread constraints, and resources other than the one GPU resource an alternative names. Node labels are
all a selection reads (the Kubernetes import gives each node a ``metadata.name`` label when some pod's
``matchFields`` names it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuplan.models.cluster import EXCLUSIVE, Node, Sharing
from gpuplan.models.scheduling import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    SelectorOperator,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    as_int64,
    taint_text,
)
from gpuplan.models.workload import ShapeFields, Workload

#: The filters, as the codes a refusal carries.
TAINT = "taint"
NODE_AFFINITY = "node-affinity"
RESOURCE = "resource"

#: Taint effects that keep a pod off a node unless it tolerates them.
BLOCKING = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)

#: The device plugin's names for a whole GPU and for a time-sliced share (``renameByDefault``).
WHOLE_GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
#: The device plugin's MIG devices under the mixed strategy: ``nvidia.com/mig-<profile>``.
MIG_DEVICE = "nvidia.com/mig-"


@dataclass(frozen=True)
class Refusal:
    """Why a node refuses an alternative: the filter (:data:`TAINT`, :data:`NODE_AFFINITY`,
    :data:`RESOURCE`), the reason in words, and what it names (the taint, the selector pair or
    ``affinity``, the resource)."""

    filter: str
    reason: str
    names: str


def tolerates(tol: Toleration, taint: Taint) -> bool:
    """Whether ``tol`` tolerates ``taint`` (Kubernetes' ``ToleratesTaint``)."""
    if tol.effect is not None and tol.effect != taint.effect:
        return False
    if tol.key and tol.key != taint.key:
        return False
    return tol.operator is TolerationOperator.EXISTS or tol.value == taint.value


def untolerated(taints: Iterable[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    """The first ``NoSchedule`` or ``NoExecute`` taint no toleration tolerates, else ``None``."""
    for taint in taints:
        if taint.effect in BLOCKING and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def requirement_holds(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """Whether one match expression holds for a node's ``labels``."""
    op, value = req.operator, labels.get(req.key)
    if op is SelectorOperator.IN:
        return value is not None and value in req.values
    if op is SelectorOperator.NOT_IN:
        return value is None or value not in req.values
    if op is SelectorOperator.EXISTS:
        return value is not None
    if op is SelectorOperator.DOES_NOT_EXIST:
        return value is None
    have = None if value is None else as_int64(value)
    want = as_int64(req.values[0]) if req.values else None
    if have is None or want is None:
        return False
    return have > want if op is SelectorOperator.GT else have < want


def term_holds(term: NodeSelectorTerm, labels: Mapping[str, str]) -> bool:
    """Whether every expression of a term holds (a term without any matches no node)."""
    return bool(term) and all(requirement_holds(r, labels) for r in term)


def affinity_holds(terms: Sequence[NodeSelectorTerm], labels: Mapping[str, str]) -> bool:
    """Whether required node affinity ``terms`` (none: no requirement) let a node with ``labels`` in:
    any one term holds."""
    return not terms or any(term_holds(t, labels) for t in terms)


def unmatched_pair(selector: Iterable[tuple[str, str]], labels: Mapping[str, str]) -> tuple[str, str] | None:
    """The first node-selector pair the node's ``labels`` lack, else ``None``."""
    return next(((k, v) for k, v in selector if labels.get(k) != v), None)


def offers(advertised: Iterable[str], resource: str | None) -> bool:
    """Whether a node advertising ``advertised`` (empty: not known) offers ``resource`` (``None``: the
    alternative names none). A MIG device (``nvidia.com/mig-<profile>``) is offered by a node that
    advertises any: the device plugin's mixed strategy names each MIG instance by its profile, and which
    instances a GPU has is its MIG layout, which a plan may change (the layout rules decide that)."""
    names = tuple(advertised)
    if resource is None or not names or resource in names:
        return True
    return resource.startswith(MIG_DEVICE) and any(n.startswith(MIG_DEVICE) for n in names)


def refusal(node: Node, workload: Workload, shape: ShapeFields) -> Refusal | None:
    """Why ``node`` refuses alternative ``shape`` of ``workload`` (``None``: it admits it): an untolerated
    taint, a node-selector pair or no required-affinity term matched, or a resource it does not offer."""
    taint = untolerated(node.taints, workload.tolerations)
    if taint is not None:
        text = taint_text(taint)
        return Refusal(TAINT, f"no toleration for {text}", text)
    labels = node.labels
    pair = unmatched_pair(workload.node_selector, labels)
    if pair is not None:
        text = f"{pair[0]}={pair[1]}"
        return Refusal(NODE_AFFINITY, f"node selector {text} not matched", text)
    if not affinity_holds(workload.node_affinity, labels):
        return Refusal(NODE_AFFINITY, "no node affinity term matched", "node affinity")
    if not offers(node.resources, shape.resource):
        return Refusal(RESOURCE, f"node does not offer {shape.resource}", str(shape.resource))
    return None


def admits(node: Node, workload: Workload, shape: ShapeFields) -> str | None:
    """``None`` when ``node`` admits alternative ``shape`` of ``workload`` under kube-scheduler's
    TaintToleration, NodeAffinity and NodeResourcesFit (by name) filters, else the reason in words
    (``no toleration for dedicated=vision:NoSchedule``, ``node selector accelerator=h200 not matched``,
    ``no node affinity term matched``, ``node does not offer nvidia.com/gpu.shared``)."""
    found = refusal(node, workload, shape)
    return None if found is None else found.reason


def scheduling_key(node: Node) -> tuple[object, ...]:
    """What the filters read of a node: nodes with equal keys admit the same alternatives."""
    return (node.taints, tuple(sorted(node.labels.items())), node.resources)


def advertised(node: Node, sharing: Sharing | None) -> tuple[str, ...]:
    """The extended resources ``node`` advertises once its non-MIG GPUs are in mode ``sharing``: a node
    switched to time-slicing offers ``nvidia.com/gpu.shared`` instead of ``nvidia.com/gpu`` (the device
    plugin renames shares, as gpuplan's export configures it), one switched to exclusive the reverse;
    a node whose resources are not known, or whose mode does not change, as it is."""
    if not node.resources or sharing == node.sharing or sharing is None:
        return node.resources
    gone, new = (SHARED_GPU, WHOLE_GPU) if sharing == EXCLUSIVE else (WHOLE_GPU, SHARED_GPU)
    kept = [r for r in node.resources if r != gone]
    return tuple(sorted({*kept, new}))

"""What kube-scheduler's filters read, from the dumps: a node's ``spec.taints`` and the extended resources
its ``status.allocatable`` advertises (and HAMi's share resources on a node HAMi's device plugin
registered), a pod's ``spec.tolerations``, ``spec.nodeSelector``, required node affinity
(``spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution``; ``matchFields`` on
``metadata.name`` as a label of the node's name) and the GPU resource it asks for. They become the
cluster's ``taints`` and ``resources`` and the workloads' ``tolerations``, ``node_selector``,
``node_affinity`` and ``resource`` (CSV text), which the planner keeps as rules
(:mod:`gpuplan.models.rules.scheduling`). The node labels a pod's selection names are kept in the
cluster file, so that the rules read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from gpuplan.models.base import InputError
from gpuplan.models.scheduling import (
    NodeSelectorRequirement,
    Taint,
    Toleration,
    affinity_text,
    pairs_text,
    parse_affinity,
    parse_pairs,
    toleration_text,
)
from gpuplan.planner.io.importers.kubernetes.conventions import (
    GPU,
    HAMI_GPU_CORES,
    HAMI_GPU_MEMORY,
    HAMI_GPU_MEMORY_PERCENT,
    MIG_PREFIX,
    SHARED,
    quantity,
)

#: The one field ``matchFields`` may name: read as a label of that key whose value is the node's name,
#: which the import gives every node when some pod's affinity names it.
NODE_NAME = "metadata.name"
#: HAMi's share resources, which its scheduler hands out on the nodes its device plugin registered
#: (they are not in the node's allocatable resources).
HAMI_RESOURCES = (HAMI_GPU_MEMORY, HAMI_GPU_MEMORY_PERCENT, HAMI_GPU_CORES)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in error["loc"])
    return f"{loc + ': ' if loc else ''}{str(error['msg']).removeprefix('Value error, ')}"


def node_scheduling(raw: Mapping[str, Any], where: str, *, hami: bool = False) -> dict[str, Any]:
    """The node's cluster-file ``taints`` (``spec.taints``) and ``resources``: the extended resources
    (names with a ``/``) its ``status.allocatable`` advertises a positive amount of, and HAMi's share
    resources when HAMi registered the node (``hami``). Empty lists are left out."""
    out: dict[str, Any] = {}
    taints = []
    for i, item in enumerate((raw.get("spec") or {}).get("taints") or ()):
        entry = {k: item[k] for k in ("key", "value", "effect") if isinstance(item, Mapping) and k in item}
        try:
            taints.append(Taint.model_validate(entry).model_dump(mode="json"))
        except ValidationError as exc:
            raise InputError(f"{where}: spec.taints[{i}]: {_first_error(exc)}") from None
    if taints:
        out["taints"] = taints
    alloc = (raw.get("status") or {}).get("allocatable") or {}
    names = {
        str(k)
        for k, v in alloc.items()
        if "/" in str(k) and quantity(v, f"{where}: status.allocatable.{k}") > 0
    }
    if hami:
        names.update(HAMI_RESOURCES)
    if names:
        out["resources"] = sorted(names)
    return out


def asked_resource(asked: Mapping[str, Decimal], scheduler_share: bool) -> str | None:
    """The GPU resource a pod asks the node for: HAMi's share resource for a HAMi share, none for a KAI
    Scheduler share (it asks for no resource), else the device plugin's resource it asks a positive
    amount of (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, ``nvidia.com/mig-<profile>``)."""
    if scheduler_share:
        return next((k for k in HAMI_RESOURCES if asked.get(k)), None)
    gpu = sorted(k for k, v in asked.items() if v > 0 and (k in (GPU, SHARED) or k.startswith(MIG_PREFIX)))
    return gpu[0] if gpu else None


def pod_scheduling(
    spec: Mapping[str, Any], asked: Mapping[str, Decimal], scheduler_share: bool, where: str
) -> dict[str, str]:
    """The pod's workload fields the filters read, as CSV text: ``resource``, ``tolerations``,
    ``node_selector`` and ``node_affinity`` (left out when empty). Raises :class:`InputError` naming the
    field gpuplan cannot read."""
    out: dict[str, str] = {}
    resource = asked_resource(asked, scheduler_share)
    if resource:
        out["resource"] = resource
    tolerations = []
    for i, item in enumerate(spec.get("tolerations") or ()):
        if not isinstance(item, Mapping):
            raise InputError(f"{where}: spec.tolerations[{i}]: not a mapping")
        fields = {k: item[k] for k in ("key", "operator", "value", "effect") if item.get(k)}
        try:
            tolerations.append(toleration_text(Toleration.model_validate(fields)))
        except ValidationError as exc:
            raise InputError(f"{where}: spec.tolerations[{i}]: {_first_error(exc)}") from None
    if tolerations:
        out["tolerations"] = ",".join(dict.fromkeys(tolerations))
    selector = spec.get("nodeSelector") or {}
    if selector:
        out["node_selector"] = pairs_text(sorted((str(k), str(v)) for k, v in selector.items()))
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {})  # fmt: skip
    terms = []
    field_name = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    for i, term in enumerate(required.get("nodeSelectorTerms") or ()):
        exprs = []
        for part in ("matchExpressions", "matchFields"):
            for j, e in enumerate((term or {}).get(part) or ()):
                at = f"{where}: {field_name}.nodeSelectorTerms[{i}].{part}[{j}]"
                if not isinstance(e, Mapping):
                    raise InputError(f"{at}: not a mapping")
                if part == "matchFields" and e.get("key") != NODE_NAME:
                    raise InputError(f"{at}: key '{e.get('key')}': only {NODE_NAME} can be matched")
                try:
                    exprs.append(NodeSelectorRequirement.model_validate(
                        {"key": e.get("key"), "operator": e.get("operator"), "values": e.get("values") or []}
                    ))  # fmt: skip
                except ValidationError as exc:
                    raise InputError(f"{at}: {_first_error(exc)}") from None
        terms.append(tuple(exprs))
    if terms:
        out["node_affinity"] = affinity_text(terms)
    return out


def selected_keys(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    """The node label keys the workload rows' ``node_selector`` and ``node_affinity`` name."""
    keys: set[str] = set()
    for row in rows:
        keys.update(parse_pairs(str(row.get("node_selector") or ""), "node selector"))
        for term in parse_affinity(str(row.get("node_affinity") or "")):
            keys.update(str(e["key"]) for e in term)
    return keys


def keep_selected_labels(
    entries: Sequence[MutableMapping[str, Any]],
    node_items: Iterable[Mapping[str, Any]],
    rows: Iterable[Mapping[str, Any]],
) -> None:
    """Add to the cluster-file ``entries`` the node labels a pod's node selector or required node affinity
    names (the importer keeps only topology and GPU Operator labels otherwise), so that the planner reads
    the selection on the labels the scheduler reads."""
    keys = selected_keys(rows)
    if not keys:
        return
    labels_of = {
        str((raw.get("metadata") or {}).get("name") or ""): (raw.get("metadata") or {}).get("labels") or {}
        for raw in node_items
    }
    for entry in entries:
        name = str(entry.get("name"))
        found = {**labels_of.get(name, {}), NODE_NAME: name}
        extra = {k: str(found[k]) for k in keys if k in found}
        if extra:
            entry["labels"] = dict(sorted({**entry.get("labels", {}), **extra}.items()))

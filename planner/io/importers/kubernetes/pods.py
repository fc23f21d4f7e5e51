"""Pods: each pod that asks for GPUs becomes a one-replica workload ``<namespace>/<name>`` (pods of one
gang share its ``gang``); Succeeded, Failed and terminating pods are skipped. Requests (else limits) give
the shape (:mod:`.shapes`): ``nvidia.com/gpu`` whole GPUs, or a MIG instance on a ``single``-strategy MIG
node, or a time-sliced share on a node that shares without renaming (for a pod not yet bound, what its
``nvidia.com/gpu.product`` selection's ``-MIG-<profile>`` or ``-SHARED`` suffix says, else what all the
nodes it may go to offer under that name when they agree); ``nvidia.com/gpu.shared`` a share of
``1000 / replicas`` milli-GPU; ``nvidia.com/mig-<profile>`` that MIG profile (``.`` in the resource name
for the ``+`` of the profile). Each workload keeps what the pod is (:func:`pod_identity`), for the
export to act on that pod.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpuplan.models import HardwareCatalog
from gpuplan.models.base import InputError
from gpuplan.planner.io.importers.kubernetes.audit import FINISHED, ON_UNAVAILABLE, TERMINATING, _Audit
from gpuplan.planner.io.importers.kubernetes.conventions import cpu_milli, memory_mib, quantity
from gpuplan.planner.io.importers.kubernetes.nodes import _NodeInfo
from gpuplan.planner.io.importers.kubernetes.scheduling import pod_scheduling
from gpuplan.planner.io.importers.kubernetes.shapes import (
    _Offers,
    _scheduler_share,
    _Selection,
    _selection,
    _shape,
)

#: Where a pod's gang is named, first match wins: scheduler-plugins coscheduling (current and older
#: label), Kueue pod groups, then Volcano's annotation.
GANG_LABELS: tuple[str, ...] = (
    "scheduling.x-k8s.io/pod-group",
    "pod-group.scheduling.sigs.k8s.io",
    "kueue.x-k8s.io/pod-group-name",
)
GANG_ANNOTATIONS: tuple[str, ...] = ("scheduling.k8s.io/group-name",)

_SKIPPED_PHASES = ("Succeeded", "Failed")


@dataclass
class _Pod:
    """A pod that asks for GPUs: its workload fields, and the node it is bound to."""

    key: str
    node: str | None
    values: dict[str, Any]
    kind: str
    created: str
    #: Whether a scheduler shares its GPU (KAI Scheduler's or HAMi's conventions), not the device plugin.
    scheduler_share: bool = False
    #: Its ``priorityClassName`` ("" for none) and ``spec.priority`` (``None`` when not set).
    klass: str = ""
    spec_priority: int | None = None


def _requests(spec: Mapping[str, Any], where: str) -> dict[str, Decimal]:
    """The pod's effective requests as the scheduler counts them: per resource the larger of the
    containers' sum (plus sidecars, init containers with ``restartPolicy: Always``) and each init
    container's peak (itself plus the sidecars started before it), plus the pod overhead; a container's
    limit stands in for a missing request (extended resources like ``nvidia.com/gpu`` are set as limits)."""

    def of(container: Mapping[str, Any]) -> dict[str, Decimal]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        name = container.get("name", "?")
        return {
            str(k): quantity(v, f"{where}: container '{name}' resources.requests.{k}")
            for k, v in merged.items()
        }

    def add(into: dict[str, Decimal], more: Mapping[str, Decimal]) -> dict[str, Decimal]:
        for k, v in more.items():
            into[k] = into.get(k, Decimal(0)) + v
        return into

    out: dict[str, Decimal] = {}
    for c in spec.get("containers") or ():
        add(out, of(c))
    sidecars: dict[str, Decimal] = {}
    peak: dict[str, Decimal] = {}
    for c in spec.get("initContainers") or ():
        own = of(c)
        if c.get("restartPolicy") == "Always":
            add(out, own)
            step = dict(add(sidecars, own))
        else:
            step = add(dict(own), sidecars)
        for k, v in step.items():
            peak[k] = max(peak.get(k, Decimal(0)), v)
    for k, v in peak.items():
        out[k] = max(out.get(k, Decimal(0)), v)
    for k, v in (spec.get("overhead") or {}).items():
        out[str(k)] = out.get(str(k), Decimal(0)) + quantity(v, f"{where}: spec.overhead.{k}")
    return out


def _gang(meta: Mapping[str, Any]) -> str | None:
    """The pod's gang (``<namespace>/<group>``) from coscheduling, Kueue or Volcano metadata."""
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    group = next((labels[k] for k in GANG_LABELS if labels.get(k)), None) or next(
        (annotations[k] for k in GANG_ANNOTATIONS if annotations.get(k)), None
    )
    return f"{meta.get('namespace', 'default')}/{group}" if group else None


def _pods(
    items: Iterable[Mapping[str, Any]],
    nodes: Mapping[str, _NodeInfo],
    audit: _Audit,
    team_label: str | None,
    catalog: HardwareCatalog,
    absent: Container[str] = (),
) -> tuple[list[_Pod], dict[str, list[int]], int]:
    """The pods that ask for GPUs, the CPU and memory that other pods hold on each GPU node, and how many
    pods were left out with their node (``absent``: cordoned or NotReady). Finished pods (Succeeded,
    Failed) and terminating ones (``metadata.deletionTimestamp``: their devices are released when they end)
    are skipped. Every pod left out, and every GPU resource or MIG profile no node can offer, is noted
    in ``audit``; a pod with a field gpuplan cannot read is left out with a warning naming it
    (:meth:`_Audit.unreadable`), and the others are imported."""
    held: dict[str, list[int]] = {name: [0, 0] for name in nodes}
    offers = _Offers(nodes.values())
    pods: list[_Pod] = []
    seen: set[str] = set()
    with_absent = 0
    for n, raw in enumerate(items):
        meta = raw.get("metadata") or {}
        key = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
        if not meta.get("name"):
            audit.unreadable(f"items[{n}]", f"pods items[{n}]: no metadata.name")
            continue
        if key in seen:
            audit.unreadable(key, f"pod '{key}': appears more than once (the first is imported)")
            continue
        seen.add(key)
        try:
            found = _pod(raw, key, nodes, audit, offers, team_label, catalog, absent)
        except InputError as exc:
            audit.unreadable(key, str(exc))
            continue
        if found is None:
            continue
        if isinstance(found, _Pod):
            pods.append(found)
        elif found[0] == "absent":
            with_absent += 1
        else:
            held[found[0]][0] += found[1]
            held[found[0]][1] += found[2]
    return pods, held, with_absent


def _pod(
    raw: Mapping[str, Any],
    key: str,
    nodes: Mapping[str, _NodeInfo],
    audit: _Audit,
    offers: _Offers,
    team_label: str | None,
    catalog: HardwareCatalog,
    absent: Container[str],
) -> _Pod | tuple[str, int, int] | None:
    """One pod: the workload it becomes, or ``(node, cpu, memory)`` for a bound pod without a GPU (what it
    takes off its node), ``("absent", 0, 0)`` for one bound to a node left out, ``None`` for a pod left
    out otherwise. Raises :class:`InputError` naming the field gpuplan cannot read, before anything is
    noted about the pod."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    where = f"pod '{key}'"
    phase = status.get("phase", "Pending")
    node_name = spec.get("nodeName") or None
    if phase in _SKIPPED_PHASES or meta.get("deletionTimestamp"):
        audit.leave(key, FINISHED if phase in _SKIPPED_PHASES else TERMINATING, phase)
        return None
    if node_name in absent:
        audit.leave(key, ON_UNAVAILABLE, str(node_name))
        return ("absent", 0, 0)
    req = _requests(spec, where)
    node = nodes.get(node_name) if node_name else None
    selection = _selection(spec, where, catalog) if node is None else _Selection()
    scheduled_share = _scheduler_share(meta, req, where)
    typos = [] if scheduled_share else audit.extra_gpu_kinds(key, req)
    asked = {k: v for k, v in req.items() if k not in typos}
    shape: tuple[str, dict[str, Any]] | None = (
        ("fraction", dict(scheduled_share))
        if scheduled_share
        else _shape(asked, node, selection, offers, where)
    )
    priority = _priority(spec, where)
    filters = pod_scheduling(spec, asked, scheduled_share is not None, where) if shape is not None else {}
    if shape is not None and node_name and node is None:
        raise InputError(f"{where}: spec.nodeName: '{node_name}' is not a GPU node of the node list")
    cpu = cpu_milli(req.get("cpu", Decimal(0)))
    mem = memory_mib(req.get("memory", Decimal(0)))
    for resource in typos:
        audit.warn(
            f"pod '{key}': resources.requests.{resource}: no node offers it and no GPU model has it; "
            "gpuplan plans the pod's other GPU request, but Kubernetes will not bind it"
        )
    imported = audit.check(key, asked, shape, node_name, selection)
    if shape is None:
        return (node.name, cpu, mem) if node is not None else None
    if not imported:
        return None
    kind, values = shape
    labels = meta.get("labels") or {}
    team = str(labels.get(team_label) or "") if team_label else ""
    values = {
        "id": key,
        "team": team or meta.get("namespace", "default"),
        "priority": spec.get("priority") or 0,
        **values,
        "cpu_milli": cpu,
        "memory_mib": mem,
    }
    if selection.models:
        values["gpu_models"] = "|".join(selection.models)
    gang = _gang(meta)
    if gang:
        values["gang"] = gang
    created = str(meta.get("creationTimestamp") or "")
    if created:
        values["queued_since"] = created
    values.update(pod_identity(meta, spec))
    values.update(filters)
    return _Pod(
        key,
        node_name,
        values,
        kind,
        created,
        scheduler_share=scheduled_share is not None,
        klass=str(spec.get("priorityClassName") or ""),
        spec_priority=priority,
    )


def _priority(spec: Mapping[str, Any], where: str) -> int | None:
    """The pod's ``spec.priority`` (its PriorityClass's ``value``, set on admission), ``None`` if unset."""
    value = spec.get("priority")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: spec.priority: '{value}' is not a whole number")
    return value


def pod_identity(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, str]:
    """What the pod is, as workload fields (CSV text): its namespace, its first container's image, its
    controller (``Kind/name`` of the owner reference marked ``controller``), its labels, its scheduler and
    its scheduling gates, so that an export acts on this pod rather than on a new one."""
    out = {"namespace": str(meta.get("namespace") or "default")}
    containers = [c for c in spec.get("containers") or () if isinstance(c, Mapping)]
    image = str(containers[0].get("image") or "") if containers else ""
    if image:
        out["image"] = image
    owner = next(
        (o for o in meta.get("ownerReferences") or () if isinstance(o, Mapping) and o.get("controller")), None
    )
    if owner is not None and owner.get("kind") and owner.get("name"):
        out["owner"] = f"{owner['kind']}/{owner['name']}"
    labels = meta.get("labels") or {}
    if labels:
        out["labels"] = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    scheduler = str(spec.get("schedulerName") or "")
    if scheduler:
        out["scheduler_name"] = scheduler
    gates = [str(g.get("name")) for g in spec.get("schedulingGates") or () if isinstance(g, Mapping)]
    if gates:
        out["scheduling_gates"] = ",".join(gates)
    return out

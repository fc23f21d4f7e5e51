"""Running placements: the Kubernetes API does not say which GPU a pod holds, so running placements are
completed per node, deterministically and without double booking (whole GPUs first on the lowest free
indices, then MIG instances in layout order, then shares first fit), checked by the same occupancy rules
the executor uses; kubelet PodResources dumps, when given, say which pods hold the same GPU. Those
indices stay a guess (``gpus_guessed``): plans, diffs and actions compare a guessed placement by node and
GPUs held, not by index.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from gpuplan.models import Cluster, HardwareCatalog
from gpuplan.models.base import InputError
from gpuplan.models.plan import GpuUse
from gpuplan.models.workload import MEMORY_ONLY_MILLI, where
from gpuplan.planner.io.files import read_structured
from gpuplan.planner.io.importers.kubernetes.conventions import GPU, SHARED
from gpuplan.planner.io.importers.kubernetes.nodes import _NodeInfo
from gpuplan.planner.io.importers.kubernetes.pods import _Pod
from gpuplan.planner.validation.occupancy import Holding, Occupancy

_KIND_ORDER = {"whole": 0, "mig": 1, "fraction": 2}


def _use(pod: _Pod, index: int) -> GpuUse:
    """The pod's use of GPU ``index`` (whole or a share; a memory-only share takes the least milli-GPU)."""
    milli = (pod.values.get("gpu_milli") or MEMORY_ONLY_MILLI) if pod.kind == "fraction" else None
    return GpuUse(index=index, milli=milli)


def _hold(pod: _Pod, node: str, uses: tuple[GpuUse, ...], *, cpu: int = 0, memory: int = 0) -> Holding:
    """What the pod takes on ``node`` at ``uses``, GPU memory included."""
    return Holding(node, uses, cpu, memory, gpu_memory_mib=pod.values.get("gpu_memory_mib", 0))


def _pinned_uses(
    pod: _Pod, occ: Occupancy, node: _NodeInfo, devices: list[str], pinned: dict[str, int]
) -> tuple[GpuUse, ...]:
    """The GPUs a pod holds by the device IDs kubelet reports: one GPU per physical device ID (time-sliced
    IDs ``GPU-<uuid>::<n>`` share their GPU), mapped to the node's GPU indices as they first appear."""
    uuids = list(dict.fromkeys(d.split("::")[0] for d in devices))
    need = pod.values["gpus"] if pod.kind == "whole" else 1
    if len(uuids) != need:
        raise InputError(
            f"pod '{pod.key}': PodResources lists {len(uuids)} GPU(s) for it, but it asks for {need}"
        )
    taken = set(pinned.values())
    uses = []
    for uuid in uuids:
        index = pinned.get(uuid)
        if index is None:
            free = (
                i
                for i in range(node.gpus)
                if i not in taken
                and occ.problem((pod.key, 0), _hold(pod, node.name, (_use(pod, i),))) is None
            )
            index = next(free, None)
            if index is None:
                return ()
            pinned[uuid] = index
            taken.add(index)
        uses.append(_use(pod, index))
    return tuple(uses)


def _uses(pod: _Pod, occ: Occupancy, node: _NodeInfo) -> tuple[GpuUse, ...]:
    """The GPUs a running pod takes on its node: the first that are free, in index order."""
    name = node.name
    key = (pod.key, 0)
    indices = range(node.gpus)
    if pod.kind == "whole":
        free = [i for i in indices if occ.problem(key, _hold(pod, name, (_use(pod, i),))) is None]
        wanted = pod.values["gpus"]
        return tuple(_use(pod, i) for i in free[:wanted]) if len(free) >= wanted else ()
    if pod.kind == "mig":
        for i in indices:
            for inst in sorted(occ.gpus[(name, i)].mig or (), key=lambda x: x[1]):
                if inst[0] != pod.values["mig_profile"]:
                    continue
                use = GpuUse(index=i, mig_profile=inst[0], mig_start=inst[1])
                if occ.problem(key, _hold(pod, name, (use,))) is None:
                    return (use,)
        return ()
    return next(
        ((_use(pod, i),) for i in indices if occ.problem(key, _hold(pod, name, (_use(pod, i),))) is None), ()
    )


def _no_room(pod: _Pod, occ: Occupancy, node: _NodeInfo) -> str:
    """Why no GPU of the node takes the pod: for a share, what its last GPU lacks (milli-GPU or memory)."""
    if pod.kind == "fraction" and node.gpus:
        last = node.gpus - 1
        why = occ.problem((pod.key, 0), _hold(pod, node.name, (_use(pod, last),)))
        if why is not None:
            return f"no GPU has room for the share; {why}"
    return "no free GPU of the kind it asks for"


def complete_placements(
    pods: list[_Pod],
    cluster: Cluster,
    nodes: Mapping[str, _NodeInfo],
    catalog: HardwareCatalog,
    devices: Mapping[str, list[str]] | None = None,
) -> dict[str, str]:
    """Give every bound pod GPU indices on its node (``running_on``), never double booking a GPU; return
    the pods that do not fit (by key, with why), which the caller leaves out.

    Pods are placed node by node, whole GPUs first, then MIG instances, then time-sliced shares; in each
    group the pods whose GPU device IDs kubelet reported (``devices``, by pod) come first and keep the
    grouping those IDs give, then the rest, oldest first, on the lowest indices the occupancy rules
    allow. A pod that does not fit (the node offers fewer devices than its pods hold, or its PodResources
    entry disagrees with its request) is returned, not placed.
    """
    known = devices or {}
    occ = Occupancy.empty(cluster, catalog)
    pinned: dict[str, dict[str, int]] = {name: {} for name in nodes}

    def order(p: _Pod) -> tuple[str, int, bool, str, str]:
        return (p.node or "", _KIND_ORDER[p.kind], p.key not in known, p.created, p.key)

    failed: dict[str, str] = {}
    for pod in sorted((p for p in pods if p.node), key=order):
        node = nodes[pod.node or ""]
        ids = known.get(pod.key) if pod.kind != "mig" else None
        try:
            uses = _pinned_uses(pod, occ, node, ids, pinned[node.name]) if ids else _uses(pod, occ, node)
        except InputError as exc:
            failed[pod.key] = str(exc)
            continue
        hold = _hold(pod, node.name, uses, cpu=pod.values["cpu_milli"], memory=pod.values["memory_mib"])
        why = occ.problem((pod.key, 0), hold) if uses else _no_room(pod, occ, node)
        if why is not None:
            failed[pod.key] = f"pod '{pod.key}': spec.nodeName '{node.name}': the node cannot hold it ({why})"
            continue
        occ.start((pod.key, 0), hold)
        pod.values["running_on"] = where(node.name, uses)
        # The API names the node, not the GPUs: the indices are this function's choice.
        pod.values["gpus_guessed"] = "true"
    return failed


def load_pod_resources(paths: Iterable[Path]) -> dict[str, list[str]]:
    """GPU device IDs per pod (``<namespace>/<name>``) from kubelet PodResources dumps.

    Each file is a ``ListPodResourcesResponse`` as JSON, with protobuf (``podResources``, ``deviceIds``)
    or Go (``pod_resources``, ``device_ids``) field names; only ``nvidia.com/gpu`` and
    ``nvidia.com/gpu.shared`` devices are kept (MIG device IDs do not name their GPU).
    """
    out: dict[str, list[str]] = {}
    for path in paths:
        raw = read_structured(Path(path))
        entries = raw.get("pod_resources", raw.get("podResources")) if isinstance(raw, dict) else None
        if not isinstance(entries, list):
            raise InputError(f"{path}: expected a ListPodResourcesResponse (a 'pod_resources' list)")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not entry.get("name"):
                raise InputError(f"{path}: pod_resources[{i}]: expected a pod with a name")
            ids = out.setdefault(f"{entry.get('namespace', 'default')}/{entry['name']}", [])
            for container in entry.get("containers") or ():
                for dev in container.get("devices") or ():
                    if dev.get("resource_name", dev.get("resourceName")) in (GPU, SHARED):
                        ids.extend(str(d) for d in dev.get("device_ids", dev.get("deviceIds")) or ())
    return {k: v for k, v in out.items() if v}

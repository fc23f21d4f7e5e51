"""Import of a Kubernetes GPU fleet's real state (``kubectl get nodes -o json`` and ``kubectl get pods -A
-o json``, NVIDIA GPU Operator conventions) into a gpuplan cluster and workload list.

Nodes: the GPU model comes from GPU Feature Discovery's ``nvidia.com/gpu.product`` label (the
``-SHARED`` and ``-MIG-<profile>`` suffixes the device plugin adds are dropped), the GPU count from the
allocatable resources (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, ``nvidia.com/mig-<profile>``) or
else ``nvidia.com/gpu.count``, the MIG layout from ``nvidia.com/mig.config`` (``all-disabled``,
``all-<profile>``, ``all-balanced``) or else the ``mig-<profile>`` counts, the node's CPU and memory from
its allocatable resources less what pods gpuplan does not plan hold there (DaemonSet and static pods,
and pods without GPUs). ``nvidia.com/gpu.machine`` naming a reference topology of the catalog
(``DGX-H100``) gives the GPUs' NUMA nodes and links; other multi-GPU nodes are named in a warning and can
be given a ``topo -m`` dump or a reference topology (``--topology``). Nodes without GPUs are left out, as
no imported pod needs them; so are GPU nodes that take no new pods (cordoned, or not Ready), with the
pods bound to them: the cluster model has no way to keep work off a node, and leaving it out keeps new
work off it and its pods where they are. MPS sharing counts as time-slicing (each of ``r`` replicas a
``1000 / r`` share).

Pods: each pod that asks for GPUs becomes a one-replica workload ``<namespace>/<name>`` (pods of one
gang share its ``gang``); Succeeded, Failed and terminating pods are skipped. Requests (else limits) give
the shape: ``nvidia.com/gpu`` whole GPUs, or a MIG instance on a ``single``-strategy MIG node, or a
time-sliced share on a node that shares without renaming (for a pod not yet bound, what its
``nvidia.com/gpu.product`` selection's ``-MIG-<profile>`` or ``-SHARED`` suffix says, else what all the
nodes it may go to offer under that name when they agree); ``nvidia.com/gpu.shared`` a share of
``1000 / replicas`` milli-GPU; ``nvidia.com/mig-<profile>`` that MIG profile (``.`` in the resource name
for the ``+`` of the profile). The Kubernetes API does not say which GPU a pod holds, so running
placements are completed per node, deterministically and without double booking (whole GPUs first on
the lowest free indices, then MIG instances in layout order, then shares first fit), checked by the same
occupancy rules the executor uses; kubelet PodResources dumps, when given, say which pods hold the same
GPU. Those indices stay a guess (``gpus_guessed``): plans, diffs and actions compare a guessed placement
by node and GPUs held, not by index. Each workload keeps what the pod is (:func:`pod_identity`), for the
export to act on that pod.

Tiers come from the priority class: named in the tier map, else ranked by ``spec.priority`` onto the
policy's tiers; pods of the least important tier are preemptible unless the tier map says otherwise.
Nothing is dropped silently: ``nvidia.com/`` resources no node offers and MIG profiles no model the pod
may go to has are warnings naming pod and resource, and every pod left out is listed with its reason.
"""

from __future__ import annotations

import csv
import difflib
import fnmatch
import json
import logging
import re
from collections import Counter
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gpuplan.models import (
    BACKGROUND,
    LATENCY_SENSITIVE,
    STANDARD,
    Cluster,
    HardwareCatalog,
    Workload,
    default_catalog,
)
from gpuplan.models.base import InputError
from gpuplan.models.cluster import MigInstance, mig_layout_problems
from gpuplan.models.hardware import GpuModelSpec
from gpuplan.models.plan import GpuUse
from gpuplan.models.policy import Tier, default_tiers
from gpuplan.models.workload import MEMORY_ONLY_MILLI
from gpuplan.planner.io.importers.nvidia_smi import lookup_gpu_model, node_from_topo
from gpuplan.planner.pipeline.actions import where
from gpuplan.planner.pipeline.files import WORKLOAD_COLUMNS, describe, read_structured
from gpuplan.planner.pipeline.occupancy import FULL_MILLI, Holding, Occupancy

log = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
MEMORY = "nvidia.com/gpu.memory"
MACHINE = "nvidia.com/gpu.machine"
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STRATEGY = "nvidia.com/mig.strategy"
SHARING = "nvidia.com/gpu.sharing-strategy"
REPLICAS = "nvidia.com/gpu.replicas"
#: KAI Scheduler's pod annotations for a share of one GPU: its memory in MiB, or a fraction of the GPU.
KAI_GPU_MEMORY = "gpu-memory"
KAI_GPU_FRACTION = "gpu-fraction"
#: HAMi's resources for a share of one GPU (per ``nvidia.com/gpu`` device): memory in MiB, memory in
#: percent of the GPU, compute in percent; and the node annotation of HAMi's device plugin, whose
#: ``nvidia.com/gpu`` counts virtual GPUs (``deviceSplitCount`` per GPU), not GPUs.
HAMI_GPU_MEMORY = "nvidia.com/gpumem"
HAMI_GPU_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_GPU_CORES = "nvidia.com/gpucores"
HAMI_REGISTER = "hami.io/node-nvidia-register"

#: Where a pod's gang is named, first match wins: scheduler-plugins coscheduling (current and older
#: label), Kueue pod groups, then Volcano's annotation.
GANG_LABELS: tuple[str, ...] = (
    "scheduling.x-k8s.io/pod-group",
    "pod-group.scheduling.sigs.k8s.io",
    "kueue.x-k8s.io/pod-group-name",
)
GANG_ANNOTATIONS: tuple[str, ...] = ("scheduling.k8s.io/group-name",)

#: Tier of a ``priorityClassName`` unless ``--tier-map`` says otherwise; other classes are ranked by
#: priority onto the policy's tiers (:func:`assign_tiers`).
DEFAULT_TIER_MAP: dict[str, str] = {
    "system-node-critical": LATENCY_SENSITIVE,
    "system-cluster-critical": LATENCY_SENSITIVE,
    "latency-sensitive": LATENCY_SENSITIVE,
    "high-priority": LATENCY_SENSITIVE,
    "standard": STANDARD,
    "low-priority": BACKGROUND,
    "background": BACKGROUND,
}

#: Node labels kept in the cluster file: topology, and the GPU Operator's view of the node.
KEPT_LABEL_PREFIXES: tuple[str, ...] = (
    "topology.kubernetes.io/",
    "node.kubernetes.io/instance-type",
    "nvidia.com/gpu.clique",
    PRODUCT,
    MIG_CONFIG,
    MIG_STRATEGY,
    SHARING,
    REPLICAS,
)

_SKIPPED_PHASES = ("Succeeded", "Failed")
_SHARING_MODES = ("time-slicing", "mps")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    suffix: Decimal(f"1e{exp}")
    for suffix, exp in (("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6), ("G", 9), ("T", 12),
                        ("P", 15), ("E", 18))
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")
_MIB = Decimal(2**20)
#: The device plugin's suffix on ``nvidia.com/gpu.product`` under the MIG ``single`` strategy.
_MIG_SUFFIX = re.compile(r"-MIG-([\w.+-]+)$")


def quantity(text: Any, where: str) -> Decimal:
    """A Kubernetes resource quantity (``64``, ``63500m``, ``512Mi``, ``1e3``) as a plain number."""
    m = _QUANTITY.match(str(text).strip())
    if m is None:
        raise InputError(f"{where}: '{text}' is not a Kubernetes quantity")
    number, exponent, suffix = m.groups()
    value = Decimal(number)
    if exponent:
        return value.scaleb(int(exponent[1:]))
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    return value * _DECIMAL[suffix or ""]


def cpu_milli(cores: Decimal, *, up: bool = True) -> int:
    """CPU cores as milli-CPU (rounded up for requests, down for capacities)."""
    return int((cores * 1000).to_integral_value(ROUND_CEILING if up else ROUND_FLOOR))


def memory_mib(size: Decimal, *, up: bool = True) -> int:
    """Bytes as MiB (rounded up for requests, down for capacities)."""
    return int((size / _MIB).to_integral_value(ROUND_CEILING if up else ROUND_FLOOR))


def _whole(value: Decimal, where: str) -> int:
    """A device count (a whole, non-negative number)."""
    if value < 0 or value != value.to_integral_value():
        raise InputError(f"{where}: '{value}' is not a whole number of devices")
    return int(value)


def _count(text: Any, where: str) -> int:
    """A device count given as a quantity."""
    return _whole(quantity(text, where), where)


# --------------------------------------------------------------------------------------------
# Nodes


@dataclass
class _NodeInfo:
    """What the importer knows about one GPU node beyond its cluster entry."""

    name: str
    model: GpuModelSpec
    gpus: int
    layouts: list[tuple[MigInstance, ...]]
    single_profile: str | None
    replicas: int
    shared_renamed: bool
    #: Whether a scheduler (HAMi) shares the GPUs, whatever the device plugin's mode.
    scheduler_shared: bool = False
    entry: dict[str, Any] = field(default_factory=dict)

    @property
    def time_sliced(self) -> bool:
        """Whether the device plugin offers the node's non-MIG GPUs as time-sliced replicas."""
        return self.replicas > 1


def _mig_profile(name: str) -> str:
    """A MIG profile as the catalog names it, from a device plugin resource, product suffix or MIG manager
    configuration, which spell the ``+`` of a profile with extensions as ``.`` (``1g.10gb.me`` is
    ``1g.10gb+me``: Kubernetes names have no ``+``)."""
    return re.sub(r"^(\d+g\.\d+gb)\.", r"\1+", name)


def mig_resource(profile: str) -> str:
    """The device plugin's resource for a MIG profile (``1g.10gb+me`` is ``nvidia.com/mig-1g.10gb.me``)."""
    return MIG_PREFIX + profile.replace("+", ".")


def _product_base(product: str) -> str:
    """A GFD product label without the device plugin's ``-SHARED`` and ``-MIG-<profile>`` suffixes."""
    return _MIG_SUFFIX.sub("", re.sub(r"-SHARED$", "", product.strip()))


def _resolve_product(node: str, product: str, memory: str | None, catalog: HardwareCatalog) -> GpuModelSpec:
    """The catalog model of a GFD product label.

    When the name alone is unknown or ambiguous (``NVIDIA-H100-PCIe`` fits the 80 and 94 GB models,
    ``NVIDIA-GH200-480GB`` counts the CPU's memory too), the GPU's memory decides: the
    ``nvidia.com/gpu.memory`` label (MiB), or under the MIG ``single`` strategy (where that label is the MIG
    device's memory) the memory of the models offering the product's MIG profile. A name with a form
    factor the catalog leaves out (``NVIDIA-A800-SXM4-80GB``) is tried last without it.
    """
    base = _product_base(product)
    single = _MIG_SUFFIX.search(product.strip())
    sizeless = re.sub(r"(?i)[-_ ]?\d+GB", "", base)
    if single:
        sizes = [f"{round(m.memory_gib)}GB" for m in catalog.models if single.group(1) in m.profile_map]
    else:
        sizes = [f"{round(int(memory) / 1024)}GB"] if memory and memory.isdigit() else []
    names = [base, *(n for size in dict.fromkeys(sizes) for n in (f"{base} {size}", f"{sizeless} {size}"))]
    names.append(re.sub(r"(?i)[-_ ](SXM\d*|PCIE|HBM\d*E?)(?=[-_ ]|$)", "", base))
    spec = next((m for m in (lookup_gpu_model(n, catalog) for n in names) if m is not None), None)
    if spec is None:
        raise InputError(f"node '{node}': label {PRODUCT}: unknown GPU product '{product}'")
    return spec


def _fit_layout(spec: GpuModelSpec, profiles: list[str]) -> tuple[MigInstance, ...] | None:
    """A valid placement of ``profiles`` on one GPU of ``spec`` (largest first, lowest starts), if any."""
    order = sorted(profiles, key=lambda p: (-spec.profile_map[p].memory_slices, p))

    def place(i: int, taken: tuple[MigInstance, ...]) -> tuple[MigInstance, ...] | None:
        if i == len(order):
            return taken
        prof = spec.profile_map[order[i]]
        for start in sorted(prof.starts):
            trial = (*taken, MigInstance(profile=prof.name, start=start))
            if not mig_layout_problems(spec, trial):
                found = place(i + 1, trial)
                if found is not None:
                    return found
        return None

    found = place(0, ())
    return None if found is None else tuple(sorted(found, key=lambda i: i.start))


def _max_layout(spec: GpuModelSpec, profile: str) -> tuple[MigInstance, ...]:
    """As many instances of ``profile`` as one GPU of ``spec`` holds (MIG manager's ``all-<profile>``)."""
    best: tuple[MigInstance, ...] = ()
    for n in range(1, spec.profile_map[profile].max_instances + 1):
        found = _fit_layout(spec, [profile] * n)
        if found is None:
            break
        best = found
    return best


def _balanced(spec: GpuModelSpec) -> list[str]:
    """MIG manager's ``all-balanced``: two of the smallest 1g profile, one 2g and (8-slice models) one 3g."""
    plain = [p for p in spec.profiles if "+" not in p.name and "-" not in p.name]
    smallest = {
        c: min((p for p in plain if p.compute_slices == c), key=lambda p: p.memory_slices, default=None)
        for c in (1, 2, 3)
    }
    out = [p.name for p in (smallest[1], smallest[1], smallest[2]) if p is not None]
    if spec.memory_slices >= 8 and smallest[3] is not None:
        out.append(smallest[3].name)
    return out


def _config_profiles(config: str, spec: GpuModelSpec) -> list[str] | None:
    """The MIG devices of one GPU under a MIG manager default configuration (``all-<profile>``,
    ``all-balanced``); ``None`` for other names."""
    if config == "all-balanced":
        return _balanced(spec)
    named = re.fullmatch(r"all-(.+)", config)
    wanted = _mig_profile(named.group(1)) if named else ""
    return [i.profile for i in _max_layout(spec, wanted)] if wanted in spec.profile_map else None


def _distribute(spec: GpuModelSpec, counts: Counter[str], gpus: int) -> list[tuple[MigInstance, ...]] | None:
    """``counts`` MIG devices spread over ``gpus`` GPUs: largest first, each on the least filled GPU where a
    valid layout still exists (``None`` if they do not fit)."""
    held: list[list[str]] = [[] for _ in range(gpus)]
    for prof in sorted(counts, key=lambda p: (-spec.profile_map[p].memory_slices, p)):
        for _ in range(counts[prof]):
            order = sorted(
                range(gpus), key=lambda g: (sum(spec.profile_map[p].memory_slices for p in held[g]), g)
            )
            target = next((g for g in order if _fit_layout(spec, [*held[g], prof]) is not None), None)
            if target is None:
                return None
            held[target].append(prof)
    return [_fit_layout(spec, h) or () for h in held]


def _mig_layouts(
    name: str, spec: GpuModelSpec, config: str, counts: Counter[str], mig_gpus: int | None
) -> list[tuple[MigInstance, ...]]:
    """The layouts of a node's MIG GPUs (mixed strategy): the default configuration the label names when
    the offered devices match it, else the offered devices spread over the MIG GPUs."""
    per_gpu = _config_profiles(config, spec)
    if per_gpu is not None and counts:
        need = Counter(per_gpu)
        multiples = {counts[p] // need[p] for p in need} if set(counts) == set(need) else set()
        k = next(iter(multiples)) if len(multiples) == 1 else 0
        if k and all(counts[p] == k * need[p] for p in need) and mig_gpus in (None, k):
            return [_fit_layout(spec, per_gpu) or ()] * k
    if not counts:
        # MIG is on but no device is offered yet (the MIG manager is still applying the configuration).
        return [(_fit_layout(spec, per_gpu) or ()) if per_gpu else ()] * (mig_gpus or 0)
    slices = sum(spec.profile_map[p].memory_slices * n for p, n in counts.items())
    low = max(
        [-(-slices // spec.memory_slices)]
        + [-(-n // spec.profile_map[p].max_instances) for p, n in counts.items()]
    )
    for gpus in [mig_gpus] if mig_gpus else range(low, sum(counts.values()) + 1):
        found = _distribute(spec, counts, gpus)
        if found is not None:
            return found
    offered = ", ".join(f"{n}x {p}" for p, n in sorted(counts.items()))
    raise InputError(
        f"node '{name}': label {MIG_CONFIG}: the MIG devices offered ({offered}) do not fit "
        f"{mig_gpus or 'its'} {spec.name} GPUs"
    )


def _unavailable(raw: Mapping[str, Any]) -> str | None:
    """Why a node takes no new pods, if it does not: cordoned (``spec.unschedulable``) or not Ready (its
    ``Ready`` condition is ``False`` or ``Unknown``; the node controller taints it NoSchedule)."""
    if (raw.get("spec") or {}).get("unschedulable"):
        return "cordoned"
    conditions = (raw.get("status") or {}).get("conditions") or ()
    ready = next((c for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") != "True":
        return "NotReady"
    return None


def _offers_gpus(raw: Mapping[str, Any]) -> bool:
    """Whether a node item has a GPU product label or offers GPU devices."""
    labels = (raw.get("metadata") or {}).get("labels") or {}
    alloc = (raw.get("status") or {}).get("allocatable") or {}
    devices = (k for k in alloc if k in (GPU, SHARED) or str(k).startswith(MIG_PREFIX))
    return PRODUCT in labels or any(str(alloc[k]).strip() not in ("0", "") for k in devices)


def _node(raw: Mapping[str, Any], catalog: HardwareCatalog) -> _NodeInfo | None:
    """The GPU node of a ``kubectl get nodes`` item (``None`` for a node without GPUs)."""
    meta = raw.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name:
        raise InputError("a node has no metadata.name")
    labels: dict[str, str] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    alloc: dict[str, Any] = (raw.get("status") or {}).get("allocatable") or {}
    where = f"node '{name}': status.allocatable"
    gpu_alloc = _count(alloc.get(GPU, 0), f"{where}.{GPU}")
    shared_alloc = _count(alloc.get(SHARED, 0), f"{where}.{SHARED}")
    hami = HAMI_REGISTER in (meta.get("annotations") or {})
    if hami:
        gpu_alloc = _hami_gpus(name, labels, meta["annotations"][HAMI_REGISTER])
    counts: Counter[str] = Counter()
    resource_of: dict[str, str] = {}
    for k, v in alloc.items():
        if k.startswith(MIG_PREFIX):
            profile = _mig_profile(k.removeprefix(MIG_PREFIX))
            counts[profile] = _count(v, f"{where}.{k}")
            resource_of[profile] = k
    counts = +counts
    if PRODUCT not in labels:
        if gpu_alloc or shared_alloc or counts:
            raise InputError(f"node '{name}': label {PRODUCT}: missing on a node that offers GPUs")
        return None
    spec = _resolve_product(name, labels[PRODUCT], labels.get(MEMORY), catalog)
    single_match = _MIG_SUFFIX.search(labels[PRODUCT])
    single = (
        _mig_profile(single_match.group(1)) if single_match and labels.get(MIG_STRATEGY) == "single" else None
    )
    config = labels.get(MIG_CONFIG, "")
    for profile in [*counts, *([single] if single else [])]:
        if profile not in spec.profile_map:
            field_name = (
                f"label {PRODUCT}" if profile == single else f"status.allocatable.{resource_of[profile]}"
            )
            raise InputError(
                f"node '{name}': {field_name}: {spec.name} does not offer MIG profile '{profile}'"
            )
    mig_on = bool(counts) or single is not None or config not in ("", "all-disabled")
    if mig_on and not spec.mig_capable:
        raise InputError(
            f"node '{name}': label {MIG_CONFIG}: '{config}' asks for MIG but {spec.name} has none"
        )
    if config == "all-disabled" and (counts or single):
        raise InputError(f"node '{name}': label {MIG_CONFIG}: 'all-disabled' but the node offers MIG devices")
    label_count = labels.get(COUNT, "")
    label_total = int(label_count) if label_count.isdigit() else None
    replicas = _replicas(name, labels, gpu_alloc + shared_alloc, label_total, shared=bool(shared_alloc))
    if single is not None:
        # The single strategy offers every MIG device as nvidia.com/gpu (and counts them in gpu.count).
        per_gpu = _config_profiles(config, spec)
        layout = _fit_layout(spec, per_gpu) if per_gpu and set(per_gpu) == {single} else None
        layout = layout or _max_layout(spec, single)
        devices = gpu_alloc or label_total or 0
        layouts, full = [layout] * -(-devices // len(layout)), 0
    else:
        full = -(-(gpu_alloc + shared_alloc) // replicas)
        mig_gpus = label_total - full if label_total is not None and label_total > full else None
        layouts = _mig_layouts(name, spec, config, counts, mig_gpus) if mig_on else []
        if not full and not layouts and not mig_on:
            full = label_total or 0
    if not full and not layouts:
        return None
    info = _NodeInfo(
        name=name, model=spec, gpus=len(layouts) + full, layouts=layouts, single_profile=single,
        replicas=replicas, shared_renamed=bool(shared_alloc), scheduler_shared=hami,
    )  # fmt: skip
    info.entry = _entry(info, labels, alloc, catalog)
    return info


def _hami_gpus(name: str, labels: Mapping[str, str], register: Any) -> int:
    """The GPU count of a node whose ``nvidia.com/gpu`` HAMi inflates: ``nvidia.com/gpu.count``, else the
    devices HAMi's device plugin registered (a JSON list, or ``:``-separated entries in older versions)."""
    label = labels.get(COUNT, "")
    if label.isdigit():
        return int(label)
    text = str(register).strip()
    try:
        devices = json.loads(text)
    except ValueError:
        devices = [d for d in text.split(":") if d.strip()]
    if not isinstance(devices, list) or not devices:
        raise InputError(f"node '{name}': annotation {HAMI_REGISTER}: lists no GPU (and no label {COUNT})")
    return len(devices)


def _replicas(name: str, labels: Mapping[str, str], offered: int, gpus: int | None, *, shared: bool) -> int:
    """Time-sliced (or MPS) replicas per GPU: ``nvidia.com/gpu.replicas``, else offered devices per GPU;
    1 when the node does not share. Device plugins older than the ``nvidia.com/gpu.sharing-strategy``
    label say it by the product's ``-SHARED`` suffix or more than one replica."""
    text = labels.get(REPLICAS)
    marked = labels.get(PRODUCT, "").strip().endswith("-SHARED") or (text or "").strip() not in ("", "0", "1")
    if labels.get(SHARING, "none") not in _SHARING_MODES and not shared and not marked:
        return 1
    if text is None:
        return max(1, offered // gpus) if gpus else 1
    if not text.isdigit() or int(text) < 1:
        raise InputError(f"node '{name}': label {REPLICAS}: '{text}' is not a positive whole number")
    return int(text)


def _entry(
    info: _NodeInfo, labels: Mapping[str, str], alloc: Mapping[str, Any], catalog: HardwareCatalog
) -> dict[str, Any]:
    """The node's cluster-file entry (CPU and memory are the allocatable amounts; pods not planned are
    taken off later)."""
    where = f"node '{info.name}': status.allocatable"
    if "cpu" not in alloc or "memory" not in alloc:
        raise InputError(f"{where}: cpu and memory are required")
    kept = {k: v for k, v in sorted(labels.items()) if k.startswith(KEPT_LABEL_PREFIXES)}
    entry: dict[str, Any] = {
        "name": info.name,
        "pool": info.model.name,
        "labels": kept,
        "cpu_milli": cpu_milli(quantity(alloc["cpu"], f"{where}.cpu"), up=False),
        "memory_mib": memory_mib(quantity(alloc["memory"], f"{where}.memory"), up=False),
    }
    if info.gpus > len(info.layouts) and not info.scheduler_shared:
        # How the device plugin offers the non-MIG GPUs (docs/FORMATS.md): the planner keeps to it.
        entry["sharing"] = {"time-slicing": {"replicas": info.replicas}} if info.time_sliced else "exclusive"
    # GFD's machine label is the DMI product name: "NVIDIA DGX H100", "DGXH100", "DGXA100 920-23687-...".
    machine = re.sub(r"[^0-9a-z]", "", labels.get(MACHINE, "").lower()).removeprefix("nvidia")
    ref = next(
        (t for t in catalog.topologies if machine.startswith(re.sub(r"[^0-9a-z]", "", t.name.lower()))), None
    )

    def mig(i: int) -> dict[str, Any]:
        return {"instances": [inst.model_dump() for inst in info.layouts[i]]}

    if ref is not None and catalog.canonical(ref.gpu_model) == info.model.name and len(ref.gpus) == info.gpus:
        entry["topology"] = ref.name
        if info.layouts:
            entry["gpus"] = [{"index": i, "mig": mig(i)} for i in range(len(info.layouts))]
        return entry
    entry["gpus"] = [
        {
            "index": i,
            "model": info.model.name,
            "numa": 0,
            **({"mig": mig(i)} if i < len(info.layouts) else {}),
        }
        for i in range(info.gpus)
    ]
    return entry


# --------------------------------------------------------------------------------------------
# Pods


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


@dataclass(frozen=True)
class _Selection:
    """What a pod's ``nvidia.com/gpu.product`` node selection says: the allowed models, and the device
    plugin's suffix when every selected product carries the same one (a ``single``-strategy MIG profile,
    or ``-SHARED`` for time-sliced GPUs): ``nvidia.com/gpu`` then means that MIG device or share."""

    models: tuple[str, ...] = ()
    mig_profile: str | None = None
    shared: bool = False


def _selection(spec: Mapping[str, Any], where: str, catalog: HardwareCatalog) -> _Selection:
    """What a pod's ``nodeSelector`` or required node affinity on ``nvidia.com/gpu.product`` allows."""
    products: list[str] = []
    selector = (spec.get("nodeSelector") or {}).get(PRODUCT)
    field_name = f"spec.nodeSelector.{PRODUCT}"
    if selector:
        products.append(str(selector))
    else:
        affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        terms = affinity.get("nodeSelectorTerms") or []
        found = [
            [str(v) for v in e.get("values") or ()]
            for t in terms
            for e in t.get("matchExpressions") or ()
            if e.get("key") == PRODUCT and e.get("operator") == "In"
        ]
        if terms and len(found) == len(terms):
            products = [v for vs in found for v in vs]
            field_name = "spec.affinity.nodeAffinity (nvidia.com/gpu.product In)"
    models: list[str] = []
    for product in products:
        model = lookup_gpu_model(_product_base(product), catalog)
        if model is None:
            raise InputError(f"{where}: {field_name}: unknown GPU product '{product}'")
        models.append(model.name)
    profiles = {
        _mig_profile(m.group(1)) if m else None for m in (_MIG_SUFFIX.search(p.strip()) for p in products)
    }
    shared = bool(products) and all(p.strip().endswith("-SHARED") for p in products)
    return _Selection(
        models=tuple(dict.fromkeys(models)),
        mig_profile=next(iter(profiles)) if len(profiles) == 1 else None,
        shared=shared,
    )


def _gpu_memory_mib(text: Any, where: str) -> int:
    """KAI Scheduler's ``gpu-memory``: MiB as a plain number (a quantity with a unit is converted)."""
    value = str(text).strip()
    mib = int(value) if value.isdigit() else memory_mib(quantity(value, where))
    if mib < 1:
        raise InputError(f"{where}: '{text}' is not a positive amount of GPU memory in MiB")
    return mib


def _percent_milli(value: Decimal, where: str) -> int:
    """A percentage of one GPU (1-100) as milli-GPU of a share (at most 999: a share is not the GPU)."""
    if not 0 < value <= 100:
        raise InputError(f"{where}: '{value}' is not a percentage between 1 and 100")
    return min(int((value * 10).to_integral_value(ROUND_CEILING)), FULL_MILLI - 1)


def _scheduler_share(
    meta: Mapping[str, Any], req: Mapping[str, Decimal], where: str
) -> dict[str, int] | None:
    """A share of one GPU that a scheduler hands out, as fraction fields (``gpu_memory_mib`` and/or
    ``gpu_milli``), ``None`` when the pod uses neither convention.

    KAI Scheduler: the pod asks for no GPU resource and carries ``gpu-memory`` (MiB) or ``gpu-fraction``
    (0-1, a share of the GPU). HAMi: ``nvidia.com/gpu: 1`` with ``nvidia.com/gpumem`` (MiB),
    ``nvidia.com/gpumem-percentage`` or ``nvidia.com/gpucores`` (percent of the GPU: milli-GPU ten
    times that)."""
    annotations = meta.get("annotations") or {}
    kai = [k for k in (KAI_GPU_MEMORY, KAI_GPU_FRACTION) if str(annotations.get(k) or "").strip()]
    hami = [k for k in (HAMI_GPU_MEMORY, HAMI_GPU_MEMORY_PERCENT, HAMI_GPU_CORES) if req.get(k)]
    if not kai and not hami:
        return None
    out: dict[str, int] = {}
    if kai:
        field_of = f"{where}: metadata.annotations.{kai[0]}"
        other = sorted(k for k, v in req.items() if v and (k in (GPU, SHARED) or k.startswith(MIG_PREFIX)))
        if other or hami:
            raise InputError(
                f"{field_of}: a KAI Scheduler GPU share, but the pod also asks for {(other + hami)[0]}"
            )
        if KAI_GPU_MEMORY in kai:
            out["gpu_memory_mib"] = _gpu_memory_mib(
                annotations[KAI_GPU_MEMORY], f"{where}: metadata.annotations.{KAI_GPU_MEMORY}"
            )
        if KAI_GPU_FRACTION in kai:
            where_f = f"{where}: metadata.annotations.{KAI_GPU_FRACTION}"
            fraction = quantity(annotations[KAI_GPU_FRACTION], where_f)
            if not 0 < fraction < 1:
                raise InputError(
                    f"{where_f}: '{annotations[KAI_GPU_FRACTION]}' is not a fraction between 0 and 1"
                )
            out["gpu_milli"] = _percent_milli(fraction * 100, where_f)
        return out
    field_of = f"{where}: resources.requests"
    count = _whole(req.get(GPU, Decimal(1)), f"{field_of}.{GPU}")
    if count != 1:
        raise InputError(f"{field_of}.{GPU}: {count} HAMi GPU shares; gpuplan places one share per pod")
    if HAMI_GPU_MEMORY in hami:
        out["gpu_memory_mib"] = _whole(req[HAMI_GPU_MEMORY], f"{field_of}.{HAMI_GPU_MEMORY}")
    percents = [(k, req[k]) for k in (HAMI_GPU_MEMORY_PERCENT, HAMI_GPU_CORES) if k in hami]
    if percents:
        out["gpu_milli"] = max(_percent_milli(v, f"{field_of}.{k}") for k, v in percents)
    return out


class _Offers:
    """What the fleet's nodes offer to pods not yet bound, asked once per distinct question (a fleet has
    few GPU models and selections, but may have thousands of pending pods)."""

    def __init__(self, nodes: Iterable[_NodeInfo]) -> None:
        self.nodes = tuple(nodes)
        self._shares: dict[tuple[tuple[str, ...], bool], int | None] = {}
        self._implied: dict[_Selection, _Selection] = {}

    def share(self, models: tuple[str, ...], *, renamed: bool) -> int | None:
        """The milli-GPU of a time-sliced share: the largest share (fewest replicas) among the nodes
        offering it under that resource name (``nvidia.com/gpu.shared`` when ``renamed``) and of the
        selected models, else among any time-sliced nodes; ``None`` when no node shares."""
        key = (models, renamed)
        if key not in self._shares:
            sharing = [n for n in self.nodes if n.time_sliced]
            fits = [
                n for n in sharing if n.shared_renamed == renamed and (not models or n.model.name in models)
            ]
            replicas = min((n.replicas for n in fits or sharing), default=None)
            self._shares[key] = None if replicas is None else min(FULL_MILLI // replicas, FULL_MILLI - 1)
        return self._shares[key]

    def implied(self, selection: _Selection) -> _Selection:
        """What one ``nvidia.com/gpu`` means when the product selection does not say: what every node the
        pod may go to (of the selected models) offers under that name, when they agree (MIG devices of one
        profile under the ``single`` strategy, or time-sliced shares); else whole GPUs."""
        if selection.mig_profile or selection.shared:
            return selection
        if selection not in self._implied:
            kinds: set[tuple[str, str | None]] = set()
            for n in self.nodes:
                if selection.models and n.model.name not in selection.models:
                    continue
                if n.single_profile is not None:
                    kinds.add(("mig", n.single_profile))
                elif n.time_sliced and not n.shared_renamed:
                    kinds.add(("shared", None))
                elif n.gpus > len(n.layouts) and not n.time_sliced:
                    kinds.add(("whole", None))
            ((kind, profile),) = kinds if len(kinds) == 1 else {("whole", None)}
            self._implied[selection] = _Selection(
                models=selection.models, mig_profile=profile, shared=kind == "shared"
            )
        return self._implied[selection]


def _shape(
    req: Mapping[str, Decimal],
    node: _NodeInfo | None,
    selection: _Selection,
    offers: _Offers,
    where: str,
) -> tuple[str, dict[str, Any]] | None:
    """The pod's GPU shape as (kind, workload fields), ``None`` when it asks for no GPU. A bound pod's
    ``nvidia.com/gpu`` means what its node offers; a pending pod's, what its product selection names."""
    field_of = f"{where}: resources.requests"
    asked = {
        k: _whole(v, f"{field_of}.{k}")
        for k, v in req.items()
        if k in (GPU, SHARED) or k.startswith(MIG_PREFIX)
    }
    asked = {k: v for k, v in asked.items() if v}
    if not asked:
        return None
    if len(asked) > 1:
        raise InputError(
            f"{field_of}: asks for {' and '.join(sorted(asked))}; gpuplan takes one GPU kind per pod"
        )
    ((resource, n),) = asked.items()
    if node is None and resource == GPU and n == 1:
        selection = offers.implied(selection)
    single = node.single_profile if node is not None else selection.mig_profile
    if resource.startswith(MIG_PREFIX) or (resource == GPU and single):
        profile = single if resource == GPU else _mig_profile(resource.removeprefix(MIG_PREFIX))
        if n != 1:
            raise InputError(
                f"{field_of}.{resource}: {n} MIG devices; gpuplan places one MIG instance per pod"
            )
        return "mig", {"mig_profile": profile}
    shared_gpu = node.time_sliced and not node.shared_renamed if node is not None else selection.shared
    if resource == SHARED or (resource == GPU and shared_gpu):
        milli = (
            FULL_MILLI // node.replicas
            if node is not None
            else offers.share(selection.models, renamed=resource == SHARED)
        )
        if milli is None:
            raise InputError(f"{field_of}.{resource}: a time-sliced share, but no node shares its GPUs")
        if n != 1:
            raise InputError(
                f"{field_of}.{resource}: {n} time-sliced shares; gpuplan places one share per pod"
            )
        return "fraction", {"gpu_milli": min(milli, FULL_MILLI - 1)}
    values: dict[str, Any] = {"gpus": n}
    if n > 1:
        values["topology"] = "same-node"
    return "whole", values


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
    in ``audit``."""
    held: dict[str, list[int]] = {name: [0, 0] for name in nodes}
    offers = _Offers(nodes.values())
    pods: list[_Pod] = []
    seen: set[str] = set()
    with_absent = 0
    for raw in items:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        key = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
        where = f"pod '{key}'"
        if not meta.get("name"):
            raise InputError("a pod has no metadata.name")
        if key in seen:
            raise InputError(f"{where}: appears more than once")
        seen.add(key)
        phase = status.get("phase", "Pending")
        node_name = spec.get("nodeName") or None
        if phase in _SKIPPED_PHASES or meta.get("deletionTimestamp"):
            audit.leave(key, FINISHED if phase in _SKIPPED_PHASES else TERMINATING, phase)
            continue
        if node_name in absent:
            audit.leave(key, ON_UNAVAILABLE, str(node_name))
            with_absent += 1
            continue
        req = _requests(spec, where)
        node = nodes.get(node_name) if node_name else None
        selection = _selection(spec, where, catalog) if node is None else _Selection()
        scheduled_share = _scheduler_share(meta, req, where)
        shape: tuple[str, dict[str, Any]] | None = (
            ("fraction", dict(scheduled_share))
            if scheduled_share
            else _shape(req, node, selection, offers, where)
        )
        cpu = cpu_milli(req.get("cpu", Decimal(0)))
        mem = memory_mib(req.get("memory", Decimal(0)))
        imported = audit.check(key, req, shape, node_name, selection)
        if shape is None:
            if node is not None:
                held[node.name][0] += cpu
                held[node.name][1] += mem
            continue
        if not imported:
            continue
        if node_name and node is None:
            raise InputError(f"{where}: spec.nodeName: '{node_name}' is not a GPU node of the node list")
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
        pods.append(
            _Pod(
                key,
                node_name,
                values,
                kind,
                created,
                scheduler_share=scheduled_share is not None,
                klass=str(spec.get("priorityClassName") or ""),
                spec_priority=_priority(spec, where),
            )
        )
    return pods, held, with_absent


def _priority(spec: Mapping[str, Any], where: str) -> int | None:
    """The pod's ``spec.priority`` (its PriorityClass's ``value``, set on admission), ``None`` if unset."""
    value = spec.get("priority")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: spec.priority: '{value}' is not a whole number")
    return value


# --------------------------------------------------------------------------------------------
# Tiers and preemptibility


@dataclass(frozen=True)
class TierMap:
    """Priority class to tier, and the classes whose pods may (or may not) be preempted whatever their
    tier's default; the key ``*`` stands for every class not named and for pods without a class."""

    tiers: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_TIER_MAP))
    preemptible: Mapping[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class TierChoice:
    """The tier the pods of one priority class get, and why (for the import summary)."""

    klass: str
    tier: str
    why: str
    pods: int


def _tier_order(tiers: Sequence[Tier]) -> list[str]:
    """The policy's tier names, most important (highest weight) first."""
    return [t.name for t in sorted(tiers, key=lambda t: -t.weight)]


def _ranked_tier(value: int, levels: Sequence[int], anchors: Sequence[tuple[int, int]], n_tiers: int) -> int:
    """The tier index (0 is the most important) of a class not in the tier map with priority ``value``.

    The distinct priorities of the pods' classes (``levels``, highest first; the named classes count too,
    so naming one class does not move the others) are spread evenly over the tiers: the highest on the
    first, the lowest on the last, those between at the nearest even step (one level alone takes the
    middle tier). ``anchors`` (priority, tier index of the classes the map names) keep
    the order: a class never ranks above a named class of higher priority nor below one of lower
    priority, and takes the tier of a named class of the same priority."""
    same = [k for v, k in anchors if v == value]
    if same:
        return min(same)
    last, i = n_tiers - 1, levels.index(value)
    spread = last // 2 if len(levels) == 1 else (2 * i * last + len(levels) - 1) // (2 * (len(levels) - 1))
    low = max((k for v, k in anchors if v > value), default=0)
    high = min((k for v, k in anchors if v < value), default=last)
    return max(low, min(spread, high))


def assign_tiers(pods: Sequence[_Pod], tier_map: TierMap, tiers: Sequence[Tier]) -> tuple[TierChoice, ...]:
    """Set each pod's ``tier`` and ``preemptible`` and say how each priority class was mapped.

    A class the tier map names keeps its tier. Without a ``*`` entry the other classes are ranked by their
    pods' ``spec.priority`` onto the policy's tiers (:func:`_ranked_tier`); a class without one, and pods
    without a class, get ``standard`` (or the middle tier). A pod is preemptible when the tier map says
    so for its class (or ``*``), else when its tier is the policy's least important one: Kubernetes
    preempts any pod for one of higher priority (``preemptionPolicy: Never`` only stops a pod from
    preempting others), and the lowest tier is the one every other tier outranks.
    """
    order = _tier_order(tiers)
    index = {name: i for i, name in enumerate(order)}
    default = STANDARD if STANDARD in index else order[(len(order) - 1) // 2]
    values: dict[str, int | None] = {}
    counts: Counter[str] = Counter()
    for pod in pods:
        counts[pod.klass] += 1
        seen = values.get(pod.klass)
        if pod.klass and pod.spec_priority is not None:
            values[pod.klass] = pod.spec_priority if seen is None else max(seen, pod.spec_priority)
        else:
            values.setdefault(pod.klass, None)
    named = {c: tier_map.tiers[c] for c in values if c and c in tier_map.tiers}
    rest = tier_map.tiers.get("*")
    anchors = [
        (v, index[named[c]]) for c, v in values.items() if c in named and v is not None and named[c] in index
    ]
    levels = sorted({v for c, v in values.items() if c and v is not None}, reverse=True)
    chosen: dict[str, tuple[str, str]] = {}
    for klass, value in values.items():
        if klass in named:
            chosen[klass] = (named[klass], "tier map")
        elif rest is not None:
            chosen[klass] = (rest, "tier map '*'")
        elif not klass:
            chosen[klass] = (default, "no priority class")
        elif value is None:
            chosen[klass] = (default, "no spec.priority to rank it by")
        else:
            k = _ranked_tier(value, levels, anchors, len(order))
            chosen[klass] = (order[k], f"spec.priority {value}, ranked")
    lowest = order[-1] if len(order) > 1 else None
    for pod in pods:
        tier = chosen[pod.klass][0]
        pod.values["tier"] = tier
        own = tier_map.preemptible.get(pod.klass)
        if own is None and pod.klass not in named:
            own = tier_map.preemptible.get("*")
        if (tier == lowest) if own is None else own:
            pod.values["preemptible"] = True

    def rank(klass: str) -> tuple[int, int, str]:
        return (index.get(chosen[klass][0], len(order)), -(values[klass] or 0), klass)

    return tuple(
        TierChoice(klass=c, tier=chosen[c][0], why=chosen[c][1], pods=counts[c])
        for c in sorted(chosen, key=rank)
    )


# --------------------------------------------------------------------------------------------
# What is left out


#: Why a pod is left out (the summary groups pods by these, in this order).
FINISHED = "finished (Succeeded or Failed)"
TERMINATING = "terminating"
ON_UNAVAILABLE = "bound to a node that takes no new pods"
UNKNOWN_RESOURCE = "asks for a GPU resource no node offers"
UNKNOWN_PROFILE = "asks for a MIG profile no GPU model of the catalog has"
PENDING_NO_GPU = "pending, asks for no GPU"
BOUND_NO_GPU = "runs without a GPU (its CPU and memory are taken off its node)"
_REASONS = (
    UNKNOWN_RESOURCE,
    UNKNOWN_PROFILE,
    PENDING_NO_GPU,
    ON_UNAVAILABLE,
    FINISHED,
    TERMINATING,
    BOUND_NO_GPU,
)
#: ``nvidia.com/`` resources a pod may ask for without a node offering them (HAMi's share requests).
_SCHEDULER_RESOURCES = frozenset({HAMI_GPU_MEMORY, HAMI_GPU_MEMORY_PERCENT, HAMI_GPU_CORES})


@dataclass(frozen=True)
class LeftOut:
    """A pod the import leaves out, why, and the detail (phase, node or resource)."""

    pod: str
    reason: str
    detail: str = ""


@dataclass
class _Audit:
    """What the import leaves out or doubts: the resources some node offers (a pod asking for another
    ``nvidia.com/`` resource has a typo or a missing device plugin), the pods left out, and warnings."""

    offered: frozenset[str]
    catalog: HardwareCatalog
    #: The GPU models of the fleet's nodes, where a pod without a model selection may go.
    models: tuple[str, ...] = ()
    left_out: list[LeftOut] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def leave(self, pod: str, reason: str, detail: str = "") -> None:
        """Note a pod left out."""
        self.left_out.append(LeftOut(pod, reason, detail))

    def warn(self, message: str) -> None:
        """Log a warning and keep it for the summary."""
        log.warning("%s", message)
        self.warnings.append(message)

    def check(
        self,
        key: str,
        req: Mapping[str, Decimal],
        shape: tuple[str, dict[str, Any]] | None,
        node_name: str | None,
        selection: _Selection,
    ) -> bool:
        """Whether the pod is imported as a workload. Warns about ``nvidia.com/`` resources no node offers
        and, for a pending pod, a MIG profile no GPU model it may go to has; notes the pod left out when
        it asks for no GPU gpuplan knows, or for a MIG profile no model of the catalog has (no plan could
        read it)."""
        unknown = sorted(
            k for k, v in req.items()
            if v and k.startswith("nvidia.com/") and k not in self.offered and k not in _SCHEDULER_RESOURCES
            and not (shape is not None and shape[0] == "mig" and k.startswith(MIG_PREFIX))
        )  # fmt: skip
        for resource in unknown:
            known = sorted({GPU, SHARED, *(k for k in self.offered if k.startswith("nvidia.com/"))})
            guess = difflib.get_close_matches(resource, known, n=1)
            hint = f" (did you mean {guess[0]}?)" if guess else ""
            kept = "" if shape is None else "; gpuplan plans its GPU request, but Kubernetes will not bind it"
            self.warn(f"pod '{key}': resources.requests.{resource}: no node offers it{hint}{kept}")
        if shape is None:
            if unknown:
                self.leave(key, UNKNOWN_RESOURCE, ", ".join(unknown))
            else:
                self.leave(key, BOUND_NO_GPU if node_name else PENDING_NO_GPU, node_name or "")
            return False
        if shape[0] == "mig" and node_name is None:
            return self._check_profile(key, shape[1]["mig_profile"], selection)
        return True

    def _check_profile(self, key: str, profile: str, selection: _Selection) -> bool:
        """Whether a pending pod's MIG profile is one the catalog knows; warns when no GPU model the pod
        may go to has it (the plan then says it never fits)."""
        resource = mig_resource(profile)
        if not any(profile in m.profile_map for m in self.catalog.models):
            self.warn(f"pod '{key}': resources.requests.{resource}: no GPU model has MIG profile '{profile}'")
            self.leave(key, UNKNOWN_PROFILE, resource)
            return False
        models = list(selection.models or self.models)
        if models and not any(profile in self.catalog.model(m).profile_map for m in models):
            self.warn(
                f"pod '{key}': resources.requests.{resource}: no GPU model it may go to "
                f"({', '.join(models)}) has MIG profile '{profile}'"
            )
        return True


def _plural(n: int, noun: str) -> str:
    """``1 pod``, ``2 pods``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _left_out_lines(left_out: Sequence[LeftOut]) -> list[str]:
    """The summary's lines naming every pod left out, grouped by reason."""
    if not left_out:
        return []
    groups: dict[str, list[str]] = {}
    for item in left_out:
        shown = item.detail and item.reason in (UNKNOWN_RESOURCE, UNKNOWN_PROFILE)
        text = f"{item.pod} ({item.detail})" if shown else item.pod
        groups.setdefault(item.reason, []).append(text)
    lines = [f"pods left out: {len(left_out)}"]
    lines += [
        f"  {reason}: {len(groups[reason])}: {', '.join(groups[reason])}"
        for reason in _REASONS
        if reason in groups
    ]
    return lines


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


# --------------------------------------------------------------------------------------------
# Running placements


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
) -> None:
    """Give every bound pod GPU indices on its node (``running_on``), never double booking a GPU.

    Pods are placed node by node, whole GPUs first, then MIG instances, then time-sliced shares; in each
    group the pods whose GPU device IDs kubelet reported (``devices``, by pod) come first and keep the
    grouping those IDs give, then the rest, oldest first, on the lowest indices the occupancy rules
    allow. A pod that does not fit is an input error (the node offers fewer devices than its pods hold).
    """
    known = devices or {}
    occ = Occupancy.empty(cluster, catalog)
    pinned: dict[str, dict[str, int]] = {name: {} for name in nodes}

    def order(p: _Pod) -> tuple[str, int, bool, str, str]:
        return (p.node or "", _KIND_ORDER[p.kind], p.key not in known, p.created, p.key)

    for pod in sorted((p for p in pods if p.node), key=order):
        node = nodes[pod.node or ""]
        ids = known.get(pod.key) if pod.kind != "mig" else None
        uses = _pinned_uses(pod, occ, node, ids, pinned[node.name]) if ids else _uses(pod, occ, node)
        hold = _hold(pod, node.name, uses, cpu=pod.values["cpu_milli"], memory=pod.values["memory_mib"])
        why = occ.problem((pod.key, 0), hold) if uses else _no_room(pod, occ, node)
        if why is not None:
            raise InputError(f"pod '{pod.key}': spec.nodeName '{node.name}': the node cannot hold it ({why})")
        occ.start((pod.key, 0), hold)
        pod.values["running_on"] = where(node.name, uses)
        # The API names the node, not the GPUs: the indices are this function's choice.
        pod.values["gpus_guessed"] = "true"


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


# --------------------------------------------------------------------------------------------
# Topology


def _topology_entries(
    spec: str, info: _NodeInfo, entry: Mapping[str, Any], catalog: HardwareCatalog
) -> dict[str, Any]:
    """The cluster-file topology fields of a node from ``--topology NODE=SPEC``: a reference topology of
    the catalog by name, or a file of ``nvidia-smi topo -m`` output (NUMA nodes and links per GPU)."""
    where = f"--topology {info.name}={spec}"
    mig = {g["index"]: g["mig"] for g in entry.get("gpus", ()) if "mig" in g}
    path = Path(spec)
    if path.is_file():
        try:
            node = node_from_topo(
                path.read_text(), name=info.name, gpu_model=info.model.name, cpu_milli=0, memory_mib=0,
                catalog=catalog,
            )  # fmt: skip
        except ValueError as exc:
            raise InputError(f"{where}: {exc}") from None
        gpus = node["gpus"]
        if len(gpus) != info.gpus:
            raise InputError(f"{where}: the file shows {len(gpus)} GPUs, the node has {info.gpus}")
        # The node's GPUs are numbered 0..n-1 in the dump's order (a dump may skip indices).
        index = {gpu["index"]: i for i, gpu in enumerate(gpus)}
        for i, gpu in enumerate(gpus):
            gpu["index"] = i
            if i in mig:
                gpu["mig"] = mig[i]
        links = [{**lk, "a": index[lk["a"]], "b": index[lk["b"]]} for lk in node["links"]]
        return {"gpus": gpus, "links": links}
    try:
        ref = catalog.topology(spec)
    except KeyError as exc:
        raise InputError(f"{where}: not a file, and {exc.args[0]}") from None
    if catalog.canonical(ref.gpu_model) != info.model.name or len(ref.gpus) != info.gpus:
        raise InputError(
            f"{where}: {ref.name} has {len(ref.gpus)} {catalog.canonical(ref.gpu_model)} GPUs, "
            f"the node {info.gpus} {info.model.name}"
        )
    return {
        "topology": ref.name,
        **({"gpus": [{"index": i, "mig": m} for i, m in sorted(mig.items())]} if mig else {}),
    }


def attach_topologies(
    entries: list[dict[str, Any]],
    infos: Mapping[str, _NodeInfo],
    topologies: Mapping[str, str],
    catalog: HardwareCatalog,
) -> list[str]:
    """Give nodes the topology ``--topology`` names (``NODE`` may be a shell pattern such as ``gpu-*``) and
    return the multi-GPU nodes still without one, whose GPUs are then all on NUMA node 0 without NVLink."""
    given: dict[str, str] = {}
    for pattern, spec in topologies.items():
        matched = [e for e in entries if fnmatch.fnmatchcase(e["name"], pattern)]
        if not matched:
            raise InputError(f"--topology {pattern}={spec}: no GPU node of the node list is called that")
        for entry in matched:
            earlier = given.setdefault(entry["name"], pattern)
            if earlier != pattern:
                raise InputError(
                    f"--topology {pattern}={spec}: node '{entry['name']}' also matches --topology {earlier}"
                )
            info = infos[entry["name"]]
            fields = _topology_entries(spec, info, entry, catalog)
            for key in ("topology", "gpus", "links"):
                entry.pop(key, None)
            entry.update(fields)
    return [
        e["name"] for e in entries if "topology" not in e and not e.get("links") and infos[e["name"]].gpus > 1
    ]


def topology_hint(names: Sequence[str], infos: Mapping[str, _NodeInfo], catalog: HardwareCatalog) -> str:
    """The catalog's reference topologies that fit nodes without one (same GPU model and count), as
    ``dgx-h100 fits gpu-a, gpu-b``; "" when none does."""
    fits: dict[str, list[str]] = {}
    for name in names:
        info = infos[name]
        for ref in catalog.topologies:
            if catalog.canonical(ref.gpu_model) == info.model.name and len(ref.gpus) == info.gpus:
                fits.setdefault(ref.name, []).append(name)
    return "; ".join(f"{ref} fits {', '.join(nodes)}" for ref, nodes in sorted(fits.items()))


# --------------------------------------------------------------------------------------------
# Files


@dataclass(frozen=True)
class KubernetesState:
    """A fleet's state as gpuplan inputs: the cluster, the workloads, and counts for the report."""

    cluster: Cluster
    workloads: tuple[Workload, ...]
    node_entries: tuple[dict[str, Any], ...]
    rows: tuple[dict[str, Any], ...]
    skipped_nodes: int
    #: GPU nodes that take no new pods (``name (cordoned|NotReady)``), left out with their pods.
    unavailable: tuple[str, ...] = ()
    unavailable_pods: int = 0
    #: How each priority class of the imported pods was mapped to a tier.
    tiers: tuple[TierChoice, ...] = ()
    #: The policy's least important tier (its pods are preemptible by default), ``None`` with one tier.
    lowest_tier: str | None = None
    #: Classes whose pods the tier map makes preemptible (``True``) or not.
    preemptible_by_map: tuple[tuple[str, bool], ...] = ()
    #: Every pod left out, and why.
    left_out: tuple[LeftOut, ...] = ()
    #: Multi-GPU nodes without a known topology (their GPUs on NUMA node 0, without NVLink), and the
    #: reference topologies that fit them.
    no_topology: tuple[str, ...] = ()
    topology_hint: str = ""
    #: Warnings about resources and MIG profiles no node can offer.
    warnings: tuple[str, ...] = ()

    def describe(self) -> str:
        """A short human-readable report of what was read."""
        running = sum(1 for w in self.workloads if w.running_on)
        kinds = Counter(w.shapes[0].kind for w in self.workloads)
        gangs = len({w.gang for w in self.workloads if w.gang})
        away = (
            [
                f"left out: {len(self.unavailable)} GPU nodes that take no new pods "
                f"({', '.join(self.unavailable)}) and the {self.unavailable_pods} pods bound to them"
            ]
            if self.unavailable
            else []
        )
        return "\n".join(
            [
                f"cluster: {len(self.cluster.nodes)} GPU nodes, {self.cluster.gpu_count} GPUs "
                f"({self.skipped_nodes} nodes without GPUs left out)",
                f"workloads: {len(self.workloads)} pods asking for GPUs ({running} running, "
                f"{len(self.workloads) - running} pending; "
                + "; ".join(
                    filter(None, [", ".join(f"{k} {n}" for k, n in sorted(kinds.items())), f"{gangs} gangs"])
                )
                + ")",
                *away,
                *self._audit_lines(),
            ]
        )

    def _audit_lines(self) -> list[str]:
        """The summary's lines on tiers, preemptibility, topology, warnings and pods left out."""
        lines = []
        if self.tiers:
            mapped = "; ".join(
                f"{c.klass or '(no class)'} -> {c.tier} ({c.why}; {_plural(c.pods, 'pod')})"
                for c in self.tiers
            )
            lines.append(f"tiers by priority class: {mapped}")
        rows = self.rows
        flagged = [r for r in rows if r.get("preemptible")]
        why = []
        if self.lowest_tier is not None:
            n = sum(1 for r in flagged if r.get("tier") == self.lowest_tier)
            why.append(f"{n} in {self.lowest_tier}, the policy's least important tier")
        if self.preemptible_by_map:
            said = ", ".join(f"{c} {'yes' if v else 'no'}" for c, v in self.preemptible_by_map)
            why.append(f"tier map: {said}")
        lines.append(
            f"preemptible: {len(flagged)} of {len(rows)} pods" + (f" ({'; '.join(why)})" if why else "")
        )
        if self.no_topology:
            lines.append(
                f"no topology: {_plural(len(self.no_topology), 'node')} ({', '.join(self.no_topology)}) "
                f"without a {MACHINE} label the catalog knows; their GPUs are taken as NUMA node 0 "
                "without NVLink (--topology NODE=FILE|REFERENCE attaches one"
                + (f"; {self.topology_hint})" if self.topology_hint else ")")
            )
        lines += [f"warning: {w}" for w in self.warnings]
        return lines + _left_out_lines(self.left_out)


def _items(path: Path, kind: str) -> list[Mapping[str, Any]]:
    """The ``items`` of a ``kubectl get … -o json`` list (or a bare list, or one object)."""
    raw = read_structured(path)
    if isinstance(raw, dict) and str(raw.get("kind", "")).lower() == kind.rstrip("s"):
        raw = [raw]
    items = raw.get("items") if isinstance(raw, dict) else raw
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InputError(f"{path}: expected the output of `kubectl get {kind} -o json` (a list with 'items')")
    wanted = kind.rstrip("s").capitalize()
    other = next(
        ((i, str(it["kind"])) for i, it in enumerate(items) if it.get("kind", wanted) != wanted), None
    )
    if other is not None:
        raise InputError(
            f"{path}: items[{other[0]}]: a {other[1]}, expected a {wanted} (`kubectl get {kind}`)"
        )
    return items


def load_tier_map(path: Path | None) -> TierMap:
    """The default priority-class → tier map, updated by a YAML/JSON mapping file when given: each class
    maps to a tier name, or to ``{tier: NAME, preemptible: true|false}`` (either key may be left out)."""
    tiers = dict(DEFAULT_TIER_MAP)
    if path is None:
        return TierMap(tiers)
    raw = read_structured(path)
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a mapping of priorityClassName to tier name ('*' for the rest)")
    preemptible: dict[str, bool] = {}
    for key, value in raw.items():
        klass = str(key)
        entry = value if isinstance(value, dict) else {"tier": value}
        tier, flag = entry.get("tier"), entry.get("preemptible")
        if (
            set(entry) - {"tier", "preemptible"}
            or not entry
            or (tier is not None and not (isinstance(tier, str) and tier))
            or (flag is not None and not isinstance(flag, bool))
        ):
            raise InputError(
                f"{path}: '{klass}': expected a tier name or {{tier: NAME, preemptible: true|false}}"
            )
        if tier is not None:
            tiers[klass] = tier
        if flag is not None:
            preemptible[klass] = flag
    return TierMap(tiers, preemptible)


def load_topologies(path: Path) -> dict[str, str]:
    """Node (or pattern) to topology from a YAML/JSON mapping, as ``--topology`` gives them; a relative
    file path is taken from the mapping file's folder."""
    raw = read_structured(path)
    if not isinstance(raw, dict) or not all(isinstance(v, str) and v for v in raw.values()):
        raise InputError(
            f"{path}: expected a mapping of node name (or pattern) to a topo -m file or reference"
        )
    folder = Path(path).parent
    return {str(k): str(folder / v) if (folder / v).is_file() else v for k, v in raw.items()}


def read_state(
    nodes_json: Path,
    pods_json: Path,
    *,
    tier_map: TierMap | None = None,
    team_label: str | None = None,
    pod_resources: Iterable[Path] = (),
    catalog: HardwareCatalog | None = None,
    tiers: Sequence[Tier] | None = None,
    topologies: Mapping[str, str] | None = None,
) -> KubernetesState:
    """The cluster and workloads of ``kubectl get nodes -o json`` and ``kubectl get pods -A -o json``, with
    the GPUs of running pods from kubelet PodResources dumps when given. Priority classes are mapped onto
    ``tiers`` (the policy's; the default tiers without one), and ``topologies`` (node name or pattern to a
    ``topo -m`` file or reference topology) give nodes the topology their labels do not.

    Raises :class:`InputError` naming the node or pod and the field of the first bad value.
    """
    cat = catalog or default_catalog()
    node_items = _items(Path(nodes_json), "nodes")
    infos: dict[str, _NodeInfo] = {}
    skipped = 0
    absent: dict[str, str] = {}
    for raw in node_items:
        why = _unavailable(raw)
        if why is not None and _offers_gpus(raw):
            absent[str((raw.get("metadata") or {}).get("name") or "")] = why
            continue
        info = None if why is not None else _node(raw, cat)
        if info is None:
            skipped += 1
        elif info.name in infos:
            raise InputError(f"node '{info.name}': appears more than once")
        else:
            infos[info.name] = info
    if absent:
        log.warning("left out, taking no new pods: %s", ", ".join(f"{n} ({w})" for n, w in absent.items()))
    pod_items = _items(Path(pods_json), "pods")
    offered = frozenset(
        str(k) for raw in node_items for k in ((raw.get("status") or {}).get("allocatable") or {})
    )
    models = tuple(sorted({i.model.name for i in infos.values()}))
    audit = _Audit(offered=offered, catalog=cat, models=models)
    pods, held, with_absent = _pods(pod_items, infos, audit, team_label, cat, absent)
    policy_tiers = tuple(tiers) if tiers is not None else default_tiers()
    mapping = tier_map or TierMap()
    choices = assign_tiers(pods, mapping, policy_tiers)
    shared_by_scheduler = any(p.scheduler_share for p in pods)
    entries = []
    for info in infos.values():
        cpu, mem = held[info.name]
        entry = {**info.entry, "cpu_milli": max(0, info.entry["cpu_milli"] - cpu),
                 "memory_mib": max(0, info.entry["memory_mib"] - mem)}  # fmt: skip
        if shared_by_scheduler and entry.get("sharing") == "exclusive":
            # A scheduler (KAI, HAMi) shares GPUs the device plugin offers whole: the node takes both.
            del entry["sharing"]
        entries.append(entry)
    no_topology = attach_topologies(entries, infos, topologies or {}, cat)
    hint = topology_hint(no_topology, infos, cat)
    if no_topology:
        log.warning(
            "no topology for %s: no %s label the catalog knows, so their GPUs are taken as NUMA node 0 "
            "without NVLink; attach one with --topology NODE=FILE|REFERENCE%s",
            ", ".join(no_topology),
            MACHINE,
            f" ({hint})" if hint else "",
        )
    try:
        cluster = Cluster.model_validate({"nodes": entries}, context={"catalog": cat})
    except ValidationError as exc:
        raise InputError(f"{nodes_json}: {describe(exc, {'nodes': entries})}") from None
    complete_placements(pods, cluster, infos, cat, load_pod_resources(pod_resources))
    workloads = []
    for pod in pods:
        try:
            workloads.append(Workload.model_validate(pod.values))
        except ValidationError as exc:
            raise InputError(f"pod '{pod.key}': {describe(exc, pod.values)}") from None
    return KubernetesState(
        cluster=cluster,
        workloads=tuple(workloads),
        node_entries=tuple(entries),
        rows=tuple(p.values for p in pods),
        skipped_nodes=skipped,
        unavailable=tuple(f"{n} ({w})" for n, w in sorted(absent.items())),
        unavailable_pods=with_absent,
        tiers=choices,
        lowest_tier=_tier_order(policy_tiers)[-1] if len(policy_tiers) > 1 else None,
        preemptible_by_map=tuple(sorted(mapping.preemptible.items())),
        left_out=tuple(audit.left_out),
        no_topology=tuple(no_topology),
        topology_hint=hint,
        warnings=tuple(audit.warnings),
    )


def write_state(state: KubernetesState, out_dir: Path) -> tuple[Path, Path]:
    """Write ``out_dir/cluster.yaml`` and ``out_dir/workloads.csv`` (the columns of docs/FORMATS.md,
    ``running_on`` included)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cluster_path = out / "cluster.yaml"
    workloads_path = out / "workloads.csv"
    cluster_path.write_text(yaml.safe_dump({"nodes": list(state.node_entries)}, sort_keys=False))
    with workloads_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(WORKLOAD_COLUMNS)
        writer.writerows([str(r.get(c, "")) for c in WORKLOAD_COLUMNS] for r in state.rows)
    log.info("kubernetes import: %s", state.describe().replace("\n", "; "))
    return cluster_path, workloads_path

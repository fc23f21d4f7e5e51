"""Nodes: the GPU model comes from GPU Feature Discovery's ``nvidia.com/gpu.product`` label (the
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
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuplan.models import HardwareCatalog
from gpuplan.models.base import InputError
from gpuplan.models.cluster import MigInstance
from gpuplan.models.hardware import GpuModelSpec
from gpuplan.planner.io.importers.kubernetes.conventions import (
    _MIG_SUFFIX,
    COUNT,
    GPU,
    GPUPLAN_MIG_CONFIG,
    GUESSED,
    HAMI_REGISTER,
    MACHINE,
    MEMORY,
    MIG_CONFIG,
    MIG_CONFIG_STATE,
    MIG_LAYOUT_LABEL,
    MIG_PREFIX,
    MIG_STRATEGY,
    PRODUCT,
    REPLICAS,
    SHARED,
    SHARING,
    _count,
    _mig_profile,
    _product_base,
    cpu_milli,
    memory_mib,
    quantity,
)
from gpuplan.planner.io.importers.kubernetes.mig_configs import MigPartedConfig, annotated_config, gpu_counts
from gpuplan.planner.io.importers.kubernetes.mig_layouts import (
    _config_profiles,
    _fit_layout,
    _max_layout,
    _mig_layouts,
)
from gpuplan.planner.io.importers.kubernetes.scheduling import node_scheduling
from gpuplan.planner.io.importers.nvidia_smi import lookup_gpu_model

#: Node labels kept in the cluster file: topology, and the GPU Operator's view of the node.
KEPT_LABEL_PREFIXES: tuple[str, ...] = (
    "topology.kubernetes.io/",
    "node.kubernetes.io/instance-type",
    "nvidia.com/gpu.clique",
    PRODUCT,
    MIG_CONFIG,
    MIG_CONFIG_STATE,
    MIG_STRATEGY,
    SHARING,
    REPLICAS,
)
#: ``nvidia.com/mig.config.state`` values that say the named layout is not (yet) the GPUs' own.
_IN_FLUX = ("pending", "rebooting", "failed")

_SHARING_MODES = ("time-slicing", "mps")


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
    #: The GPU index of each of ``layouts`` (default: the first ones, ``0 .. len(layouts)-1``).
    mig_indices: tuple[int, ...] | None = None
    #: Why the MIG layouts are a guess (``None``: they follow the devices and the MIG manager's config).
    mig_guess: str | None = None

    @property
    def mig_at(self) -> dict[int, tuple[MigInstance, ...]]:
        """The MIG layout of each GPU in MIG mode, by GPU index."""
        indices = self.mig_indices if self.mig_indices is not None else range(len(self.layouts))
        return dict(zip(indices, self.layouts, strict=True))

    @property
    def time_sliced(self) -> bool:
        """Whether the device plugin offers the node's non-MIG GPUs as time-sliced replicas."""
        return self.replicas > 1


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


def _named_entries(
    config: str, mig_parted: MigPartedConfig | None, annotations: Mapping[str, Any], where: str
) -> tuple[Any, ...] | None:
    """The entries of the mig-parted config the node's ``nvidia.com/mig.config`` names: from the GPU
    Operator's ConfigMap when given and it holds that config, else from gpuplan's own annotation when it
    names the same config."""
    if mig_parted is not None and config in mig_parted.configs:
        return tuple(mig_parted.configs[config])
    found = annotated_config(annotations, GPUPLAN_MIG_CONFIG, where)
    return found[1] if found is not None and found[0] == config else None


def _from_entries(
    name: str,
    spec: GpuModelSpec,
    entries: tuple[Any, ...],
    counts: Counter[str],
    full: int,
    total: int | None,
) -> tuple[tuple[int, ...], list[tuple[MigInstance, ...]]] | None:
    """The MIG GPUs (indices) and layouts a named config gives the node, when they agree with what it
    offers (its whole or shared GPUs and its MIG devices); ``None`` when they do not."""
    given = [len(e.get("devices") or ()) if isinstance(e.get("devices"), list) else 0 for e in entries]
    highest = max(
        (
            d
            for e in entries
            if isinstance(e.get("devices"), list)
            for d in e["devices"]
            if isinstance(d, int)
        ),
        default=-1,
    )
    gpus = total if total is not None else max(highest + 1, full + sum(given))
    per = gpu_counts(entries, gpus, f"node '{name}': mig-parted config")
    if len(per) != gpus:
        return None  # a GPU the config does not name keeps whatever it has: not known here
    mig = {i: c for i, c in per.items() if c is not None}
    if gpus - len(mig) != full or sum(mig.values(), Counter()) != counts:
        return None
    layouts = []
    for i in sorted(mig):
        if any(p not in spec.profile_map for p in mig[i]):
            return None
        layout = _fit_layout(spec, list(mig[i].elements()))
        if layout is None:
            return None
        layouts.append(layout)
    return tuple(sorted(mig)), layouts


def _node(
    raw: Mapping[str, Any], catalog: HardwareCatalog, mig_parted: MigPartedConfig | None = None
) -> _NodeInfo | None:
    """The GPU node of a ``kubectl get nodes`` item (``None`` for a node without GPUs). MIG layouts follow
    the devices and the MIG manager's config the node names (a default one, one of ``mig_parted``, or the
    one gpuplan's export noted on it); otherwise they are a guess, said in ``mig_guess``."""
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
    state = labels.get(MIG_CONFIG_STATE, "")
    guess: str | None = None
    indices: tuple[int, ...] | None = None
    if single is not None:
        # The single strategy offers every MIG device as nvidia.com/gpu (and counts them in gpu.count).
        per_gpu = _config_profiles(config, spec)
        layout = _fit_layout(spec, per_gpu) if per_gpu and set(per_gpu) == {single} else None
        if layout is None:
            guess = f"label {MIG_CONFIG} '{config}' is not a MIG manager default of profile {single}"
        layout = layout or _max_layout(spec, single)
        devices = gpu_alloc or label_total or 0
        layouts, full = [layout] * -(-devices // len(layout)), 0
    else:
        full = -(-(gpu_alloc + shared_alloc) // replicas)
        mig_gpus = label_total - full if label_total is not None and label_total > full else None
        entries = _named_entries(config, mig_parted, meta.get("annotations") or {}, f"node '{name}'")
        found = _from_entries(name, spec, entries, counts, full, label_total) if mig_on and entries else None
        if found is not None:
            indices, layouts = found
        else:
            layouts = _mig_layouts(name, spec, config, counts, mig_gpus) if mig_on else []
            guess = _mig_guess(spec, config, counts, layouts, full, entries is not None) if mig_on else None
        if not full and not layouts and not mig_on:
            full = label_total or 0
    if not full and not layouts:
        return None
    if guess is None and layouts and state in _IN_FLUX:
        guess = f"label {MIG_CONFIG_STATE} is '{state}': the MIG manager is still applying '{config}'"
    info = _NodeInfo(
        name=name, model=spec, gpus=len(layouts) + full, layouts=layouts, single_profile=single,
        replicas=replicas, shared_renamed=bool(shared_alloc), scheduler_shared=hami, mig_indices=indices,
        mig_guess=guess if layouts else None,
    )  # fmt: skip
    info.entry = _entry(info, labels, alloc, catalog)
    info.entry.update(node_scheduling(raw, f"node '{name}'", hami=hami))
    return info


def _mig_guess(
    spec: GpuModelSpec,
    config: str,
    counts: Counter[str],
    layouts: list[tuple[MigInstance, ...]],
    full: int,
    named: bool,
) -> str | None:
    """Why the MIG layouts read from the offered devices are a guess, ``None`` when the label names a MIG
    manager default configuration (``all-<profile>``, ``all-balanced``: every GPU alike) that the devices
    match."""
    per_gpu = _config_profiles(config, spec)
    if per_gpu is not None:
        want = Counter(per_gpu)
        total = sum((Counter(i.profile for i in lay) for lay in layouts), Counter())
        if (
            counts
            and not full
            and total == counts
            and all(Counter(i.profile for i in lay) == want for lay in layouts)
        ):
            return None
        return f"the devices offered do not match label {MIG_CONFIG} '{config}' on every GPU"
    if named:
        return f"the devices offered do not match the mig-parted config '{config}' names"
    return (
        f"label {MIG_CONFIG} names '{config}', a config that is neither a MIG manager default nor in the "
        "given mig-parted ConfigMap (--mig-parted-config)"
    )


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
    if info.mig_guess is not None:
        kept[MIG_LAYOUT_LABEL] = GUESSED
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

    at = info.mig_at

    def mig(i: int) -> dict[str, Any]:
        return {"instances": [inst.model_dump() for inst in at[i]]}

    if ref is not None and catalog.canonical(ref.gpu_model) == info.model.name and len(ref.gpus) == info.gpus:
        entry["topology"] = ref.name
        if at:
            entry["gpus"] = [{"index": i, "mig": mig(i)} for i in sorted(at)]
        return entry
    entry["gpus"] = [
        {
            "index": i,
            "model": info.model.name,
            "numa": 0,
            **({"mig": mig(i)} if i in at else {}),
        }
        for i in range(info.gpus)
    ]
    return entry

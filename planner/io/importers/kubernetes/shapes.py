"""What GPU a pod asks for: whole GPUs, a MIG instance or a share, from its resources (the device
plugin's ``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, ``nvidia.com/mig-<profile>``), a scheduler's
share conventions (KAI Scheduler, HAMi), its ``nvidia.com/gpu.product`` selection, and, for a pod not
yet bound, what the nodes it may go to offer under that name."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from gpuplan.models import HardwareCatalog
from gpuplan.models.base import InputError
from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.planner.io.importers.kubernetes.conventions import (
    _MIG_SUFFIX,
    GPU,
    HAMI_GPU_CORES,
    HAMI_GPU_MEMORY,
    HAMI_GPU_MEMORY_PERCENT,
    KAI_GPU_FRACTION,
    KAI_GPU_MEMORY,
    MIG_PREFIX,
    PRODUCT,
    SHARED,
    _mig_profile,
    _product_base,
    _whole,
    memory_mib,
    quantity,
)
from gpuplan.planner.io.importers.kubernetes.nodes import _NodeInfo
from gpuplan.planner.io.importers.nvidia_smi import lookup_gpu_model


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
    return min(int((value * 10).to_integral_value(ROUND_CEILING)), MILLI_PER_GPU - 1)


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
            share = None if replicas is None else min(MILLI_PER_GPU // replicas, MILLI_PER_GPU - 1)
            self._shares[key] = share
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
            MILLI_PER_GPU // node.replicas
            if node is not None
            else offers.share(selection.models, renamed=resource == SHARED)
        )
        if milli is None:
            raise InputError(f"{field_of}.{resource}: a time-sliced share, but no node shares its GPUs")
        if n != 1:
            raise InputError(
                f"{field_of}.{resource}: {n} time-sliced shares; gpuplan places one share per pod"
            )
        return "fraction", {"gpu_milli": min(milli, MILLI_PER_GPU - 1)}
    values: dict[str, Any] = {"gpus": n}
    if n > 1:
        values["topology"] = "same-node"
    return "whole", values

"""The per-GPU rules: what the uses of one GPU may be together.

One home for the rules that every part checks on a single GPU: a whole GPU has one user; fractions add
up to at most :data:`~gpuplan.models.hardware.MILLI_PER_GPU`; a GPU in MIG mode is used only through its
layout's instances (valid profile and start, one replica per instance) and a GPU with MIG off never
through one; a non-MIG GPU is used as its node's sharing mode offers it, and time-sliced at most its
``replicas`` fractions; GPU memory holds what the replicas ask (fractions of one GPU share it). The
validator checks a plan's GPUs with :func:`gpu_breaches`, the planner's occupancy (action order,
executor, start times, running-state input check) checks each start with it, so the two cannot drift.
The placement kernel keeps the same rules in its integer state; the exhaustive tiny-instance tests
prove that it agrees.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.models.cluster import Sharing, sharing_offers, sharing_replicas
from gpuplan.models.hardware import MILLI_PER_GPU, GpuModelSpec
from gpuplan.models.plan import GpuUse

#: Rule names, as the validator reports them.
WHOLE_EXCLUSIVE = "whole-exclusive"
GPU_OVERCOMMIT = "gpu-overcommit"
MIG_MIXED = "mig-mixed-fraction"
MIG_PROFILE = "gpu-model"
MIG_START = "mig-start"
MIG_LAYOUT = "mig-layout-mismatch"
MIG_SHARED = "mig-instance-shared"
SHARING_MODE = "sharing-mode"
SHARING_REPLICAS = "sharing-replicas"
GPU_MEMORY = "gpu-memory"


@dataclass(frozen=True)
class GpuUser:
    """One replica's use of a GPU and the GPU memory (MiB) it asks there (0: none asked)."""

    use: GpuUse
    memory_mib: int = 0


@dataclass(frozen=True)
class GpuState:
    """What a GPU offers: its model, its MIG instances (``None``: MIG off) and its node's sharing mode."""

    spec: GpuModelSpec
    mig: frozenset[tuple[str, int]] | None
    sharing: Sharing | None


@dataclass(frozen=True)
class Breach:
    """One broken rule on one GPU: ``users`` are the positions (in the list checked) it concerns;
    ``amount`` and ``limit`` the measure and its bound where the rule has one (milli, fractions, MiB)."""

    rule: str
    users: tuple[int, ...]
    amount: int = 0
    limit: int = 0


def gpu_breaches(users: Sequence[GpuUser], gpu: GpuState) -> list[Breach]:
    """Every per-GPU rule the ``users`` of ``gpu`` break together, in a fixed order (MIG use, MIG
    mixing, sharing mode, exclusivity and capacity, time-sliced replicas, GPU memory)."""
    out: list[Breach] = []
    mig = [i for i, u in enumerate(users) if u.use.mig_profile is not None]
    plain = [i for i, u in enumerate(users) if u.use.mig_profile is None]
    whole = [i for i in plain if users[i].use.milli is None]
    fractions = [i for i in plain if users[i].use.milli is not None]
    out.extend(_mig_breaches(users, mig, gpu))
    if plain and mig:
        out.append(Breach(MIG_MIXED, tuple(range(len(users)))))
    elif plain and gpu.mig is not None:
        out.append(Breach(MIG_MIXED, tuple(plain)))
    if gpu.mig is None and gpu.sharing is not None:
        out.extend(
            Breach(SHARING_MODE, (i,)) for i in plain if not sharing_offers(gpu.sharing, users[i].use.kind)
        )
    milli = sum(users[i].use.milli or 0 for i in fractions)
    if whole and len(users) > 1:
        out.append(Breach(WHOLE_EXCLUSIVE, tuple(range(len(users)))))
    elif milli > MILLI_PER_GPU:
        out.append(Breach(GPU_OVERCOMMIT, tuple(fractions), milli, MILLI_PER_GPU))
    limit = sharing_replicas(gpu.sharing) if gpu.mig is None else None
    if limit is not None and len(fractions) > limit:
        out.append(Breach(SHARING_REPLICAS, tuple(fractions), len(fractions), limit))
    out.extend(_memory_breaches(users, gpu))
    return out


def _mig_breaches(users: Sequence[GpuUser], mig: Sequence[int], gpu: GpuState) -> list[Breach]:
    """Each MIG use names a profile the model offers, at one of its valid starts, an instance of the
    GPU's layout, and no other replica uses the same instance."""
    out: list[Breach] = []
    profiles = gpu.spec.profile_map
    served: defaultdict[tuple[str, int], list[int]] = defaultdict(list)
    for i in mig:
        use = users[i].use
        assert use.mig_profile is not None
        start = use.mig_start or 0
        prof = profiles.get(use.mig_profile)
        if prof is None:
            out.append(Breach(MIG_PROFILE, (i,)))
        elif start not in prof.starts:
            out.append(Breach(MIG_START, (i,)))
        elif gpu.mig is None or (use.mig_profile, start) not in gpu.mig:
            out.append(Breach(MIG_LAYOUT, (i,)))
        else:
            served[(use.mig_profile, start)].append(i)
    out.extend(Breach(MIG_SHARED, tuple(who)) for who in served.values() if len(who) > 1)
    return out


def _memory_breaches(users: Sequence[GpuUser], gpu: GpuState) -> list[Breach]:
    """A whole GPU or MIG instance has at least the memory its replica asks; the fractions of a GPU
    hold at most the model's memory together."""
    out: list[Breach] = []
    shared: list[int] = []
    profiles = gpu.spec.profile_map
    for i, u in enumerate(users):
        if not u.memory_mib:
            continue
        if u.use.mig_profile is None and u.use.milli is not None:
            shared.append(i)
            continue
        if u.use.mig_profile is not None and u.use.mig_profile not in profiles:
            continue  # an unknown profile is its own breach
        profile = u.use.mig_profile
        has = gpu.spec.memory_mib if profile is None else gpu.spec.instance_memory_mib(profile)
        if u.memory_mib > has:
            out.append(Breach(GPU_MEMORY, (i,), u.memory_mib, has))
    used = sum(users[i].memory_mib for i in shared)
    if used > gpu.spec.memory_mib:
        out.append(Breach(GPU_MEMORY, tuple(shared), used, gpu.spec.memory_mib))
    return out

"""The feasible ways to put one shape on one node, and what taking one does to the node."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

from gpuplan.models.cluster import MigInstance, check_mig_layout
from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.plan import GpuUse
from gpuplan.models.workload import TopologyNeed
from gpuplan.solvers.placement.state import (
    MigSlot,
    NodeInfo,
    NodeState,
    conflicts,
    has_share,
    mig_free,
    slice_milli,
    with_share,
    with_tags,
)
from gpuplan.solvers.problem import ShapeSpec, admitted, memory_room

log = logging.getLogger(__name__)

#: Largest number of GPU sets enumerated exhaustively for one whole-GPU request on one node.
MAX_COMBINATIONS = 512


@dataclass(frozen=True, slots=True)
class Option:
    """One way to place a shape on a node; ``gpus`` are GPU positions on the node."""

    kind: str
    gpus: tuple[int, ...] = ()
    milli: int = 0
    profile: str | None = None
    start: int = 0
    size: int = 0
    create: bool = False
    cost: int = 0


def describe(shape: ShapeSpec) -> str:
    """A short human description of a shape, e.g. ``2 whole GPUs (nvlink; H100-94GB), 8000 mCPU``."""
    if shape.kind == "whole":
        what = f"{shape.gpus} whole GPU{'s' if shape.gpus > 1 else ''}"
    elif shape.kind == "fraction":
        what = f"{shape.milli} milli-GPU of one shared GPU"
    elif shape.kind == "mig":
        what = f"MIG instance {shape.mig_profile}"
    else:
        what = "no GPU"
    notes = []
    if shape.kind == "whole" and shape.gpus > 1 and shape.topology is not TopologyNeed.ANY:
        notes.append(str(shape.topology))
    if shape.gpu_memory_mib:
        notes.append(f"{shape.gpu_memory_mib} MiB of GPU memory")
    models = shape.named_models if shape.gpu_memory_mib else shape.models
    if models:
        notes.append("|".join(sorted(models)))
    if notes:
        what += f" ({'; '.join(notes)})"
    return f"{what}, {shape.cpu_milli} mCPU, {shape.memory_mib} MiB"


def gpu_ok(info: NodeInfo, pos: int, shape: ShapeSpec) -> bool:
    """Whether the GPU at ``pos`` is of a model the shape accepts, in a sharing mode that offers it, on a
    node kube-scheduler's filters admit the shape to (:func:`~gpuplan.solvers.problem.admitted`)."""
    return (
        (not shape.models or info.models[pos].name in shape.models)
        and info.spec.gpus[pos].offers(shape.kind)
        and admitted(shape, info.spec.name)
    )


def _layout_ok(info: NodeInfo, pos: int, layout: tuple[tuple[str, int], ...]) -> bool:
    """Whether ``layout`` is a valid MIG layout for the GPU model at ``pos`` (memoised per placer)."""
    model = info.models[pos]
    key = (model.name, layout)
    ok = info.layouts_checked.get(key)
    if ok is None:
        instances = tuple(MigInstance(profile=p, start=s) for p, s in layout)
        ok = not check_mig_layout(model.name, instances, info.catalog)
        info.layouts_checked[key] = ok
    return ok


def whole_groups(info: NodeInfo, state: NodeState, shape: ShapeSpec) -> list[list[int]]:
    """Groups of free whole GPUs (positions) that may hold the request together: the node, one NVLink
    clique or one NUMA node, as the topology need says; only groups with enough GPUs are returned."""
    k = shape.gpus
    cand = [
        p
        for p, f in enumerate(state.free)
        if f == MILLI_PER_GPU and state.mig[p] is None and gpu_ok(info, p, shape)
    ]
    if len(cand) < k:
        return []
    return [g for g in info.spec.topology_groups(shape, cand) if len(g) >= k]


def _whole_sets(info: NodeInfo, state: NodeState, shape: ShapeSpec) -> list[Option]:
    """Sets of ``shape.gpus`` free whole GPUs honouring the topology need, cheapest links first."""
    k = shape.gpus
    sets: set[tuple[int, ...]] = set()
    for group in whole_groups(info, state, shape):
        if info.uniform_cost:
            sets.add(tuple(group[:k]))
        elif _count_combinations(len(group), k) <= MAX_COMBINATIONS:
            sets.update(itertools.combinations(group, k))
        else:
            sets.update(_greedy_sets(info, group, k))
    ranked = sorted((info.spec.cost([info.index(p) for p in s]), s) for s in sets)
    return [Option("whole", gpus=s, cost=c) for c, s in ranked]


def _count_combinations(n: int, k: int) -> int:
    count = 1
    for i in range(k):
        count = count * (n - i) // (i + 1)
    return count


def _greedy_sets(info: NodeInfo, group: list[int], k: int) -> set[tuple[int, ...]]:
    """One GPU set per seed GPU, grown by adding the GPU with the cheapest links to the set."""
    out: set[tuple[int, ...]] = set()
    for seed in group:
        chosen = [seed]
        rest = [p for p in group if p != seed]
        while len(chosen) < k:
            best = min(rest, key=lambda p: (sum(_pair_cost(info, p, q) for q in chosen), p))
            chosen.append(best)
            rest.remove(best)
        out.add(tuple(sorted(chosen)))
    return out


def _pair_cost(info: NodeInfo, p: int, q: int) -> int:
    a, b = sorted((info.index(p), info.index(q)))
    return info.spec.pair_cost[(a, b)]


def fraction_fits(info: NodeInfo, state: NodeState, pos: int, shape: ShapeSpec) -> bool:
    """Whether GPU ``pos`` can take the fraction ``shape`` now, sharing tags aside: compute and GPU
    memory left, MIG off, the node's sharing mode and the GPU's model allow it."""
    return (
        state.free[pos] >= shape.milli
        and state.mig[pos] is None
        and memory_room(shape, state.gmem[pos]) > 0
        and has_share(state, pos)
        and gpu_ok(info, pos, shape)
    )


def _fractions(info: NodeInfo, state: NodeState, shape: ShapeSpec, tags: tuple[str, ...]) -> list[Option]:
    return [
        Option("fraction", gpus=(p,), milli=shape.milli)
        for p in range(len(state.free))
        if fraction_fits(info, state, p, shape) and not conflicts(state, p, tags)
    ]


def mig_placements(
    info: NodeInfo, state: NodeState, shape: ShapeSpec, tags: tuple[str, ...] = ()
) -> tuple[list[Option], list[Option]]:
    """Free existing instances of the profile, and new instances at valid free starts (if allowed)."""
    name = shape.mig_profile
    assert name is not None
    existing: list[Option] = []
    created: list[Option] = []
    for p, slots in enumerate(state.mig):
        if slots is None or not gpu_ok(info, p, shape) or conflicts(state, p, tags):
            continue
        free, new = mig_starts(info, p, slots, name)
        existing.extend(Option("mig", gpus=(p,), profile=name, start=s, size=size) for s, size in free)
        created.extend(
            Option("mig", gpus=(p,), profile=name, start=s, size=size, create=True) for s, size in new
        )
    return existing, created


def mig_starts(
    info: NodeInfo, p: int, slots: tuple[MigSlot, ...], name: str
) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """(free instances of profile ``name``, new instances at valid free starts if creating is allowed) on
    the GPU at ``p`` with ``slots``, as (start, size); memoised per GPU model and slots, which repeat
    from state to state."""
    model = info.models[p]
    key = (model.name, slots, name)
    found = info.mig_starts.get(key)
    if found is not None:
        return found
    prof = model.profile_map.get(name)
    free: tuple[tuple[int, int], ...] = ()
    new: list[tuple[int, int]] = []
    if prof is not None:
        free = tuple((s, size) for s, pn, size, occupied in slots if pn == name and not occupied)
        if info.allow_create:
            taken = {i for s, _, size, _ in slots for i in range(s, s + size)}
            layout = tuple((pn, s) for s, pn, _, _ in slots)
            for pl in prof.placements:
                if any(i in taken for i in range(pl.start, pl.start + pl.size)):
                    continue
                if _layout_ok(info, p, tuple(sorted((*layout, (name, pl.start)), key=lambda x: x[1]))):
                    new.append((pl.start, pl.size))
    found = info.mig_starts[key] = (free, tuple(new))
    return found


def _migs(info: NodeInfo, state: NodeState, shape: ShapeSpec, tags: tuple[str, ...]) -> list[Option]:
    """Free existing instances of the profile on the node; only if there are none, new instances."""
    existing, created = mig_placements(info, state, shape, tags)
    return existing or created


def options(info: NodeInfo, state: NodeState, shape: ShapeSpec, tags: tuple[str, ...] = ()) -> list[Option]:
    """Every feasible placement of ``shape`` on the node, in order of preference.

    ``tags`` are the request's sharing tags: a shared GPU serving a conflicting team or tier is skipped.
    """
    if state.cpu < shape.cpu_milli or state.mem < shape.memory_mib or not admitted(shape, info.spec.name):
        return []
    if shape.kind == "whole":
        return _whole_sets(info, state, shape)
    if shape.kind == "fraction":
        return _fractions(info, state, shape, tags)
    if shape.kind == "mig":
        return _migs(info, state, shape, tags)
    return [Option("cpu")]


def _with_slot(slots: tuple[MigSlot, ...], slot: MigSlot) -> tuple[MigSlot, ...]:
    """``slots`` with ``slot`` replacing the instance at the same start (or added), sorted by start."""
    return tuple(sorted([s for s in slots if s[0] != slot[0]] + [slot]))


def apply(
    info: NodeInfo, state: NodeState, shape: ShapeSpec, option: Option, tags: tuple[str, ...] = ()
) -> NodeState:
    """The node state after taking ``option`` for ``shape`` (a shared GPU also takes ``tags``)."""
    free = list(state.free)
    gmem = state.gmem
    mig = state.mig
    gpu_tags = state.tags
    shares = state.shares
    if option.kind == "whole":
        for p in option.gpus:
            free[p] = 0
    elif option.kind == "fraction":
        free[option.gpus[0]] -= option.milli
        gmem = _hold_memory(gmem, option.gpus[0], shape.gpu_memory_mib)
        gpu_tags = with_tags(state.tags, option.gpus[0], tags)
        shares = with_share(shares, option.gpus[0])
    elif option.kind == "mig":
        p = option.gpus[0]
        slots = state.mig[p]
        assert slots is not None and option.profile is not None
        new = _with_slot(slots, (option.start, option.profile, option.size, True))
        free[p] = mig_free(info.models[p], new)
        mig = (*mig[:p], new, *mig[p + 1 :])
        gpu_tags = with_tags(state.tags, p, tags)
    return NodeState(
        state.cpu - shape.cpu_milli, state.mem - shape.memory_mib, tuple(free), mig, gpu_tags, gmem, shares
    )


def _hold_memory(gmem: tuple[int, ...], p: int, mib: int) -> tuple[int, ...]:
    """Free GPU memory per GPU after a fraction on the GPU at ``p`` takes ``mib`` MiB."""
    if not mib:
        return gmem
    return (*gmem[:p], gmem[p] - mib, *gmem[p + 1 :])


def uses(info: NodeInfo, option: Option) -> tuple[GpuUse, ...]:
    """The plan's GPU entries for an option."""
    if option.kind == "whole":
        return tuple(GpuUse(index=info.index(p)) for p in option.gpus)
    if option.kind == "fraction":
        return (GpuUse(index=info.index(option.gpus[0]), milli=option.milli),)
    if option.kind == "mig":
        return (GpuUse(index=info.index(option.gpus[0]), mig_profile=option.profile, mig_start=option.start),)
    return ()


def demand_milli(info: NodeInfo, option: Option) -> int:
    """GPU capacity an option takes, in milli-GPU (a MIG instance by its memory slices)."""
    if option.kind == "whole":
        return MILLI_PER_GPU * len(option.gpus)
    if option.kind == "fraction":
        return option.milli
    if option.kind == "mig":
        return slice_milli(info.models[option.gpus[0]], option.size)
    return 0


def keep(
    info: NodeInfo, state: NodeState, shape: ShapeSpec, gpus: tuple[GpuUse, ...], tags: tuple[str, ...] = ()
) -> NodeState:
    """The node state with a running replica's resources taken, exactly where it runs."""
    free = list(state.free)
    gmem = state.gmem
    mig = list(state.mig)
    gpu_tags = state.tags
    shares = state.shares
    for use in gpus:
        p = info.position_of[use.index]
        if use.milli is not None or use.mig_profile is not None:
            gpu_tags = with_tags(gpu_tags, p, tags)
        slots = mig[p]
        if use.mig_profile is not None and use.mig_start is not None:
            model = info.models[p]
            if slots is None:
                log.warning("node %s GPU %d runs MIG work but has MIG disabled", info.name, use.index)
                slots = ()
            size = model.profile(use.mig_profile).size_at(use.mig_start)
            slots = _with_slot(slots, (use.mig_start, use.mig_profile, size, True))
            mig[p] = slots
            free[p] = mig_free(model, slots)
            continue
        take = MILLI_PER_GPU if use.milli is None else use.milli
        short_memory = use.milli is not None and memory_room(shape, gmem[p]) == 0
        if free[p] < take or slots is not None or short_memory:
            log.warning("node %s GPU %d is over-committed by running work", info.name, use.index)
        free[p] = max(0, free[p] - take)
        if use.milli is not None:
            gmem = _hold_memory(gmem, p, min(gmem[p], shape.gpu_memory_mib))
            shares = with_share(shares, p)
    return NodeState(
        state.cpu - shape.cpu_milli,
        state.mem - shape.memory_mib,
        tuple(free),
        tuple(mig),
        gpu_tags,
        gmem,
        shares,
    )

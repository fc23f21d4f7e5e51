"""FGD's fragmentation measure, generalised to MIG slices and multi-GPU whole requests.

The *target workload* is the mix of the most popular request shapes covering 95% of the demand, each
with its popularity. For one target, a node's fragmentation is the free GPU capacity the target cannot
use: all of it when the target cannot fit on the node at all (CPU, GPU count, model, topology), otherwise
the free capacity of GPUs too small for it (for a MIG profile: free memory slices outside every valid
placement of that profile). CPU-only targets see all free GPU capacity as fragmented, as in the
reference simulator (``GetNodePodFrag`` returns ``XLSatisfied``/``XRLackCPU`` for them, both counted).
The node's fragmentation is the popularity-weighted sum over targets. Memory is not part of it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.workload import TopologyNeed
from gpuplan.solvers.placement.options import fraction_fits, gpu_ok, mig_starts, whole_groups
from gpuplan.solvers.placement.state import NodeInfo, NodeState, frag_key, slice_milli
from gpuplan.solvers.problem import PlacementProblem, Request, ShapeSpec, admitted

#: Share of the demand the target mix covers (the simulator's ``podPopularityThreshold`` of 95%).
COVERAGE = 0.95


@dataclass(frozen=True)
class Target:
    """One shape of the target workload (memory dropped) with its popularity (weights sum to 1)."""

    shape: ShapeSpec
    weight: float


def _rank(shape: ShapeSpec) -> tuple[int, int, int, str, str, str, str, str]:
    """Order among equally popular shapes: larger CPU, per-GPU share and GPU count first."""
    per_gpu = MILLI_PER_GPU if shape.kind == "whole" else shape.milli
    count = shape.gpus if shape.kind == "whole" else int(shape.kind in ("fraction", "mig"))
    return (
        shape.cpu_milli,
        per_gpu,
        count,
        "|".join(sorted(shape.models)),
        shape.kind,
        shape.mig_profile or "",
        str(shape.topology),
        "|".join(sorted(shape.refused)),
    )


def problem_mix(problem: PlacementProblem) -> tuple[Target, ...]:
    """The target mix every fragmentation measure of ``problem`` scores against: the mix of the
    expected arrivals when the problem carries them (free capacity is left for the work to come), else
    the mix of its own requests (what runs and what waits)."""
    if problem.arrivals:
        return shape_mix(problem.arrivals)
    return target_mix(problem.requests)


def target_mix(requests: Iterable[Request], coverage: float = COVERAGE) -> tuple[Target, ...]:
    """The target mix of ``requests`` (:func:`shape_mix` of their alternatives)."""
    return shape_mix((r.shapes for r in requests), coverage)


def shape_mix(replicas: Iterable[tuple[ShapeSpec, ...]], coverage: float = COVERAGE) -> tuple[Target, ...]:
    """The most popular shapes covering ``coverage`` of the replicas (each given by its alternatives),
    popularity renormalised.

    A replica with several alternatives counts ``1/n`` for each. Shapes are ranked by count, ties by
    :func:`_rank` descending; shapes are taken until the cumulative count reaches the coverage.
    """
    groups = Counter(replicas)
    # Shares in integer units: a request with n alternatives gives unit // n to each.
    unit = math.lcm(*(len(shapes) for shapes in groups)) if groups else 1
    bare: dict[ShapeSpec, ShapeSpec] = {}
    counts: dict[ShapeSpec, int] = {}
    for shapes, n in groups.items():
        share = n * (unit // len(shapes))
        for s in shapes:
            key = bare.setdefault(s, replace(s, memory_mib=0))
            counts[key] = counts.get(key, 0) + share
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], _rank(kv[0])), reverse=True)
    threshold = sum(counts.values()) * Fraction(coverage).limit_denominator(10_000)
    chosen: list[tuple[ShapeSpec, int]] = []
    cum = 0
    for shape, count in ranked:
        if cum >= threshold:
            break
        chosen.append((shape, count))
        cum += count
    return tuple(Target(shape, float(Fraction(count, cum))) for shape, count in chosen)


@dataclass(frozen=True)
class _Plan:
    """Targets that can ever use a symmetric node class: (cpu, per-GPU milli, weight), (cpu, k, weight)."""

    fractions: tuple[tuple[int, int, float], ...]
    wholes: tuple[tuple[int, int, float], ...]


@dataclass(frozen=True)
class _Relevant:
    """The targets that can use a node class's GPUs, as (weight, CPU, index into ``bare``), in target
    order; ``bare`` are their distinct shapes without CPU."""

    targets: tuple[tuple[float, int, int], ...]
    bare: tuple[ShapeSpec, ...]


class Fragmentation:
    """Expected fragmentation of a node state for a target mix, memoised by node state."""

    def __init__(self, targets: Sequence[Target]) -> None:
        self.targets = tuple(targets)
        self.total_weight = sum(t.weight for t in self.targets)
        self._memo: dict[Hashable, float] = {}
        self._plans: dict[int, _Plan] = {}
        self._relevant: dict[int, _Relevant] = {}

    def __call__(self, info: NodeInfo, state: NodeState) -> float:
        """Popularity-weighted free GPU milli that the targets cannot use."""
        key = frag_key(info, state)
        value = self._memo.get(key)
        if value is None:
            value = self._compute(info, state)
            self._memo[key] = value
        return value

    def _compute(self, info: NodeInfo, state: NodeState) -> float:
        free = sum(state.free)
        if free == 0:
            return 0.0
        if info.symmetric and state.shares is None and _memory_untouched(info, state):
            return free * self.total_weight - self._usable_symmetric(info, state)
        relevant = self._targets_for(info)
        # ``usable`` depends on a target's CPU only through the node's free CPU, so it is computed once
        # per shape without CPU; the sum still runs over the targets in order (the same float result).
        found: list[int | None] = [None] * len(relevant.bare)
        used = 0.0
        for weight, cpu, k in relevant.targets:
            if state.cpu < cpu:
                continue
            u = found[k]
            if u is None:
                u = found[k] = usable(info, state, relevant.bare[k])
            used += weight * u
        return free * self.total_weight - used

    def _targets_for(self, info: NodeInfo) -> _Relevant:
        """The targets that could use some GPU of the node's class: the others add nothing (CPU-only
        targets, and those asking for GPU models the node lacks), so they are left out."""
        found = self._relevant.get(info.cls)
        if found is None:
            names = {m.name for m in info.models}
            bare: dict[ShapeSpec, int] = {}
            targets: list[tuple[float, int, int]] = []
            for t in self.targets:
                s = t.shape
                if s.kind == "cpu" or (s.models and names.isdisjoint(s.models)) or not admitted(s, info.name):
                    continue
                k = bare.setdefault(replace(s, cpu_milli=0), len(bare))
                targets.append((t.weight, s.cpu_milli, k))
            found = _Relevant(tuple(targets), tuple(bare))
            self._relevant[info.cls] = found
        return found

    def _plan(self, info: NodeInfo) -> _Plan:
        plan = self._plans.get(info.cls)
        if plan is None:
            fractions: list[tuple[int, int, float]] = []
            wholes: list[tuple[int, int, float]] = []
            for t in self.targets:
                s = t.shape
                if (
                    not info.models
                    or (s.models and info.models[0].name not in s.models)
                    or not info.spec.gpus[0].offers(s.kind)
                    or not admitted(s, info.name)
                ):
                    continue
                if s.kind == "fraction":
                    fractions.append((s.cpu_milli, s.milli, t.weight))
                elif s.kind == "whole" and (
                    s.topology is not TopologyNeed.NVLINK
                    or s.gpus == 1
                    or any(len(c) == len(info.spec.gpus) for c in info.spec.nvlink_cliques)
                ):
                    wholes.append((s.cpu_milli, s.gpus, t.weight))
            plan = _Plan(tuple(fractions), tuple(wholes))
            self._plans[info.cls] = plan
        return plan

    def _usable_symmetric(self, info: NodeInfo, state: NodeState) -> float:
        """Weighted usable milli on interchangeable MIG-disabled GPUs (suffix sums over sorted free)."""
        plan = self._plan(info)
        ordered = sorted(state.free)
        suffix = list(itertools.accumulate(reversed(ordered)))[::-1]
        suffix.append(0)
        cpu = state.cpu
        used = 0.0
        for c, m, w in plan.fractions:
            if cpu >= c:
                used += w * suffix[bisect.bisect_left(ordered, m)]
        full = len(ordered) - bisect.bisect_left(ordered, MILLI_PER_GPU)
        for c, k, w in plan.wholes:
            if cpu >= c and full >= k:
                used += w * MILLI_PER_GPU * full
        return used


def _memory_untouched(info: NodeInfo, state: NodeState) -> bool:
    """Whether no fraction holds GPU memory on the node (the symmetric shortcut counts milli only)."""
    return all(f == g.memory_mib for f, g in zip(state.gmem, info.spec.gpus, strict=True))


def usable(info: NodeInfo, state: NodeState, shape: ShapeSpec) -> int:
    """Free GPU milli on the node that ``shape`` could use (0 when it cannot fit at all)."""
    if shape.kind == "cpu" or state.cpu < shape.cpu_milli:
        return 0
    if shape.kind == "whole":
        return MILLI_PER_GPU * len({p for g in whole_groups(info, state, shape) for p in g})
    if state.mem < shape.memory_mib:
        return 0
    # The GPUs and instances ``options`` would offer (without sharing tags), without building them.
    if shape.kind == "fraction":
        return sum(f for p, f in enumerate(state.free) if fraction_fits(info, state, p, shape))
    assert shape.mig_profile is not None
    total = 0
    for p, slots in enumerate(state.mig):
        if slots is None or not gpu_ok(info, p, shape):
            continue
        free, new = mig_starts(info, p, slots, shape.mig_profile)
        covered = {i for s, size in free + new for i in range(s, s + size)}
        if covered:
            total += slice_milli(info.models[p], len(covered))
    return total

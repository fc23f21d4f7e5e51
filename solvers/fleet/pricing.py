"""Pricing: the most valuable pattern one node of a class can host, at the master LP's prices.

A *pattern* is how many replicas of each request class (and alternative) one node takes. The model
counts replicas per class, never one variable per replica:

- GPUs without MIG whose GPUs are interchangeable (one model, one NUMA node, no partial NVLink cliques)
  are packed by *fills*: a fill is a maximal multiset of fraction sizes one GPU holds, and the model
  chooses how many GPUs take each fill, how many are given whole, and which classes use the slots.
  This is the Gilmore-Gomory view of the GPUs inside one node, exact and with a tight relaxation.
- Other nodes get one count per class and GPU: whole GPUs by topology group, fractions within each
  GPU's free milli, free GPU memory (fractions that ask for GPU memory always take this form) and, on
  a time-sliced GPU, within its shares left (always GPU by GPU).
- MIG GPUs count instances by profile within free memory and compute slices and the instances they
  already have, ignoring start positions; when the policy lets a plan re-partition (destroy idle
  instances and create others), every instance used counts against the memory and compute slices the
  busy instances leave, idle ones being free to reuse or replace.

CPU and memory bound every pattern. The model is exact for GPUs without MIG whose whole-GPU groups do
not overlap; for MIG start positions, overlapping NVLink cliques and isolation between teams on one GPU
it is a relaxation, so a pattern may not realise in full, but the optimum never under-states what a
node can host: the bounds built on it stay valid.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from ortools.sat.python import cp_model

from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.solvers.fleet.classes import NodeClass, RequestClass
from gpuplan.solvers.placement.options import gpu_ok
from gpuplan.solvers.placement.state import has_share
from gpuplan.solvers.problem import ShapeSpec, admitted, memory_room
from gpuplan.solvers.sat_parameters import cp_solver

log = logging.getLogger(__name__)

#: Reduced values are scaled to integers for CP-SAT with this factor.
SCALE = 1000
#: Above this many fills for one GPU capacity, pack fractions GPU by GPU instead.
MAX_FILLS = 20_000

#: One entry of a pattern: (request class index, alternative index).
Item = tuple[int, int]
#: A count variable or a constant.
Count = cp_model.IntVar | int


@dataclass(frozen=True)
class Pattern:
    """Replicas per (class, alternative) one node of class ``node_class`` hosts."""

    node_class: int
    counts: tuple[tuple[Item, int], ...]

    def value(self, classes: Sequence[RequestClass]) -> int:
        """Queue penalty the pattern saves."""
        return sum(classes[c].value * n for (c, _), n in self.counts)

    def value_at(self, prices: Sequence[float]) -> float:
        """The pattern's worth at per-class ``prices`` (indexed by class)."""
        return sum(prices[c] * n for (c, _), n in self.counts)

    def per_class(self) -> dict[int, int]:
        """Replicas per class (alternatives summed)."""
        out: dict[int, int] = {}
        for (c, _), n in self.counts:
            out[c] = out.get(c, 0) + n
        return out


@dataclass(frozen=True)
class Priced:
    """What pricing one node class found: improving patterns, the best pattern's reduced value and a
    proven upper bound on it (the node class's share of the Lagrangian bound)."""

    patterns: tuple[Pattern, ...]
    best: float
    upper: float
    proved: bool
    #: Whether the wall clock stopped a solve meant to stop on deterministic time (its patterns may
    #: then differ between runs).
    cut_by_wall: bool = False


@cache
def fills(capacity: int, sizes: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Every maximal multiset of ``sizes`` (ascending) fitting in ``capacity``, as counts per size;
    empty when there are more than :data:`MAX_FILLS`."""
    out: list[tuple[int, ...]] = []
    counts = [0] * len(sizes)

    def rec(i: int, left: int) -> bool:
        if i < 0:
            if left < sizes[0] and any(counts):
                out.append(tuple(counts))
            return len(out) <= MAX_FILLS
        for k in range(left // sizes[i], -1, -1):
            counts[i] = k
            if not rec(i - 1, left - k * sizes[i]):
                return False
        counts[i] = 0
        return True

    if not sizes or not rec(len(sizes) - 1, capacity):
        return ()
    return tuple(out)


def _usable(sizes: tuple[int, ...], capacity: int) -> tuple[int, ...]:
    return tuple(size for size in sizes if size <= capacity)


def _admits(nc: NodeClass, cls: RequestClass) -> bool:
    reserved = nc.info.reserved
    return reserved is None or cls.team in reserved


class PatternModel:
    """The pricing model of one node class at given reduced values: linear constraints over integer
    counts whose feasible set holds every pattern a node of the class can host (classes at a reduced
    value of 0 or less left out), so its LP relaxation does too (:mod:`.relaxation`)."""

    def __init__(self, nc: NodeClass, classes: Sequence[RequestClass], reduced: Mapping[int, float]) -> None:
        self.m = cp_model.CpModel()
        self.nc = nc
        self.terms: list[tuple[Item, cp_model.IntVar]] = []
        info, state = nc.info, nc.state
        self.plain = [p for p in range(len(info.spec.gpus)) if state.mig[p] is None]
        self.whole_free = [p for p in self.plain if state.free[p] == MILLI_PER_GPU]
        items: list[tuple[RequestClass, int, ShapeSpec, int]] = []
        for cls in classes:
            r = reduced.get(cls.index, 0.0)
            if r <= 0 or not _admits(nc, cls):
                continue
            for k, shape in enumerate(cls.shapes):
                fits = shape.cpu_milli <= state.cpu and shape.memory_mib <= state.mem
                if fits and admitted(shape, info.name):
                    items.append((cls, k, shape, round(SCALE * r)))
        sizes = tuple(sorted({s.milli for _, _, s, _ in items if s.kind == "fraction"}))
        # Fills need interchangeable GPUs without share counts (time-sliced GPUs are packed GPU by GPU),
        # fractions limited by milli-GPU alone (fills do not count GPU memory) and a manageable number of
        # fills per free capacity.
        grouped = (
            info.symmetric
            and state.shares is None
            and not _asks_gpu_memory(items)
            and all(
                state.free[p] < min(sizes, default=MILLI_PER_GPU + 1)
                or fills(state.free[p], _usable(sizes, state.free[p]))
                for p in self.plain
            )
        )
        # Whole shapes: (GPUs per replica, count) when grouped, else GPUs used per topology group.
        self.whole: list[tuple[int, cp_model.IntVar]] = []
        self.group_uses: dict[tuple[int, ...], list[cp_model.LinearExpr]] = {}
        # Fractions: (size, GPU position or -1 when grouped, count); GPU memory asks: (MiB, position, count).
        self.fractions: list[tuple[int, int, cp_model.IntVar]] = []
        self.gpu_memory: list[tuple[int, int, cp_model.IntVar]] = []
        self.migs: dict[int, list[tuple[ShapeSpec, cp_model.IntVar]]] = {}
        objective: list[cp_model.LinearExpr] = []
        cpu: list[cp_model.LinearExpr] = []
        mem: list[cp_model.LinearExpr] = []
        per_class: dict[int, list[cp_model.IntVar]] = {}
        for cls, k, shape, weight in items:
            count = self._count(cls, k, shape, grouped)
            if count is None:
                continue
            self.terms.append(((cls.index, k), count))
            per_class.setdefault(cls.index, []).append(count)
            objective.append(weight * count)
            cpu.append(shape.cpu_milli * count)
            mem.append(shape.memory_mib * count)
        for c, counts in per_class.items():
            if len(counts) > 1:
                self.m.add(sum(counts) <= classes[c].demand)
        self.m.add(sum(cpu) <= state.cpu)
        self.m.add(sum(mem) <= state.mem)
        if grouped:
            self._by_fills(sizes)
        else:
            self._by_gpu()
            self._gpu_memory()
        self._mig()
        self.m.maximize(sum(objective))

    def _cap(self, cls: RequestClass, shape: ShapeSpec) -> int:
        state = self.nc.state
        cpu = state.cpu // shape.cpu_milli if shape.cpu_milli else cls.demand
        mem = state.mem // shape.memory_mib if shape.memory_mib else cls.demand
        return min(cls.demand, cpu, mem)

    def _count(self, cls: RequestClass, k: int, shape: ShapeSpec, grouped: bool) -> cp_model.IntVar | None:
        """The count variable of (class, alternative), with the parts the GPU constraints need."""
        m, info, state = self.m, self.nc.info, self.nc.state
        cap = self._cap(cls, shape)
        tag = f"c{cls.index}a{k}"
        if cap <= 0:
            return None
        if shape.kind == "cpu":
            return m.new_int_var(0, cap, tag)
        if shape.kind == "whole":
            eligible = [p for p in self.whole_free if gpu_ok(self.nc.info, p, shape)]
            if len(eligible) < shape.gpus:
                return None
            total = m.new_int_var(0, min(cap, len(eligible) // shape.gpus), tag)
            if grouped:
                self.whole.append((shape.gpus, total))
                return total
            groups = [g for g in info.spec.topology_groups(shape, eligible) if len(g) >= shape.gpus]
            if not groups:
                return None
            parts = [m.new_int_var(0, len(g) // shape.gpus, f"{tag}g{i}") for i, g in enumerate(groups)]
            m.add(total == sum(parts))
            for g, n in zip(groups, parts, strict=True):
                self.group_uses.setdefault(tuple(g), []).append(shape.gpus * n)
            return total
        if shape.kind == "fraction":
            gpus = [
                p
                for p in self.plain
                if state.free[p] >= shape.milli
                and memory_room(shape, state.gmem[p]) > 0
                and has_share(state, p)
                and gpu_ok(self.nc.info, p, shape)
            ]
            if not gpus:
                return None
            total = m.new_int_var(0, cap, tag)
            if grouped:
                self.fractions.append((shape.milli, -1, total))
                return total
            parts = [
                m.new_int_var(
                    0, min(cap, state.free[p] // shape.milli, memory_room(shape, state.gmem[p])), f"{tag}p{p}"
                )
                for p in gpus
            ]
            m.add(total == sum(parts))
            for p, n in zip(gpus, parts, strict=True):
                self.fractions.append((shape.milli, p, n))
                if shape.gpu_memory_mib:
                    self.gpu_memory.append((shape.gpu_memory_mib, p, n))
            return total
        parts = []
        for p, slots in enumerate(state.mig):
            model = info.models[p]
            if slots is None or shape.mig_profile not in model.profile_map or not gpu_ok(info, p, shape):
                continue
            n = m.new_int_var(0, min(cap, model.profile(shape.mig_profile).max_instances), f"{tag}m{p}")
            self.migs.setdefault(p, []).append((shape, n))
            parts.append(n)
        if not parts:
            return None
        total = m.new_int_var(0, cap, tag)
        m.add(total == sum(parts))
        return total

    def _by_fills(self, sizes: tuple[int, ...]) -> None:
        """Interchangeable GPUs: GPUs of equal free capacity take fills; whole-free ones may go whole."""
        m, state = self.m, self.nc.state
        levels: dict[int, int] = {}
        for p in self.plain:
            levels[state.free[p]] = levels.get(state.free[p], 0) + 1
        slots: dict[int, list[cp_model.LinearExpr]] = {size: [] for size in sizes}
        whole_gpus = m.new_int_var(0, levels.get(MILLI_PER_GPU, 0), "whole_gpus")
        m.add(sum(g * n for g, n in self.whole) <= whole_gpus)
        for free, count in sorted(levels.items()):
            usable = _usable(sizes, free)
            chosen = []
            for i, fill in enumerate(fills(free, usable) if usable else ()):
                y = m.new_int_var(0, count, f"fill{free}_{i}")
                chosen.append(y)
                for size, k in zip(usable, fill, strict=True):
                    if k:
                        slots[size].append(k * y)
            m.add(sum(chosen) + (whole_gpus if free == MILLI_PER_GPU else 0) <= count)
        for size in sizes:
            users = [n for s, _, n in self.fractions if s == size]
            if users:
                m.add(sum(users) <= sum(slots[size]))

    def _by_gpu(self) -> None:
        """GPU by GPU: fractions within each GPU's free milli, not on GPUs given whole; whole GPUs per
        topology group."""
        m, state = self.m, self.nc.state
        given = {p: m.new_bool_var(f"whole{p}") for p in self.whole_free}
        for group, use in self.group_uses.items():
            m.add(sum(use) <= sum(given[p] for p in group))
        loads: dict[int, list[cp_model.LinearExpr]] = {}
        for size, p, n in self.fractions:
            loads.setdefault(p, []).append(size * n)
        for p, load in loads.items():
            m.add(sum(load) <= (state.free[p] * (1 - given[p]) if p in given else state.free[p]))
        self._shares()

    def _shares(self) -> None:
        """A time-sliced GPU takes at most as many fractions as it has shares left."""
        shares = self.nc.state.shares
        if shares is None:
            return
        counts: dict[int, list[cp_model.IntVar]] = {}
        for _, p, n in self.fractions:
            counts.setdefault(p, []).append(n)
        for p, ns in counts.items():
            self.m.add(sum(ns) <= shares[p])

    def _gpu_memory(self) -> None:
        """GPU by GPU: the fractions asking for GPU memory hold at most the GPU's free memory."""
        loads: dict[int, list[cp_model.LinearExpr]] = {}
        for mib, p, n in self.gpu_memory:
            loads.setdefault(p, []).append(mib * n)
        for p, load in loads.items():
            self.m.add(sum(load) <= self.nc.state.gmem[p])

    def _mig(self) -> None:
        """Per MIG GPU: free instances of a profile serve it; new ones take free memory and compute."""
        if self.nc.repartition:
            self._mig_repartition()
            return
        info, state = self.nc.info, self.nc.state
        for p, uses in self.migs.items():
            model = info.models[p]
            slots = state.mig[p]
            assert slots is not None
            free_inst: dict[str, int] = {}
            for _, prof, _, occupied in slots:
                if not occupied:
                    free_inst[prof] = free_inst.get(prof, 0) + 1
            held_mem = sum(size for _, _, size, _ in slots)
            held_compute = sum(model.profile(prof).compute_slices for _, prof, _, _ in slots)
            new_mem: list[cp_model.LinearExprT] = []
            new_compute: list[cp_model.LinearExprT] = []
            by_profile: dict[str, list[cp_model.IntVar]] = {}
            for shape, n in uses:
                assert shape.mig_profile is not None
                by_profile.setdefault(shape.mig_profile, []).append(n)
            for prof, counts in by_profile.items():
                spec = model.profile(prof)
                created: Count = (
                    self.m.new_int_var(0, spec.max_instances, f"new{p}{prof}") if info.allow_create else 0
                )
                self.m.add(sum(counts) <= free_inst.get(prof, 0) + created)
                new_mem.append(spec.memory_slices * created)
                new_compute.append(spec.compute_slices * created)
            self.m.add(sum(new_mem) <= model.memory_slices - held_mem)
            self.m.add(sum(new_compute) <= model.compute_slices - held_compute)

    def _mig_repartition(self) -> None:
        """Per MIG GPU whose idle instances a plan may destroy: every instance used, reused or new,
        takes its memory and compute slices out of what the busy instances leave (start positions
        ignored: a relaxation of every layout the GPU may be given)."""
        info, state = self.nc.info, self.nc.state
        for p, uses in self.migs.items():
            model = info.models[p]
            slots = state.mig[p]
            assert slots is not None
            busy = [(prof, size) for _, prof, size, occupied in slots if occupied]
            mem: list[cp_model.LinearExprT] = []
            compute: list[cp_model.LinearExprT] = []
            for shape, n in uses:
                assert shape.mig_profile is not None
                spec = model.profile(shape.mig_profile)
                # The fewest memory slices any placement of the profile takes.
                mem.append(min((pl.size for pl in spec.placements), default=spec.memory_slices) * n)
                compute.append(spec.compute_slices * n)
            self.m.add(sum(mem) <= model.memory_slices - sum(size for _, size in busy))
            self.m.add(
                sum(compute) <= model.compute_slices - sum(model.profile(b).compute_slices for b, _ in busy)
            )


def _asks_gpu_memory(items: Sequence[tuple[RequestClass, int, ShapeSpec, int]]) -> bool:
    """Whether a fraction among the pricing items asks for GPU memory."""
    return any(s.kind == "fraction" and s.gpu_memory_mib for _, _, s, _ in items)


def pattern_solver(time_limit_s: float, deterministic_s: float | None, seed: int) -> cp_model.CpSolver:
    """A CP-SAT solver for one node class's pattern model: one worker, full linearisation (the fill
    formulation's LP relaxation is tight: it proves ~4x faster), stopped on ``deterministic_s`` of
    deterministic time when given (the wall-clock limit stays as a safety net)."""
    return cp_solver(
        time_limit_s=max(0.01, time_limit_s),
        deterministic_s=deterministic_s,
        workers=1,
        seed=seed,
        linearization_level=2,
    )


def price(
    nc: NodeClass,
    classes: Sequence[RequestClass],
    reduced: Mapping[int, float],
    *,
    time_limit_s: float,
    deterministic_s: float | None = None,
    seed: int = 0,
    max_patterns: int = 5,
) -> Priced:
    """The most valuable patterns of node class ``nc`` at reduced class values ``reduced`` (value less
    the class's price): up to ``max_patterns`` distinct ones among the solutions found, best last.
    With ``deterministic_s`` the solve stops on that much deterministic time (the wall-clock limit
    stays as a safety net)."""
    model = PatternModel(nc, classes, reduced)
    if not model.terms:
        return Priced((), 0.0, 0.0, True)
    solver = pattern_solver(time_limit_s, deterministic_s, seed)
    found: list[dict[Item, int]] = []

    class Collect(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            found.append({item: self.value(v) for item, v in model.terms if self.value(v)})

    code = solver.solve(model.m, Collect())
    cut = (
        deterministic_s is not None
        and code != cp_model.OPTIMAL
        and solver.deterministic_time < 0.99 * deterministic_s
    )
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Priced((), 0.0, math.inf, False, cut)
    patterns = []
    seen: set[tuple[tuple[Item, int], ...]] = set()
    for counts in reversed(found):
        key = tuple(sorted(counts.items()))
        if key in seen:
            continue
        seen.add(key)
        patterns.append(Pattern(nc.index, key))
        if len(patterns) >= max_patterns:
            break
    return Priced(
        tuple(patterns),
        solver.objective_value / SCALE,
        solver.best_objective_bound / SCALE,
        code == cp_model.OPTIMAL,
        cut,
    )

"""Reach the fairness floor: a greedy plan's teams short of their floor served by taking new work of
teams above theirs off a node.

A greedy plan serves the queue by tier, so a team whose work ranks low can hold far less than its
floor (:mod:`gpuplan.models.rules.fairness`) while the fleet is full of other teams' new work. This pass
takes each waiting single replica of a team short of its floor (in queue order) and places it where it
fits as it is, or else on the node where it fits after taking off new single replicas (never running
work: nothing moves, no budget is spent) of teams that stay at or above their floor without them, the
least queue penalty taken off first and in all; the replicas taken off are then placed again wherever
they fit. Every placement goes through the placement kernel, so the plan keeps every rule. A step is
kept only when it lowers the plan's lack of the floor (the first part of the queue term). It is the
exact solver's start under a floor, which its floor stage then improves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuplan.models.plan import Assignment
from gpuplan.models.rules.fairness import served_units
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.greedy.room import alone
from gpuplan.solvers.placement import Placer
from gpuplan.solvers.problem import PlacementProblem, Request

log = logging.getLogger(__name__)

Key = tuple[str, int]


@dataclass(frozen=True)
class _Swap:
    """Taking ``gone`` off node ``n`` lets ``placed`` in, at ``cost`` queue penalty."""

    cost: int
    n: int
    gone: tuple[Key, ...]


class _Floors:
    """Each team's units held against its floor, and the units of each placed replica."""

    def __init__(self, problem: PlacementProblem, placed: dict[Key, Assignment]) -> None:
        self.problem = problem
        self.team = {q.key: q.team for q in problem.requests}
        self.models = {(n.name, g.index): g.model for n in problem.nodes for g in n.gpus}
        self.held = problem.served_units(placed.values())

    def units(self, a: Assignment) -> int:
        """Units one assignment holds."""
        served = served_units(
            [a],
            lambda x: self.team[(x.workload, x.replica)],
            lambda node, index: self.models[(node, index)],
            self.problem.catalog,
            self.problem.floor_unit,
        )
        return sum(served.values())

    def short(self, team: str) -> int:
        """Units ``team`` lacks of its floor (0 without one)."""
        return max(0, self.problem.fair_floor.get(team, 0) - self.held.get(team, 0))

    def spare(self, team: str) -> int:
        """Units ``team`` holds above its floor."""
        return self.held.get(team, 0) - self.problem.fair_floor.get(team, 0)

    def add(self, team: str, units: int) -> None:
        """``team`` holds ``units`` more (fewer, when negative)."""
        self.held[team] = self.held.get(team, 0) + units


def reach_floors(problem: PlacementProblem, placer: Placer, start: SolveResult) -> SolveResult:
    """``start`` (the plan ``placer`` holds) with the replicas of teams short of their floor placed as
    the module says, when that lowers the plan's lack of the floor; else ``start``. ``placer`` holds the
    plan returned."""
    if not problem.fair_floor:
        return start
    by_key = {q.key: q for q in problem.requests}
    single = alone(problem)
    penalty = {q.key: queue_penalty(q, problem) for q in problem.requests}
    placed = {(a.workload, a.replica): a for a in start.assignments}
    floors = _Floors(problem, placed)
    order = [q for q in problem.queue_order() if q.key not in placed and single(q) and q.running is None]
    taken = 0
    for q in order:
        if floors.short(q.team) <= 0 or q.key in placed or placer.never_fits(q):
            continue
        got = placer.place(q)
        if got is None:
            swap = _cheapest_swap(placer, placed, floors, by_key, q, penalty, single)
            if swap is None:
                continue
            got = _apply(placer, placed, by_key, swap, q)
            for key in swap.gone:
                floors.add(by_key[key].team, -floors.units(placed.pop(key)))
            taken += len(swap.gone)
        placed[q.key] = got
        floors.add(q.team, floors.units(got))
    if taken or len(placed) != len(start.assignments):
        for q in problem.queue_order():
            if q.key not in placed and single(q) and q.running is None and not placer.never_fits(q):
                again = placer.place(q)
                if again is not None:
                    placed[q.key] = again
                    floors.add(q.team, floors.units(again))
    if placed.keys() == {(a.workload, a.replica) for a in start.assignments}:
        return start
    before = {(u.workload, u.replica): u for u in start.unplaced}
    unplaced = tuple(before.get(q.key) or placer.unplaced(q) for q in problem.requests if q.key not in placed)
    log.info(
        "fairness floor: %d waiting before, %d after, %d new replicas of teams above their floor taken off",
        len(start.unplaced), len(unplaced), taken,
    )  # fmt: skip
    return replace(
        start,
        assignments=tuple(sorted(placed.values(), key=lambda a: (a.workload, a.replica))),
        unplaced=unplaced,
        mig_layouts=placer.mig_layouts(),
    )


def _on_node(placed: dict[Key, Assignment], name: str) -> list[Key]:
    """The replicas placed on node ``name``."""
    return [k for k, a in placed.items() if a.node == name]


def _cheapest_swap(
    placer: Placer,
    placed: dict[Key, Assignment],
    floors: _Floors,
    by_key: dict[Key, Request],
    q: Request,
    penalty: dict[Key, int],
    single: Callable[[Request], bool],
) -> _Swap | None:
    """The node where ``q`` fits after taking off the least queue penalty of new single replicas of
    other teams that stay at or above their floor (cheapest first on each node), tried on a copy."""
    best: _Swap | None = None
    for info in placer.infos:
        here = _on_node(placed, info.name)
        spare = {t: floors.spare(t) for t in {by_key[k].team for k in here}}
        takeable = sorted(
            (k for k in here if by_key[k].running is None and single(by_key[k]) and by_key[k].team != q.team),
            key=lambda k: (penalty[k], k),
        )
        gone: list[Key] = []
        cost = 0
        placer.cluster.begin()
        used = list(placer.rules.used)
        for k in takeable:
            units = floors.units(placed[k])
            team = by_key[k].team
            if spare[team] < units or (best is not None and cost + penalty[k] >= best.cost):
                continue
            spare[team] -= units
            gone.append(k)
            cost += penalty[k]
            stay = [(by_key[s], placed[s]) for s in here if s not in gone]
            placer.release(info.pos, [(by_key[k], placed[k])], stay)
            if any(placer.fits_on(q, info.pos, alt) for alt in range(len(q.shapes))):
                # fits_on answers as place_on would: _apply places it there.
                best = _Swap(cost, info.pos, tuple(gone))
                break
        placer.cluster.rollback()
        placer.rules.used = used
    return best


def _apply(
    placer: Placer, placed: dict[Key, Assignment], by_key: dict[Key, Request], swap: _Swap, q: Request
) -> Assignment:
    """Take ``swap.gone`` off its node and place ``q`` there (it fits: the swap was tried)."""
    info = placer.infos[swap.n]
    here = _on_node(placed, info.name)
    gone = [(by_key[k], placed[k]) for k in swap.gone]
    placer.release(swap.n, gone, [(by_key[k], placed[k]) for k in here if k not in swap.gone])
    for alt in range(len(q.shapes)):
        got = placer.place_on(q, swap.n, alt)
        if got is not None:
            return got
    raise AssertionError(f"{q.key} did not fit on node {info.name} after the swap it was tried with")

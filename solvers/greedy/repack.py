"""Re-pack shared GPUs: a greedy plan's GPU fractions placed again together, largest first.

A greedy plan places fractions of GPUs one at a time in queue order, so the fractions it starts end up
spread over the shared GPUs of a pool of nodes, and a later fraction finds no GPU with room although
the pool has it in total (on the bundled example two batch jobs of 0.6 GPU wait beside four L40S nodes
whose GPUs are all partly free). This pass takes every fraction the plan starts off its GPUs (single
replicas only: running work and gang members stay where they are, so nothing moves and no budget is
spent) and places them again, with the waiting replicas that can run on a fraction, in a few orders
(largest fraction first: first-fit decreasing, the classic bin-packing order; highest queue penalty
first), keeping the order whose plan places the most queue penalty, and only when that is more than the
plan had. Every placement goes through the placement kernel, so the plan keeps every rule it keeps. It
is cheap (a few milliseconds on the bundled example) and deterministic: the first improvement of the
exact solver's hint, before the make-room search and the neighbourhood search, which cost seconds.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace

from gpuplan.models.plan import Assignment, Unplaced
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.greedy.room import alone
from gpuplan.solvers.placement import Placer
from gpuplan.solvers.problem import PlacementProblem, Request

log = logging.getLogger(__name__)

Key = tuple[str, int]
#: Orders tried: the fractions to place, each with its key, to a sort key.
_Order = Callable[[Request], tuple[float, ...]]


def _fraction(a: Assignment) -> bool:
    """Whether ``a`` holds fractions of GPUs only (no whole GPU, no MIG instance)."""
    return bool(a.gpus) and all(g.milli is not None for g in a.gpus)


def _largest_fraction(q: Request) -> int:
    """The GPU milli of the largest fractional alternative of ``q`` (0: none is fractional)."""
    return max((s.milli for s in q.shapes if s.gpus == 0 and s.mig_profile is None), default=0)


def repack_shared(problem: PlacementProblem, placer: Placer, start: SolveResult) -> SolveResult:
    """``start`` (the plan ``placer`` holds) with its new single fractions placed again together with
    the waiting fractions, in the order that places the most queue penalty, when that is more than
    ``start`` places; else ``start`` itself. ``placer`` holds the plan returned."""
    by_key = {q.key: q for q in problem.requests}
    single = alone(problem)
    pool = [
        a
        for a in start.assignments
        if by_key[(a.workload, a.replica)].running is None and single(by_key[(a.workload, a.replica)])
        and _fraction(a)
    ]  # fmt: skip
    waiting = [
        by_key[(u.workload, u.replica)]
        for u in start.unplaced
        if single(by_key[(u.workload, u.replica)])
        and _largest_fraction(by_key[(u.workload, u.replica)]) > 0
        and not placer.never_fits(by_key[(u.workload, u.replica)])
    ]
    if not pool or not waiting:
        return start
    penalty = {q.key: queue_penalty(q, problem) for q in problem.requests}
    before = sum(penalty[(a.workload, a.replica)] for a in pool)
    candidates = [by_key[(a.workload, a.replica)] for a in pool] + waiting
    orders: Sequence[_Order] = (
        lambda q: (-_largest_fraction(q), -penalty[q.key]),
        lambda q: (-penalty[q.key], -_largest_fraction(q)),
    )

    def arranged(order: _Order) -> list[Request]:
        return sorted(candidates, key=lambda q: (*order(q), q.key))

    best: tuple[int, int] | None = None
    for i, order in enumerate(orders):
        placer.cluster.begin()
        used = list(placer.rules.used)
        placed = _placed_again(placer, start, pool, by_key, arranged(order))
        value = sum(penalty[k] for k in placed)
        placer.cluster.rollback()
        placer.rules.used = used
        if value > before and (best is None or value > best[0]):
            best = (value, i)
    if best is None:
        return start
    placed = _placed_again(placer, start, pool, by_key, arranged(orders[best[1]]))
    log.info(
        "re-pack of shared GPUs: %d fractions placed again, %d waiting before, queue %d lower",
        len(pool), len(start.unplaced), best[0] - before,
    )  # fmt: skip
    moved = {(a.workload, a.replica) for a in pool}
    kept = [a for a in start.assignments if (a.workload, a.replica) not in moved]
    # A replica that waited keeps its reason; a fraction that lost its place gets the kernel's.
    previous: dict[Key, Unplaced] = {(u.workload, u.replica): u for u in start.unplaced}
    unplaced = [
        previous.get(q.key) or placer.unplaced(q)
        for q in problem.requests
        if q.key not in placed and (q.key in previous or q.key in moved)
    ]
    return replace(
        start,
        assignments=tuple(sorted([*kept, *placed.values()], key=lambda a: (a.workload, a.replica))),
        unplaced=tuple(unplaced),
        mig_layouts=placer.mig_layouts(),
    )


def _placed_again(
    placer: Placer,
    start: SolveResult,
    pool: list[Assignment],
    by_key: dict[Key, Request],
    order: list[Request],
) -> dict[Key, Assignment]:
    """Take ``pool`` off its nodes and place ``order`` (the pool and waiting fractions) one by one:
    what was placed, by key."""
    gone = {(a.workload, a.replica) for a in pool}
    by_node: dict[str, list[tuple[Request, Assignment]]] = defaultdict(list)
    for a in start.assignments:
        by_node[a.node].append((by_key[(a.workload, a.replica)], a))
    positions = {info.name: info.pos for info in placer.infos}
    for node in sorted({a.node for a in pool}):
        here = by_node[node]
        placer.release(
            positions[node],
            [(q, a) for q, a in here if q.key in gone],
            [(q, a) for q, a in here if q.key not in gone],
        )
    placed: dict[Key, Assignment] = {}
    for q in order:
        there = placer.place(q)
        if there is not None:
            placed[q.key] = there
    return placed

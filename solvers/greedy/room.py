"""Make room: a local search that places waiting replicas by taking other work off a node.

A greedy plan fills nodes with the first replicas of the queue; a large replica that comes later can
then find no node with room, although the queue term would drop if it took a node and the replicas
there went elsewhere or waited. This pass tries exactly that, for each waiting replica (largest queue
penalty first): on each node that could host it, take off the replicas the plan starts there (and, when
the disruption budget has moves left, the running replicas that may migrate), place the waiting replica
and put the ones taken off back wherever the kernel finds room. A large replica taken off that finds no
room gets room made for it the same way on another node, up to :data:`DEPTH` levels (the chains of
moves a defragmenter makes); running work must find a place (it moves, it is never dropped), and small
newcomers may end up waiting when that lowers the queue term. The best node wins if it lowers the queue
term. Members of gangs of several replicas stay where they are. Every step goes through the placement
kernel, so the plan keeps every rule the kernel keeps; the moves stay within the budget. The exact
solver starts from this plan.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field, replace

from gpuplan.models.plan import Assignment
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.placement import Placer
from gpuplan.solvers.problem import PlacementProblem, Request, may_move

log = logging.getLogger(__name__)

#: Passes over the waiting replicas at most (each change strictly lowers the queue term).
MAX_PASSES = 5
#: Levels of room made for a replica that was taken off and finds none (a chain of that many nodes).
DEPTH = 2
#: A newcomer taken off gets room made for it only if it is worth at least this share of the replica
#: that took its place (small ones may simply wait).
CHAIN_SHARE = 4

#: (workload, replica) -> its request and where the plan puts it.
_Placed = dict[tuple[str, int], tuple[Request, Assignment]]


@dataclass
class _Change:
    """The plan after making room somewhere: placements, moves of running work, and the queue gain."""

    placed: _Placed
    moves: Counter[str]
    gain: int


@dataclass
class _Search:
    """The plan being improved and what it may change."""

    problem: PlacementProblem
    placer: Placer
    #: Replicas that may be taken off and re-placed: newcomers, and running work that may migrate.
    movable: set[tuple[str, int]] = field(default_factory=set)
    deadline: float = 0.0
    #: Trials (nodes tried for a replica) left; the search stops when none are (None: no such limit).
    steps: int | None = None

    def out_of_time(self) -> bool:
        return time.perf_counter() >= self.deadline or (self.steps is not None and self.steps <= 0)

    def moves_left(self, moves: Counter[str], team: str | None) -> int:
        budget = self.problem.policy.disruption
        left = budget.max_moves_per_round - sum(moves.values())
        if team is not None and budget.max_moves_per_team is not None:
            left = min(left, budget.max_moves_per_team - moves[team])
        return left

    def penalty(self, q: Request) -> int:
        return queue_penalty(q, self.problem)

    def on_node(
        self, plan: _Change, req: Request, n: int, k: int, running: bool, depth: int, seen: frozenset[int]
    ) -> _Change | None:
        """``plan`` with ``req`` placed on node ``n`` (alternative ``k``) after taking the movable
        replicas there off (running ones only if ``running``) and re-placing them, running work and the
        most valuable first; None if ``req`` does not fit even then, or running work finds no place
        within the budget. Changes the placer: the caller journals it."""
        name = self.placer.infos[n].name
        here = [(q, a) for q, a in plan.placed.values() if a.node == name]
        gone = [(q, a) for q, a in here if q.key in self.movable and (running or q.running is None)]
        off = {q.key for q, _ in gone}
        self.placer.release(n, gone, [(q, a) for q, a in here if q.key not in off])
        mine = self.placer.place_on(req, n, k)
        if mine is None:
            return None
        placed = {key: qa for key, qa in plan.placed.items() if key not in off}
        placed[req.key] = (req, mine)
        out = _Change(placed, Counter(plan.moves), plan.gain + self.penalty(req))
        for q, _ in sorted(gone, key=lambda qa: (qa[0].running is None, -self.penalty(qa[0]), qa[0].key)):
            a = self.placer.place(q)
            if a is not None:
                out.placed[q.key] = (q, a)
            else:
                out.gain -= self.penalty(q)  # it waits, unless room is made for it elsewhere
                worth = q.running is not None or CHAIN_SHARE * self.penalty(q) >= self.penalty(req)
                if depth > 0 and worth:
                    out = self.best(out, q, depth - 1, seen | {n}) or out
                if q.key not in out.placed:
                    if q.running is not None:
                        return None
                    continue
            new = out.placed[q.key][1]
            if q.running is not None and new != q.assignment(q.running):
                out.moves[q.team] += 1
                if self.moves_left(out.moves, q.team) < 0:
                    return None
        return out

    def best(self, plan: _Change, req: Request, depth: int, seen: frozenset[int]) -> _Change | None:
        """``plan`` changed where making room for ``req`` gains most (fewer moves on ties), made for
        good in the placer (inside the caller's transaction); None if no node of ``seen``'s complement
        gains."""
        found: tuple[tuple[int, int], tuple[int, int, bool]] | None = None
        runs = (False, True) if self.moves_left(plan.moves, None) > 0 else (False,)
        for n in range(len(self.placer.infos)):
            if n in seen or not self.placer.fits_empty(req, n) or self.out_of_time():
                continue
            for k in range(len(req.shapes)):
                for running in runs:
                    if self.steps is not None:
                        self.steps -= 1
                    self.placer.cluster.begin()
                    used = list(self.placer.rules.used)
                    try:
                        out = self.on_node(plan, req, n, k, running, depth, seen | {n})
                    finally:
                        self.placer.cluster.rollback()
                        self.placer.rules.used = used
                    if out is not None and out.gain > plan.gain:
                        score = (out.gain, -sum(out.moves.values()))
                        if found is None or score > found[0]:
                            found = (score, (n, k, running))
                    if out is not None:
                        break  # it fits without moving running work: moving it gains nothing more here
        if found is None:
            return None
        n, k, running = found[1]
        return self.on_node(plan, req, n, k, running, depth, seen | {n})


def make_room(
    problem: PlacementProblem,
    placer: Placer,
    start: SolveResult,
    deadline: float,
    steps: int | None = None,
) -> tuple[SolveResult, bool]:
    """``start`` (the plan ``placer`` holds, running work kept where it runs) with waiting replicas
    placed wherever taking other work off a node lowers the queue term, and whether the wall clock
    stopped the search. It stops at ``deadline``, or after ``steps`` trials (then the same plan on any
    machine unless the deadline came first), with what it has."""
    by_key = {q.key: q for q in problem.requests}
    members = Counter(q.gang for q in problem.requests if q.gang is not None)

    def single(q: Request) -> bool:
        """Placed or taken off alone: not in a gang of several replicas."""
        return q.gang is None or members[q.gang] == 1

    plan = _Change({(a.workload, a.replica): (by_key[(a.workload, a.replica)], a) for a in start.assignments},
                   Counter(), 0)  # fmt: skip
    movable = {
        q.key for q in problem.requests if single(q) and (q.running is None or may_move(problem.policy, q))
    }
    search = _Search(problem, placer, movable, deadline, steps)
    # Replicas a pass takes off may find room in the next one: passes repeat while one places more.
    for _ in range(MAX_PASSES):
        waiting = sorted(
            (q for q in problem.requests if q.key not in plan.placed and single(q)),
            key=lambda q: (-search.penalty(q), q.key),
        )
        gain = plan.gain
        for req in waiting:
            if search.out_of_time():
                break
            if req.key in plan.placed or placer.never_fits(req):
                continue
            placer.cluster.begin()
            used = list(placer.rules.used)
            found = search.best(plan, req, DEPTH, frozenset())
            if found is None:
                placer.cluster.rollback()
                placer.rules.used = used
            else:
                placer.cluster.commit()
                plan = found
        if plan.gain == gain or search.out_of_time():
            break
    cut = time.perf_counter() >= deadline
    if plan.gain == 0:
        return start, cut
    before = {(u.workload, u.replica): u for u in start.unplaced}
    # A replica that waited keeps its reason; a newcomer that lost its place gets the kernel's.
    unplaced = tuple(
        before.get(q.key) or placer.unplaced(q) for q in problem.requests if q.key not in plan.placed
    )
    log.info(
        "make room: %d waiting before, %d after (queue %d lower), %d running replicas moved",
        len(start.unplaced),
        len(unplaced),
        plan.gain,
        sum(plan.moves.values()),
    )
    improved = replace(
        start,
        assignments=tuple(a for _, a in sorted(plan.placed.values(), key=lambda qa: qa[0].key)),
        unplaced=unplaced,
        mig_layouts=placer.mig_layouts(),
    )
    return improved, cut

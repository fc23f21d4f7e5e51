"""Make room: a local search that places waiting replicas by taking other work off a node.

A greedy plan fills nodes with the first replicas of the queue; a large replica that comes later can
then find no node with room, although the queue term would drop if it took a node and the replicas
there went elsewhere or waited. This pass tries exactly that, for each waiting replica (largest queue
penalty first): on a node that could host it, take off the replicas the plan starts there (and, when
the disruption budget has moves left, the running replicas that may migrate), put back where they were
as many as leave room for it (running work first, larger first), place it and put the others wherever
the kernel finds room. A large replica taken off that finds no room gets room made for it the same way
on another node, up to :data:`DEPTH` levels (the chains of moves a defragmenter makes); running work
must find a place (it moves, it is never dropped), and small newcomers may end up waiting when that
lowers the queue term. The node that gains most with the fewest moves wins (the way Borg-style
preemption picks the cheapest victims). On a large fleet only the :data:`CANDIDATES` nodes where the
fewest replicas would have to leave, by an estimate from each GPU's free and movable capacity, are
tried. Members of gangs of several replicas are never taken off; a waiting gang gets room made for
each member in turn, all of them or none, inside one value of its domain label if it has one (as the
kernel places gangs), kept only when the queue term drops (on a demo-like input a gang of two 8-GPU
replicas held 60% of the penalty waiting, behind an 8-GPU newcomer worth a tenth of it). Every step
goes through the placement kernel, so the plan keeps every rule the kernel keeps; the moves stay within
the budget.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace

from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.plan import MIGRATE, Assignment
from gpuplan.models.rules.disruption import moves_allowed, stop_kind, team_moves_allowed
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.placement import NodeInfo, NodeState, Placer
from gpuplan.solvers.problem import PlacementProblem, Request, Running, ShapeSpec, may_move

log = logging.getLogger(__name__)

#: Passes over the waiting replicas at most (each change strictly lowers the queue term).
MAX_PASSES = 5
#: Levels of room made for a replica that was taken off and finds none (a chain of that many nodes).
DEPTH = 2
#: A newcomer taken off gets room made for it only if it is worth at least this share of the replica
#: that took its place (small ones may simply wait).
CHAIN_SHARE = 4
#: Above this many nodes, a replica tries only the nodes of lowest estimated eviction cost.
RANKED_ABOVE = 64
#: Nodes tried per alternative on a large fleet (a third of them for a replica of a chain).
CANDIDATES = 12
#: Trials a waiting replica gets on a large fleet, chains included (the cheapest places come first).
TRIALS_PER_REPLICA = 40
Key = tuple[str, int]
#: A replica and where the plan puts it.
_Entry = tuple[Request, Assignment]


@dataclass
class _Use:
    """Movable work on one node: GPU milli and replicas per GPU position, CPU and memory."""

    milli: list[int]
    count: list[int]
    cpu: int = 0
    mem: int = 0


class _Plan:
    """The plan being changed, indexed by node, with an undo journal that nests like the placer's
    transactions. ``value`` is the queue penalty of the replicas placed; ``moved`` counts, per team,
    running replicas placed elsewhere than where they run."""

    def __init__(self, entries: dict[Key, _Entry], node_pos: dict[str, int], penalty: dict[Key, int]) -> None:
        self.placed: dict[Key, _Entry] = {}
        self.node_pos = node_pos
        self.penalty = penalty
        self.on: dict[int, set[Key]] = defaultdict(set)
        self.version: Counter[int] = Counter()
        #: Every node whose placements changed, in order (what rankings kept since then must look at).
        self.changed: list[int] = []
        self.moved: Counter[str] = Counter()
        self.value = 0
        self._journal: list[tuple[Key, Request, Assignment | None]] = []
        self._marks: list[int] = []
        for q, a in entries.values():
            self.set(q, a)
        self.start_value = self.value

    @property
    def gain(self) -> int:
        """Queue penalty placed beyond the starting plan's."""
        return self.value - self.start_value

    @property
    def moves(self) -> int:
        """Running replicas the plan moves."""
        return self.moved.total()

    @staticmethod
    def _is_moved(q: Request, a: Assignment) -> bool:
        return q.running is not None and not _at(q.running, a)

    def set(self, q: Request, a: Assignment | None) -> None:
        """Put ``q`` at ``a`` (``None``: it waits)."""
        old = self.placed.get(q.key)
        if self._marks:
            self._journal.append((q.key, q, None if old is None else old[1]))
        if old is not None:
            n = self.node_pos[old[1].node]
            self.on[n].discard(q.key)
            self.version[n] += 1
            self.changed.append(n)
            self.value -= self.penalty[q.key]
            self.moved[q.team] -= self._is_moved(q, old[1])
            del self.placed[q.key]
        if a is not None:
            n = self.node_pos[a.node]
            self.on[n].add(q.key)
            self.version[n] += 1
            self.changed.append(n)
            self.value += self.penalty[q.key]
            self.moved[q.team] += self._is_moved(q, a)
            self.placed[q.key] = (q, a)

    def begin(self) -> None:
        self._marks.append(len(self._journal))

    def commit(self) -> None:
        self._marks.pop()
        if not self._marks:
            self._journal.clear()

    def rollback(self) -> None:
        mark = self._marks.pop()
        undo = self._journal[mark:]
        del self._journal[mark:]
        marks, self._marks = self._marks, []
        for _, q, a in reversed(undo):
            self.set(q, a)
        self._marks = marks


@dataclass
class _Search:
    """The plan being improved and what it may change."""

    problem: PlacementProblem
    placer: Placer
    plan: _Plan
    #: Replicas that may be taken off and re-placed: newcomers, and running work that may migrate.
    movable: set[Key]
    #: Running replicas the plan may move in all.
    budget: int
    deadline: float = 0.0
    #: Trials (nodes tried for a replica) left; the search stops when none are (None: no such limit).
    steps: int | None = None
    #: Try only the nodes of lowest estimated eviction cost (a large fleet).
    ranked: bool = False
    #: While a chosen change is re-made, the clock and the trial count do not stop it.
    replaying: bool = False
    #: Trials left for the waiting replica being served, chains included (None: no such limit).
    tries: int | None = None
    _fits_empty: dict[tuple[Hashable, tuple[ShapeSpec, ...], str], bool] = field(default_factory=dict)
    _use: dict[int, tuple[int, _Use]] = field(default_factory=dict)
    _estimates: dict[tuple[int, ShapeSpec], tuple[NodeState, int, int | None]] = field(default_factory=dict)
    _hosts: dict[tuple[tuple[ShapeSpec, ...], str], list[int]] = field(default_factory=dict)
    _host_sets: dict[tuple[tuple[ShapeSpec, ...], str], frozenset[int]] = field(default_factory=dict)
    #: Per (shapes, team, shape): how far into ``plan.changed`` the estimates were brought up to date,
    #: and the estimate of every host node where room can be made.
    _known: dict[tuple[tuple[ShapeSpec, ...], str, ShapeSpec], tuple[int, dict[int, int]]] = field(
        default_factory=dict
    )

    def out_of_time(self) -> bool:
        if self.replaying:
            return False
        spent = self.tries is not None and self.tries <= 0
        return spent or time.perf_counter() >= self.deadline or (self.steps is not None and self.steps <= 0)

    def moves_left(self, team: str | None) -> int:
        left = self.budget - self.plan.moves
        cap = team_moves_allowed(self.problem.policy.disruption)
        if team is not None and cap is not None:
            left = min(left, cap - self.plan.moved[team])
        return left

    def begin(self) -> list[int]:
        self.placer.cluster.begin()
        self.plan.begin()
        return list(self.placer.rules.used)

    def rollback(self, used: list[int]) -> None:
        self.placer.cluster.rollback()
        self.placer.rules.used = used
        self.plan.rollback()

    def commit(self) -> None:
        self.placer.cluster.commit()
        self.plan.commit()

    def fits_empty(self, req: Request, n: int) -> bool:
        info = self.placer.infos[n]
        key = (info.cls, req.shapes, req.team if info.reserved is not None else "")
        found = self._fits_empty.get(key)
        if found is None:
            found = self._fits_empty[key] = self.placer.fits_empty(req, n)
        return found

    def use(self, n: int) -> _Use:
        """Movable work on node ``n`` now."""
        version = self.plan.version[n]
        cached = self._use.get(n)
        if cached is not None and cached[0] == version:
            return cached[1]
        info = self.placer.infos[n]
        gpus = len(info.spec.gpus)
        out = _Use([0] * gpus, [0] * gpus)
        for key in self.plan.on[n]:
            if key not in self.movable:
                continue
            a = self.plan.placed[key][1]
            out.cpu += a.cpu_milli
            out.mem += a.memory_mib
            for g in a.gpus:
                p = info.position_of[g.index]
                out.milli[p] += MILLI_PER_GPU if g.milli is None else g.milli
                out.count[p] += 1
        self._use[n] = (version, out)
        return out

    def estimate(self, n: int, shape: ShapeSpec) -> int | None:
        """Replicas that would have to leave node ``n`` for ``shape`` to fit there, roughly (per GPU,
        those on the GPUs it would take; one more for CPU or memory short); ``None`` if even taking all
        movable work off would not make room. Memoised until the node or its work changes."""
        state = self.placer.cluster.states[n]
        version = self.plan.version[n]
        cached = self._estimates.get((n, shape))
        if cached is not None and cached[0] is state and cached[1] == version:
            return cached[2]
        found = self._estimate(n, shape, state)
        self._estimates[(n, shape)] = (state, version, found)
        return found

    def _estimate(self, n: int, shape: ShapeSpec, state: NodeState) -> int | None:
        use = self.use(n)
        short_cpu = state.cpu < shape.cpu_milli
        short_mem = state.mem < shape.memory_mib
        if (short_cpu and state.cpu + use.cpu < shape.cpu_milli) or (
            short_mem and state.mem + use.mem < shape.memory_mib
        ):
            return None
        wanted = shape.gpus or (1 if shape.milli else 0)
        need = MILLI_PER_GPU if shape.gpus else shape.milli
        costs = []
        if wanted:
            for p, free in enumerate(state.free):
                if state.mig[p] is not None:
                    continue
                if free >= need:
                    costs.append(0)
                elif free + use.milli[p] >= need:
                    costs.append(use.count[p])
            if len(costs) < wanted:
                return None
            costs.sort()
        return sum(costs[:wanted]) + short_cpu + short_mem

    def hosts(self, req: Request) -> list[int]:
        """The nodes that could host ``req`` when empty."""
        hosts = self._hosts.get((req.shapes, req.team))
        if hosts is None:
            hosts = [n for n in range(len(self.placer.infos)) if self.fits_empty(req, n)]
            self._hosts[(req.shapes, req.team)] = hosts
        return hosts

    def _host_set(self, req: Request) -> frozenset[int]:
        key = (req.shapes, req.team)
        found = self._host_sets.get(key)
        if found is None:
            found = self._host_sets[key] = frozenset(self.hosts(req))
        return found

    def known(self, req: Request, shape: ShapeSpec) -> dict[int, int]:
        """:meth:`estimate` of ``shape`` on every host node of ``req`` where room can be made, brought up
        to date on the nodes changed since the last call (ranking 1,213 nodes afresh for every trial took
        half of the search's time on the openb fleet)."""
        key = (req.shapes, req.team, shape)
        cached = self._known.get(key)
        if cached is None:
            found = {n: e for n in self.hosts(req) if (e := self.estimate(n, shape)) is not None}
        else:
            upto, found = cached
            if upto < len(self.plan.changed):
                hosts = self._host_set(req)
                for n in set(self.plan.changed[upto:]):
                    e = self.estimate(n, shape) if n in hosts else None
                    if e is None:
                        found.pop(n, None)
                    else:
                        found[n] = e
        self._known[key] = (len(self.plan.changed), found)
        return found

    def candidates(self, req: Request, seen: frozenset[int], depth: int) -> list[tuple[int, int, int]]:
        """(estimated evictions, node, alternative) to try for ``req``, cheapest first (ties by node):
        every node that could host it when empty (estimate 0), or on a large fleet those of lowest
        estimated eviction cost."""
        if not self.ranked:
            nodes = [n for n in self.hosts(req) if n not in seen]
            return [(0, n, k) for n in nodes for k in range(len(req.shapes))]
        limit = CANDIDATES if depth == DEPTH else max(1, CANDIDATES // 3)
        out: list[tuple[int, int, int]] = []
        for k, shape in enumerate(req.shapes):
            known = self.known(req, shape)
            scored = heapq.nsmallest(limit, ((e, n) for n, e in known.items() if n not in seen))
            out.extend((e, n, k) for e, n in scored)
        out.sort()
        return out

    def on_node(self, req: Request, n: int, k: int, running: bool, depth: int, seen: frozenset[int]) -> bool:
        """Place ``req`` on node ``n`` (alternative ``k``) after taking the movable replicas there off
        (running ones only if ``running``), putting back where they were those that leave it room, and
        re-placing the others elsewhere; whether it worked (running work all placed, the budget kept).
        Changes the placer and the plan: the caller journals both."""
        here = [self.plan.placed[key] for key in self.plan.on[n]]
        gone = [(q, a) for q, a in here if q.key in self.movable and (running or q.running is None)]
        if not gone or (running and all(q.running is None for q, _ in gone)):
            return False  # nothing (new) to take off: the replica did not fit here before
        off = {q.key for q, _ in gone}
        self.placer.release(n, gone, [(q, a) for q, a in here if q.key not in off])
        for q, _ in gone:
            self.plan.set(q, None)
        evicted: list[_Entry] = []
        for q, a in sorted(gone, key=lambda qa: (qa[0].running is None, -_milli(qa[1]), qa[0].key)):
            self.placer.cluster.begin()
            used = list(self.placer.rules.used)
            self.placer.hold(q, Running(a.node, a.gpus, a.alternative))
            if self.placer.fits_on(req, n, k):
                self.placer.cluster.commit()
                self.plan.set(q, a)
            else:
                self.placer.cluster.rollback()
                self.placer.rules.used = used
                evicted.append((q, a))
        mine = self.placer.place_on(req, n, k)
        if mine is None:
            return False
        self.plan.set(req, mine)
        for q, _ in sorted(evicted, key=lambda qa: (qa[0].running is None, -self.plan.penalty[qa[0].key])):
            there = self.placer.place(q)
            if there is not None:
                self.plan.set(q, there)
            else:
                share = CHAIN_SHARE * self.plan.penalty[q.key]
                worth = q.running is not None or share >= self.plan.penalty[req.key]
                if depth > 0 and worth:
                    # Running work must go somewhere: the change is judged whole by the caller.
                    self.best(q, depth - 1, seen | {n}, whole=q.running is not None)
                if q.key not in self.plan.placed:
                    if q.running is not None:
                        return False
                    continue
            if self.moves_left(q.team) < 0:
                return False
        return True

    def best(
        self,
        req: Request,
        depth: int,
        seen: frozenset[int],
        outside: frozenset[int] = frozenset(),
        *,
        whole: bool = False,
    ) -> bool:
        """Make room for ``req`` where the plan gains most (fewest moves on ties), for good in the placer
        and the plan (inside the caller's transaction); whether some node gained (with ``whole``: whether
        it was placed, gain or not, since the caller judges the change as a whole: a gang's member, or
        running work taken off that must find a place even where it only displaces newcomers worth as
        much). ``req`` goes to no node in ``seen`` (a chain's nodes) or ``outside`` (a gang's other
        domains); the work it sends away goes anywhere but the chain's nodes."""
        base = self.plan.gain
        found: tuple[tuple[int, int], tuple[int, int, bool]] | None = None
        runs = (False, True) if self.moves_left(None) > 0 else (False,)
        moves = self.plan.moves
        for estimate, n, k in self.candidates(req, seen | outside, depth):
            if self.out_of_time():
                break
            if found is not None and self.ranked and -found[0][1] - moves <= estimate:
                break  # the nodes left are estimated to cost at least as many moves
            for running in runs:
                if self.steps is not None and not self.replaying:
                    self.steps -= 1
                if self.tries is not None and not self.replaying:
                    self.tries -= 1
                used = self.begin()
                try:
                    ok = self.on_node(req, n, k, running, depth, seen | {n})
                    score = (self.plan.gain, -self.plan.moves)
                finally:
                    self.rollback(used)
                if ok and (whole or score[0] > base) and (found is None or score > found[0]):
                    found = (score, (n, k, running))
                if ok:
                    break  # it fits without moving running work: moving it gains nothing more here
        if found is None:
            return False
        n, k, running = found[1]
        replaying, self.replaying = self.replaying, True
        try:
            used = self.begin()
            if self.on_node(req, n, k, running, depth, seen | {n}):
                self.commit()
                return True
            self.rollback(used)  # cannot happen: the same change on the same state
            return False
        finally:
            self.replaying = replaying


def _gang(search: _Search, members: list[Request]) -> bool:
    """Place every member of a waiting gang in turn where it fits, or make room for it, inside one value
    of its domain labels if it has any (values in node-rank order, as the kernel tries them; for a gang
    that runs in part, the value of its members the plan places, which stay), in one transaction kept
    only if all were placed and the queue term dropped; whether it was kept."""
    if any(search.placer.never_fits(m) for m in members):
        return False
    gang = members[0].gang
    beside = [(q, a.node) for q, a in search.plan.placed.values() if q.gang == gang]
    domains = sorted({m.gang_domain for m in [*members, *(q for q, _ in beside)] if m.gang_domain})
    infos = sorted(search.placer.infos, key=lambda i: search.placer.cluster.rank[i.pos])
    values = dict.fromkeys(tuple(i.spec.labels.get(d) for d in domains) for i in infos)
    if beside:
        by_name = {i.name: i for i in infos}
        values = dict.fromkeys(tuple(by_name[node].spec.labels.get(d) for d in domains) for _, node in beside)
        values = values if len(values) == 1 else {}
    for value in (v for v in values if None not in v):
        outside = frozenset(i.pos for i in infos if tuple(i.spec.labels.get(d) for d in domains) != value)
        used = search.begin()
        before = search.plan.gain
        placed = True

        def inside(info: NodeInfo, out: frozenset[int] = outside) -> bool:
            return info.pos not in out

        for m in members:
            here = search.placer.place(m, inside)
            if here is not None:
                search.plan.set(m, here)
                continue
            search.tries = TRIALS_PER_REPLICA if search.ranked else None
            placed = search.best(m, DEPTH, frozenset(), outside, whole=True)
            if not placed or search.out_of_time():
                break
        search.tries = None
        if placed and all(m.key in search.plan.placed for m in members) and search.plan.gain > before:
            search.commit()
            return True
        search.rollback(used)
        if search.out_of_time():
            break
    return False


def _milli(a: Assignment) -> int:
    return sum(MILLI_PER_GPU if g.milli is None else g.milli for g in a.gpus)


def _at(run: Running, a: Assignment) -> bool:
    """Whether ``a`` keeps a replica where it runs (same node, GPUs and alternative)."""
    return a.node == run.node and a.alternative == run.alternative and a.gpus == run.gpus


def alone(problem: PlacementProblem) -> Callable[[Request], bool]:
    """Whether a request of ``problem`` is placed or taken off alone: not a member of a gang of several
    replicas (those move all together or not at all)."""
    members = Counter(q.gang for q in problem.requests if q.gang is not None)
    return lambda q: q.gang is None or members[q.gang] == 1


def moved_running(problem: PlacementProblem, plan: SolveResult) -> int:
    """Running replicas ``plan`` places elsewhere than where they run: its moves
    (:func:`~gpuplan.models.rules.disruption.stop_kind`)."""
    by_key = {q.key: q for q in problem.requests}
    return sum(
        1
        for a in plan.assignments
        if (run := by_key[(a.workload, a.replica)].running) is not None
        and stop_kind(placed=True, stays=_at(run, a)) == MIGRATE
    )


def make_room(
    problem: PlacementProblem,
    placer: Placer,
    start: SolveResult,
    deadline: float,
    steps: int | None = None,
    *,
    moves: int | None = None,
) -> tuple[SolveResult, bool]:
    """``start`` (the plan ``placer`` holds) with waiting replicas placed wherever taking other work off
    a node lowers the queue term, and whether the wall clock stopped the search. Running replicas move
    only if the budget lets them, and the plan moves at most ``moves`` of them in all (the policy's
    budget by default, moves ``start`` already makes included). It stops at ``deadline``, or after
    ``steps`` trials (then the same plan on any machine unless the deadline came first), with what it
    has."""
    by_key = {q.key: q for q in problem.requests}
    single = alone(problem)
    penalty = {q.key: queue_penalty(q, problem) for q in problem.requests}
    node_pos = {info.name: info.pos for info in placer.infos}
    entries = {(a.workload, a.replica): (by_key[(a.workload, a.replica)], a) for a in start.assignments}
    plan = _Plan(entries, node_pos, penalty)
    movable = {
        q.key for q in problem.requests if single(q) and (q.running is None or may_move(problem.policy, q))
    }
    budget = moves_allowed(problem.policy.disruption) if moves is None else moves
    ranked = len(placer.infos) > RANKED_ABOVE
    search = _Search(problem, placer, plan, movable, budget, deadline, steps, ranked)
    keyed = [(q.key, q) for q in problem.requests if single(q)]
    gangs: dict[str, list[Request]] = defaultdict(list)
    for q in problem.requests:
        if not single(q) and q.gang is not None and q.running is None:
            gangs[q.gang].append(q)
    # Replicas a pass takes off may find room in the next one: passes repeat while one places more.
    for _ in range(MAX_PASSES):
        # Waiting units, the largest queue penalty first: single replicas, and gangs none of whose
        # members the plan places.
        units = [[q] for k, q in keyed if k not in plan.placed] + [
            unit for unit in gangs.values() if not any(m.key in plan.placed for m in unit)
        ]
        units.sort(key=lambda unit: (-sum(penalty[m.key] for m in unit), unit[0].key))
        gain = plan.gain
        # Shapes no room was found for since the last change: a replica of the same shape finds none.
        failed: set[tuple[tuple[ShapeSpec, ...], str]] = set()
        for unit in units:
            if search.out_of_time():
                break
            if not single(unit[0]):
                if _gang(search, unit):
                    failed.clear()
                continue
            req = unit[0]
            if req.key in plan.placed or placer.never_fits(req) or (req.shapes, req.team) in failed:
                continue
            search.tries = TRIALS_PER_REPLICA if ranked else None
            if search.best(req, DEPTH, frozenset()):
                failed.clear()
            else:
                failed.add((req.shapes, req.team))
            search.tries = None
        if plan.gain == gain or search.out_of_time():
            break
    cut = time.perf_counter() >= deadline
    if plan.gain <= 0:
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
        plan.moves,
    )
    improved = replace(
        start,
        assignments=tuple(a for _, a in sorted(plan.placed.values(), key=lambda qa: qa[0].key)),
        unplaced=unplaced,
        mig_layouts=placer.mig_layouts(),
    )
    return improved, cut

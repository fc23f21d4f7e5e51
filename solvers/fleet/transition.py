"""Moving running work towards the target configuration, within the disruption budget.

When running work may move, the configuration LP of everything (running and waiting replicas) on the
empty fleet says how the fleet should be packed; its columns start from the patterns the nodes hold
now, so staying as is is always one of its options. A *transition* MIP then chooses, for every node,
either to stay as it is or to take one of the target patterns of its class, maximising the queue
penalty placed, keeping every running replica placed and evicting at most the budget of running
replicas:

    max  sum_{n,p} value(p) z_np - eps * moves
    s.t. sum_p z_np = 1                                   every node one pattern (staying is one)
         running_c <= sum_{n,p} a_cp z_np <= running_c + waiting_c   every class
         sum_{n,p} evicted(n, p) z_np <= budget           running replicas that must leave their node

The MIP is solved on its LP relaxation first: nodes the relaxation keeps as they are stay fixed, so
the integer search runs only on the nodes it would change. A class may be over-filled at a cost (an
elastic upper row), so that staying everywhere is always a feasible start. The chosen nodes are then
re-packed on the placement kernel: replicas the pattern keeps stay exactly where they run, the
others leave, then each node's missing slots take evicted replicas of their class first and waiting
ones next. If any evicted replica finds no place, the whole transition is undone: running work is
never dropped.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Container, Hashable, Sequence
from dataclasses import dataclass, replace

import highspy
import numpy as np

from gpuplan.models.plan import Assignment
from gpuplan.models.rules.disruption import team_moves_allowed
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.fleet.classes import NodeClass, RequestClass, node_classes, request_classes
from gpuplan.solvers.fleet.generation import generate
from gpuplan.solvers.fleet.pricing import Item, Pattern
from gpuplan.solvers.fleet.rounding import realisation_order as _size
from gpuplan.solvers.greedy import Fgd
from gpuplan.solvers.placement import NodeFilter, Placer
from gpuplan.solvers.problem import PlacementProblem, Request, Running, disturbable
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)

#: Target patterns offered to one node besides staying as it is (those closest to what it holds).
TARGETS_PER_NODE = 4
#: Share of the time left that the configuration LP gets when no earlier call left columns for this
#: fleet; with them (a round after the first) it gets :data:`WARM_GENERATION_SHARE`, since last round's
#: columns already price most classes and the MIP, not generation, is what finds the change (B2-m
#: round 105 of seed 42 at a 5 s limit: 0.52 s of generation left the MIP 0.05 s, and it kept every node
#: as it was).
GENERATION_SHARE = 0.35
WARM_GENERATION_SHARE = 0.15
#: Transition MIPs tried, each with fewer evictions when the last moved too much.
ATTEMPTS = 3
#: Share of the time left that each transition MIP gets (the rest: realising its change, and the next
#: attempt if that change moved too much).
ATTEMPT_SHARE = 0.85
#: Rows HiGHS keeps in its cut pool: with the default pool the MIP spent a second separating thousands of
#: cuts at the root before its sub-MIP heuristic found the change (B2-m round 105); with a small one the
#: heuristic finds it within 0.5 s (a change need only beat staying as is, not be proved the best).
CUT_POOL_ROWS = 10
#: Share of the moves the first MIP may spend on evictions: re-packing a node also moves some of the
#: replicas it keeps to other GPUs, so evictions alone would overshoot the budget.
FIRST_BUDGET_SHARE = 0.85

Key = tuple[str, int]


@dataclass
class TransitionReport:
    """What the transition did: nodes re-packed, running replicas moved, waiting replicas placed."""

    nodes: int = 0
    moved: int = 0
    placed: int = 0
    undone: bool = False


#: Patterns generated in earlier calls of this process, by node state and class shape: rounds replan a
#: fleet whose node types and demand shapes barely change, so last round's columns start this one's.
_POOL: dict[Hashable, dict[tuple[tuple[Hashable, int, int], ...], None]] = {}
#: Patterns kept per node state.
POOL_SIZE = 400


class _ColumnPool:
    """Translates patterns to and from keys that outlive one call (class shapes, node states)."""

    def __init__(self, nodes: Sequence[NodeClass], classes: Sequence[RequestClass]) -> None:
        self.nodes = nodes
        self.node_key = [(nc.info.cls, nc.state) for nc in nodes]
        self.class_key: list[Hashable] = [(c.shapes, c.team, c.tier) for c in classes]
        self.by_key = {k: c.index for c, k in zip(classes, self.class_key, strict=True)}

    def recall(self) -> list[Pattern]:
        """Earlier patterns whose classes all exist now."""
        out = []
        for nc, key in zip(self.nodes, self.node_key, strict=True):
            for entry in _POOL.get(key, {}):
                if all(k in self.by_key for k, _, _ in entry):
                    out.append(
                        Pattern(nc.index, tuple(sorted(((self.by_key[k], alt), n) for k, alt, n in entry)))
                    )
        return out

    def remember(self, patterns: Sequence[Pattern]) -> None:
        """Keep these patterns for later calls (the newest :data:`POOL_SIZE` per node state)."""
        for p in patterns:
            kept = _POOL.setdefault(self.node_key[p.node_class], {})
            kept[tuple((self.class_key[c], alt, n) for (c, alt), n in p.counts)] = None
            while len(kept) > POOL_SIZE:
                del kept[next(iter(kept))]


def _contents(
    problem: PlacementProblem, start: SolveResult, class_of: dict[Key, int], node_pos: dict[str, int]
) -> dict[int, Counter[Item]]:
    out: dict[int, Counter[Item]] = defaultdict(Counter)
    for a in start.assignments:
        c = class_of.get((a.workload, a.replica))
        if c is not None:
            out[node_pos[a.node]][(c, a.alternative)] += 1
    return out


def _overlap(current: Counter[Item], target: dict[Item, int]) -> int:
    return sum(min(n, target.get(item, 0)) for item, n in current.items())


def _choose(
    nodes: Sequence[int],
    stay: dict[int, Pattern],
    targets: dict[int, list[Pattern]],
    running_now: dict[int, Counter[int]],
    classes: Sequence[RequestClass],
    running: Counter[int],
    budget: int,
    time_limit_s: float,
) -> dict[int, Pattern]:
    """The transition MIP: the pattern of every node that changes (see the module), solved on the
    nodes its LP relaxation would change."""
    h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", max(0.05, time_limit_s))
    h.setOptionValue("mip_rel_gap", 1e-3)
    h.setOptionValue("mip_pool_soft_limit", CUT_POOL_ROWS)
    # The interior point method solves the relaxation in half the time of the simplex here (0.2 s on
    # 1,213 nodes), and its crossover gives the vertex whose integral nodes are fixed below.
    h.setOptionValue("solver", "ipm")
    inf = highspy.kHighsInf
    columns: list[tuple[int, Pattern]] = []
    entries: list[tuple[list[int], list[float]]] = []
    costs: list[float] = []
    node_row = {n: i for i, n in enumerate(nodes)}
    class_row = {c.index: len(node_row) + i for i, c in enumerate(classes)}
    moves_row = len(node_row) + len(classes)
    for n in nodes:
        for p in [stay[n], *targets[n]]:
            per = p.per_class()
            evicted = sum(max(0, k - per.get(c, 0)) for c, k in running_now[n].items())
            rows = [node_row[n]] + [class_row[c] for c in sorted(per)] + ([moves_row] if evicted else [])
            vals = [1.0] + [float(per[c]) for c in sorted(per)] + ([float(evicted)] if evicted else [])
            columns.append((n, p))
            entries.append((rows, vals))
            costs.append(-(p.value(classes) - 1e-3 * evicted))
    h.changeObjectiveSense(highspy.ObjSense.kMinimize)
    empty_i, empty_v = np.array([], dtype=np.int32), np.array([], dtype=np.float64)
    for _ in node_row:
        h.addRow(1.0, 1.0, 0, empty_i, empty_v)
    for c in classes:
        h.addRow(float(running[c.index]), float(c.demand), 0, empty_i, empty_v)
    h.addRow(-inf, float(budget), 0, empty_i, empty_v)
    for (rows, vals), cost in zip(entries, costs, strict=True):
        h.addCol(cost, 0.0, 1.0, len(rows), np.array(rows, dtype=np.int32), np.array(vals))
    # Slots beyond a class's replicas are allowed but worth nothing (elastic upper bounds), which
    # lets the MIP's heuristics find good changes fast; every running replica keeps a slot.
    for c in classes:
        row = np.array([class_row[c.index]], dtype=np.int32)
        h.addCol(float(c.value), 0.0, inf, 1, row, np.array([-1.0]))
    # The LP relaxation first: nodes it keeps as they are stay fixed, so the MIP only decides the
    # nodes worth changing (a few dozen of a thousand) and finds its plan in the time of a round.
    t0 = time.perf_counter()
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return {}
    relaxed = h.getSolution().col_value[: len(columns)]
    open_nodes = {n for (n, p), v in zip(columns, relaxed, strict=True) if p is stay[n] and v < 1 - 1e-6}
    if not open_nodes:
        return {}

    h.setOptionValue("solver", "choose")
    fixed = [j for j, (n, _) in enumerate(columns) if n not in open_nodes]
    low = [1.0 if columns[j][1] is stay[columns[j][0]] else 0.0 for j in fixed]
    h.changeColsBounds(len(fixed), np.array(fixed, dtype=np.int32), np.array(low), np.array(low))
    h.changeColsIntegrality(
        len(columns),
        np.arange(len(columns), dtype=np.int32),
        np.full(len(columns), highspy.HighsVarType.kInteger),
    )
    h.setOptionValue("time_limit", max(0.05, time_limit_s - (time.perf_counter() - t0)))
    # Every node staying as it is is feasible: the MIP starts from it, so a time-out keeps the best
    # change found so far.
    start = highspy.HighsSolution()
    start.col_value = [1.0 if p is stay[n] else 0.0 for n, p in columns] + [0.0] * len(classes)
    start.value_valid = True
    h.setSolution(start)
    h.run()
    if h.getInfo().primal_solution_status != 2:
        return {}

    z = h.getSolution().col_value[: len(columns)]
    change = {n: p for (n, p), v in zip(columns, z, strict=True) if v > 0.5 and p is not stay[n]}
    # Within the MIP's gap a change may gain nothing: moves are only worth a strictly better packing.
    all_stay = sum(costs[j] for j, (n, p) in enumerate(columns) if p is stay[n])
    if h.getInfo().objective_function_value >= all_stay - 1e-6:
        return {}
    return change


def transition(
    problem: PlacementProblem,
    options: RunOptions,
    placer: Placer,
    start: SolveResult,
    deadline: float,
    *,
    moves: int,
) -> tuple[SolveResult, TransitionReport]:
    """``start`` (held by ``placer``) moved towards the target configuration with at most ``moves``
    running replicas moved, by ``deadline`` (perf_counter)."""
    report = TransitionReport()
    by_key = {q.key: q for q in problem.requests}
    node_pos = {n.name: i for i, n in enumerate(problem.nodes)}
    positions = [
        r
        for r, q in enumerate(problem.requests)
        if q.gang is None and (q.running is None or disturbable(problem.policy, q))
    ]
    classes = request_classes(problem, positions)
    class_of = {problem.requests[r].key: c.index for c in classes for r in c.members}
    empty = Fgd().placer(problem)
    for q in problem.requests:
        if q.running is not None and q.key not in class_of:
            empty.keep(q)
    nodes = node_classes(empty)
    nodes_of = {n: nc.index for nc in nodes for n in nc.members}
    current = _contents(problem, start, class_of, node_pos)
    stay = {n: Pattern(nodes_of[n], tuple(sorted(current[n].items()))) for n in nodes_of}
    first = {(p.node_class, p.counts): p for p in stay.values() if p.counts}
    pool = _ColumnPool(nodes, classes)
    recalled = pool.recall() if not options.deterministic else []
    first.update({(p.node_class, p.counts): p for p in recalled})
    share = WARM_GENERATION_SHARE if recalled else GENERATION_SHARE
    config = generate(
        nodes,
        classes,
        list(first.values()),
        time.perf_counter() + share * (deadline - time.perf_counter()),
        seed=options.seed,
        workers=options.num_workers,
    )
    pool.remember(config.master.patterns)
    wanted: dict[int, list[tuple[Pattern, dict[Item, int]]]] = defaultdict(list)
    for p, x in zip(config.master.patterns, config.solution.x, strict=True):
        if x > 1e-6:
            wanted[p.node_class].append((p, dict(p.counts)))
    running_now: dict[int, Counter[int]] = defaultdict(Counter)
    running = Counter[int]()
    for a in start.assignments:
        key = (a.workload, a.replica)
        if key in class_of and by_key[key].running is not None:
            running_now[node_pos[a.node]][class_of[key]] += 1
            running[class_of[key]] += 1
    if running.total() == sum(c.demand for c in classes):
        return start, report  # nothing waits: no move can place more
    targets: dict[int, list[Pattern]] = {}
    closest: dict[tuple[int, tuple[tuple[Item, int], ...]], list[Pattern]] = {}
    for n in nodes_of:
        now = stay[n].counts
        if (nodes_of[n], now) not in closest:
            other = [(p, t) for p, t in wanted.get(nodes_of[n], []) if p.counts != now]
            ranked = sorted(other, key=lambda pt: (-_overlap(current[n], pt[1]), pt[0].counts))
            closest[nodes_of[n], now] = [p for p, _ in ranked[:TARGETS_PER_NODE]]
        targets[n] = closest[nodes_of[n], now]
    # Re-packing a node can also move replicas it keeps to other GPUs: when the moves go over the
    # budget, the MIP is asked again for proportionally fewer evictions.
    budget = max(1, int(moves * FIRST_BUDGET_SHARE))
    for _ in range(ATTEMPTS):
        left = ATTEMPT_SHARE * (deadline - time.perf_counter())
        change = _choose(sorted(nodes_of), stay, targets, running_now, classes, running, budget, left)
        if not change:
            break
        result, report = _realise(
            problem, placer, start, classes, class_of, change, moves, TransitionReport()
        )
        if not report.undone or report.moved <= moves:
            return result, report
        budget = int(budget * moves / report.moved * 0.9)
    return start, report


def _fill(
    problem: PlacementProblem,
    placer: Placer,
    by_key: dict[Key, Request],
    placed: dict[Key, Assignment],
    n: int,
    incoming: list[tuple[Key, int]],
    movable: Container[Key],
) -> list[tuple[Key, int]]:
    """Place ``incoming`` replicas (with their alternatives) on node ``n`` next to those already there,
    biggest first; if some do not fit around the replicas there, re-pack the node's ``movable`` replicas
    (those of the transition's classes: they may change GPUs) around the others, which stay where they
    are (gang members and running work that may not be disturbed are no part of any class). Returns what
    still did not fit; the node is left as packed as it could be."""
    name = problem.nodes[n].name
    order = sorted(incoming, key=lambda kv: _size(by_key[kv[0]].shapes[kv[1]]))
    left: list[tuple[Key, int]] = []
    for key, alt in order:
        got = placer.place_on(by_key[key], n, alt)
        if got is None:
            left.append((key, alt))
        else:
            placed[key] = got
    if not left:
        return []
    here = [k for k, a in placed.items() if a.node == name and k in movable]
    fixed = [(by_key[k], a) for k, a in placed.items() if a.node == name and k not in movable]
    placer.release(n, [(by_key[k], placed[k]) for k in here], fixed)
    everything = sorted(
        [(k, placed.pop(k).alternative) for k in here] + left,
        key=lambda kv: _size(by_key[kv[0]].shapes[kv[1]]),
    )
    out = []
    for key, alt in everything:
        got = placer.place_on(by_key[key], n, alt)
        if got is None:
            out.append((key, alt))
        else:
            placed[key] = got
    return out


def _restore(
    problem: PlacementProblem,
    placer: Placer,
    by_key: dict[Key, Request],
    placed: dict[Key, Assignment],
    key: Key,
) -> Assignment | None:
    """Put a running replica back on its own node, taking off it waiting replicas this transition
    placed there (they wait again) until it fits; ``None`` if even that does not make room."""
    run = by_key[key].running
    assert run is not None
    name = run.node
    n = next(i for i, node in enumerate(problem.nodes) if node.name == name)
    fresh = sorted(
        (k for k, a in placed.items() if a.node == name and by_key[k].running is None),
        key=lambda k: -by_key[k].shapes[placed[k].alternative].gpu_milli_total,
    )
    while True:
        got = placer.place_on(by_key[key], n, run.alternative)
        if got is not None or not fresh:
            return got
        gone = fresh.pop(0)
        stay = [(by_key[k], a) for k, a in placed.items() if a.node == name and k != gone]
        placer.release(n, [(by_key[gone], placed[gone])], stay)
        del placed[gone]


def _realise(
    problem: PlacementProblem,
    placer: Placer,
    start: SolveResult,
    classes: Sequence[RequestClass],
    class_of: dict[Key, int],
    change: dict[int, Pattern],
    moves: int,
    report: TransitionReport,
) -> tuple[SolveResult, TransitionReport]:
    """Re-pack the changed nodes (see the module); everything is undone if a running replica would be
    left without a place or the moves exceed the budget."""
    by_key = {q.key: q for q in problem.requests}
    node_pos = {n.name: i for i, n in enumerate(problem.nodes)}
    placed: dict[Key, Assignment] = {(a.workload, a.replica): a for a in start.assignments}
    on: dict[int, list[Key]] = defaultdict(list)
    for key, a in placed.items():
        on[node_pos[a.node]].append(key)
    placer.cluster.begin()
    used = list(placer.rules.used)
    stays: dict[int, Counter[Item]] = {}
    for n in sorted(change, key=lambda n: problem.nodes[n].name):
        keep_left = dict(change[n].counts)
        kept, gone = [], []
        # Running replicas keep their places first: every one kept is a move saved.
        for key in sorted(on[n], key=lambda k: (by_key[k].running is None, k)):
            item = (class_of[key], placed[key].alternative) if key in class_of else None
            if item is None or keep_left.get(item, 0) > 0:
                kept.append(key)
                if item is not None:
                    keep_left[item] -= 1
            else:
                gone.append(key)
        placer.release(n, [(by_key[k], placed[k]) for k in gone], [(by_key[k], placed[k]) for k in kept])
        stays[n] = Counter((class_of[k], placed[k].alternative) for k in kept if k in class_of)
        for k in gone:
            del placed[k]
    # Who still needs a place: evicted running replicas first, then waiting ones (queue order).
    pool: dict[int, list[Key]] = {}
    for cls in classes:
        keys = [problem.requests[r].key for r in cls.members if problem.requests[r].key not in placed]
        pool[cls.index] = sorted(keys, key=lambda k: by_key[k].running is None)
    for n in sorted(change, key=lambda n: problem.nodes[n].name):
        incoming: list[tuple[Key, int]] = []
        for (c, alt), want in sorted(change[n].counts):
            take = pool[c][: max(0, want - stays[n].get((c, alt), 0))]
            del pool[c][: len(take)]
            incoming.extend((k, alt) for k in take)
        for key, _ in _fill(problem, placer, by_key, placed, n, incoming, class_of):
            pool[class_of[key]].insert(0, key)  # no room after all: it needs a place elsewhere
    log.debug(
        "after the slots: %d running and %d waiting replicas still need a place",
        sum(1 for ks in pool.values() for k in ks if by_key[k].running is not None),
        sum(1 for ks in pool.values() for k in ks if by_key[k].running is None),
    )
    anywhere: NodeFilter = lambda info: True  # noqa: E731
    for keys in pool.values():
        for key in [k for k in keys if by_key[k].running is not None]:
            got = placer.place(by_key[key], within=anywhere) or _restore(problem, placer, by_key, placed, key)
            if got is None:
                placer.cluster.rollback()
                placer.rules.used = used
                report.undone = True
                log.info("transition undone: running replica %s#%d found no place", *key)
                return start, report
            placed[key] = got
    movers = [
        key
        for key, a in placed.items()
        if by_key[key].running is not None and Running(a.node, a.gpus, a.alternative) != by_key[key].running
    ]
    moved, cap = len(movers), team_moves_allowed(problem.policy.disruption)
    team_over = cap is not None and any(n > cap for n in Counter(by_key[k].team for k in movers).values())
    if moved > moves or team_over:
        placer.cluster.rollback()
        placer.rules.used = used
        report.undone, report.moved = True, moved
        log.info(
            "transition undone: it would move %d running replicas, over the budget of %d (or a team's %s)",
            moved, moves, cap,
        )  # fmt: skip
        return start, report
    placer.cluster.commit()
    before = {(a.workload, a.replica) for a in start.assignments}
    report.nodes, report.moved = len(change), moved
    report.placed = sum(1 for k in placed if k not in before)
    log.info("transition re-packed %d nodes: %d moved, %d more placed", report.nodes, moved, report.placed)
    return (
        replace(
            start,
            assignments=tuple(sorted(placed.values(), key=lambda a: (a.workload, a.replica))),
            unplaced=tuple(u for u in start.unplaced if (u.workload, u.replica) not in placed),
            mig_layouts=placer.mig_layouts(),
        ),
        report,
    )

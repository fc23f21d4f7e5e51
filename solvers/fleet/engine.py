"""Target-configuration planning for fleets: the configuration LP decides how many nodes of each class
host which pattern; rounding and the placement kernel turn that into a plan.

1. Running work that stays is kept; waiting replicas are grouped into request classes and nodes into
   classes by their remaining state (:mod:`.classes`).
2. The aggregated configuration LP (:mod:`.relaxation`: each node class's pricing polytope scaled by
   its count, one LP) gives a first bound and class prices; the configuration LP is solved by column
   generation (:mod:`.generation`) from those prices, started from the patterns of the FGD plan and
   from patterns packed from the aggregated LP's solution (:mod:`.guided`: near the optimum at once on
   lists of many share sizes, where generation from the FGD patterns alone tails off). The
   better of the two bounds is a bound on the queue term valid for the whole problem when no running
   work may be disturbed; the aggregated one holds even where column generation tails off (lists of
   many share sizes).
3. Whole numbers of nodes per pattern come from the master as an integer program over the columns
   generated (price and branch; the LP rounded down if it finds none); the patterns are given to
   concrete nodes and realised replica by replica, gangs are placed whole, and what is left is placed
   greedily (:mod:`.rounding`).

The first columns come from FGD plans in a seeded random order within each queue rank (FGD was designed
for random arrivals; largest first strands shares on lists of many sharing pods) and, time permitting, in
the queue order with the most valuable replicas first: both orders are canonical, never the input
order. The plan is returned only if it waits less than the better of these FGD plans; otherwise that one
is (all are valid).
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpuplan.models.cluster import MigInstance, mig_layout_problems
from gpuplan.models.plan import Assignment, MigLayout, PlanStatus, Unplaced
from gpuplan.solvers.base import CUT, SolveResult
from gpuplan.solvers.evaluate import queue_term
from gpuplan.solvers.fleet.classes import NodeClass, RequestClass, node_classes, request_classes
from gpuplan.solvers.fleet.generation import Configuration, generate
from gpuplan.solvers.fleet.guided import guided_patterns
from gpuplan.solvers.fleet.pricing import Pattern
from gpuplan.solvers.fleet.relaxation import aggregated_bound
from gpuplan.solvers.fleet.rounding import assign_patterns, fill, realise
from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.greedy import Fgd
from gpuplan.solvers.greedy.engine import GREEDY_CUT, gang_failure
from gpuplan.solvers.placement import Placer
from gpuplan.solvers.problem import PlacementProblem, Request, disturbable, running_members
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)

#: Share of the time limit given to column generation, then of the rest to the integer master.
GENERATION_SHARE = 0.7
INTEGER_SHARE = 0.5
#: Share of the column generation's time that packing the aggregated LP's solution may take at most.
GUIDED_SHARE = 0.5
#: The second FGD plan of the first columns runs only if the first took at most this share of the time
#: left (a fleet on a loaded machine would otherwise overrun its time limit).
SECOND_PLAN_SHARE = 0.25
#: A deterministic run's work limits, so that its plan does not depend on the clock: the second FGD
#: plan only for at most this many replicas per second of the time limit (FGD places 1,000-2,000 a
#: second on a loaded 2-core machine), column generation rounds per second of the time limit, and
#: branch-and-bound nodes of the integer master. The wall clock still ends each at the deadline (the
#: plan then says it was cut); column generation may use this share of the time left.
DETERMINISTIC_SECOND_PLAN_REPLICAS_PER_S = 200
DETERMINISTIC_ROUNDS_PER_S = 0.3
DETERMINISTIC_MASTER_NODES = 500
DETERMINISTIC_GENERATION_SHARE = 0.85


@dataclass(frozen=True)
class FleetPlan:
    """The fleet plan and what the configuration LP established."""

    result: SolveResult
    configuration: Configuration | None
    #: Upper bound on the queue penalty placeable (valid for the whole problem), if proven.
    value_bound: float | None


def _placer(problem: PlacementProblem) -> Placer:
    """An FGD placer with the running work kept where it runs."""
    placer = Fgd().placer(problem)
    for r in problem.requests:
        if r.running is not None:
            placer.keep(r)
    return placer


def _initial_patterns(
    problem: PlacementProblem,
    nodes: tuple[NodeClass, ...],
    classes: tuple[RequestClass, ...],
    assignments: Sequence[Assignment],
) -> list[Pattern]:
    """The pattern each node of a greedy plan realises (the master's first columns)."""
    class_of: dict[tuple[str, int], tuple[int, int]] = {}
    for cls in classes:
        for r in cls.members:
            class_of[problem.requests[r].key] = (cls.index, 0)
    node_class = {problem.nodes[n].name: nc.index for nc in nodes for n in nc.members}
    per_node: dict[str, Counter[tuple[int, int]]] = {}
    for a in assignments:
        found = class_of.get((a.workload, a.replica))
        if found is not None:
            per_node.setdefault(a.node, Counter())[(found[0], a.alternative)] += 1
    out = []
    for node, counts in sorted(per_node.items()):
        out.append(Pattern(node_class[node], tuple(sorted(counts.items()))))
    return out


def _queue_order(problem: PlacementProblem, positions: list[int]) -> list[int]:
    """Replicas by tier, priority and wait, then the most valuable first, then the id (never the
    input order)."""

    def key(r: int) -> tuple[int, int, int, int, str, int]:
        q = problem.requests[r]
        return (q.tier_rank, -q.priority, -q.wait_s, -queue_penalty(q, problem), q.workload, q.replica)

    return sorted(positions, key=key)


def _shuffled_order(problem: PlacementProblem, positions: list[int], seed: int) -> list[int]:
    """Replicas by tier, priority and wait, then in a random order drawn from ``seed`` over the replicas
    sorted by id (never the input order)."""
    by_id = sorted(positions, key=lambda r: (problem.requests[r].workload, problem.requests[r].replica))
    random.Random(seed).shuffle(by_id)
    draw = {r: i for i, r in enumerate(by_id)}

    def key(r: int) -> tuple[int, int, int, int]:
        q = problem.requests[r]
        return (q.tier_rank, -q.priority, -q.wait_s, draw[r])

    return sorted(positions, key=key)


def _first_plans(problem: PlacementProblem, options: RunOptions, deadline: float) -> list[SolveResult]:
    """FGD's plans in the canonical orders, the seeded one first (:func:`_shuffled_order`,
    :func:`_queue_order`), each stopped at ``deadline`` (what it has not reached waits, labelled); the
    second only if the first was not stopped and took at most :data:`SECOND_PLAN_SHARE` of the time
    left, or in a deterministic run (whose plan must not depend on the clock) if the input is small for
    its time limit (:data:`DETERMINISTIC_SECOND_PLAN_REPLICAS_PER_S`)."""
    everyone = list(range(len(problem.requests)))
    plans = []
    second = len(everyone) <= DETERMINISTIC_SECOND_PLAN_REPLICAS_PER_S * options.time_limit_s
    orders: list[Callable[[], list[int]]] = [lambda: _shuffled_order(problem, everyone, options.seed)]
    if second or not options.deterministic:
        orders.append(lambda: _queue_order(problem, everyone))
    for order in orders:
        began = time.perf_counter()
        ordered = tuple(problem.requests[r] for r in order())
        plans.append(Fgd().place(replace(problem, requests=ordered), options, deadline=deadline))
        took = time.perf_counter() - began
        if GREEDY_CUT in plans[-1].terms:
            log.info("fleet: the first plan was stopped by the deadline after %.1f s", took)
            break
        if not options.deterministic and took > SECOND_PLAN_SHARE * (deadline - time.perf_counter()):
            log.info("fleet: one first plan (FGD took %.1f s)", took)
            break
    return plans


def _deterministic_rounds(options: RunOptions) -> int | None:
    """The column generation rounds of a deterministic run (the time limit alone decides), else
    ``None`` (the deadline decides)."""
    if not options.deterministic:
        return None
    return max(1, int(DETERMINISTIC_ROUNDS_PER_S * options.time_limit_s))


def _repartitions(problem: PlacementProblem) -> bool:
    """Whether a plan may re-partition MIG GPUs: destroy idle instances and create others."""
    return problem.policy.mig.allow_repartition and problem.policy.mig.allow_create


def _freed(problem: PlacementProblem) -> tuple[PlacementProblem, frozenset[tuple[str, int]]]:
    """``problem`` with the MIG GPUs that run nothing emptied of their (idle) instances when the policy
    lets a plan re-partition them, so that the placement kernel creates the instances the plan needs,
    and those GPUs (node, index). GPUs with running work keep their layouts (this engine re-partitions
    idle GPUs only; the exact models also re-partition idle instances beside running ones)."""
    if not _repartitions(problem):
        return problem, frozenset()
    busy = {
        (q.running.node, g.index) for q in problem.requests if q.running is not None for g in q.running.gpus
    }
    freed = frozenset(
        (n.name, g.index) for n in problem.nodes for g in n.gpus if g.mig and (n.name, g.index) not in busy
    )
    if not freed:
        return problem, freed
    nodes = tuple(
        replace(n, gpus=tuple(replace(g, mig=()) if (n.name, g.index) in freed else g for g in n.gpus))
        for n in problem.nodes
    )
    return replace(problem, nodes=nodes), freed


def _restored(
    problem: PlacementProblem, freed: frozenset[tuple[str, int]], layouts: Sequence[MigLayout]
) -> tuple[MigLayout, ...]:
    """``layouts`` of a plan of the freed problem with the idle instances of each freed GPU put back
    wherever the instances the plan uses leave them room (a valid layout): a GPU the plan does not use
    keeps its layout, and only the instances in the way of new ones are destroyed."""
    current = {(n.name, g.index): (g.model, g.mig or ()) for n in problem.nodes for g in n.gpus}
    out = []
    for lay in layouts:
        key = (lay.node, lay.gpu)
        if key not in freed:
            out.append(lay)
            continue
        model, before = current[key]
        spec = problem.catalog.model(model)
        instances = lay.instances
        for prof, start in before:
            trial = tuple(sorted((*instances, MigInstance(profile=prof, start=start)), key=lambda i: i.start))
            if not mig_layout_problems(spec, trial):
                instances = trial
        out.append(MigLayout(node=lay.node, gpu=lay.gpu, instances=instances))
    return tuple(out)


def _exact(problem: PlacementProblem) -> bool:
    """Whether the configuration LP's bounds hold for the whole problem: no running work may be
    disturbed (the node classes are the nodes with their running work in place)."""
    return not any(q.running is not None and disturbable(problem.policy, q) for q in problem.requests)


def _gang_value(problem: PlacementProblem) -> int:
    """The queue penalty of the waiting gang members (outside the configuration LP, counted as placed
    in its bounds)."""
    return sum(queue_penalty(q, problem) for q in problem.requests if q.running is None and q.gang)


def node_class_count(problem: PlacementProblem) -> int:
    """How many node classes the configuration LP of ``problem`` has: what its size (and its pricing's
    work) grows with, where the number of nodes does not."""
    freed, _ = _freed(problem)
    return len(node_classes(_placer(freed), repartition=_repartitions(freed)))


def aggregated_value_bound(problem: PlacementProblem, deadline: float) -> float | None:
    """An upper bound on the queue penalty any plan of ``problem`` places, from the aggregated
    configuration LP of the whole fleet alone (:mod:`.relaxation`: no first plans, no column
    generation), for fleets planned in parts, whose parts' bounds say nothing about the fleet. ``None``
    when running work may be disturbed or ``deadline`` (perf_counter) comes first."""
    if not _exact(problem):
        return None
    problem, _ = _freed(problem)
    singles = [r for r, q in enumerate(problem.requests) if q.running is None and q.gang is None]
    nodes = node_classes(_placer(problem), repartition=_repartitions(problem))
    relaxed = aggregated_bound(nodes, request_classes(problem, singles), deadline)
    return None if relaxed is None else relaxed.bound + _gang_value(problem)


def plan_fleet(problem: PlacementProblem, options: RunOptions, deadline: float) -> FleetPlan:
    """Plan ``problem`` by its configuration LP within ``deadline`` (perf_counter), run as ``options``
    say.

    The first FGD plan stops at the deadline; when it was stopped, or (unless the run is deterministic)
    left less than :data:`SECOND_PLAN_SHARE` of its own time, it is the plan, without a bound. When the
    policy allows MIG re-partitions, the idle MIG GPUs are planned empty (:func:`_freed`) and
    pricing counts idle instances as free to replace, so the plan may re-partition them and the bound
    covers every layout; the plan's layouts keep the idle instances nothing is in the way of
    (:func:`_restored`)."""
    start = time.perf_counter()
    # Nodes in name order: the greedy placers break ties towards the first node in cluster order, which
    # must not be the order the input lists its nodes in.
    original = replace(problem, nodes=tuple(sorted(problem.nodes, key=lambda n: n.name)))
    problem, freed = _freed(original)
    # The first columns come from FGD in canonical orders, never in the input order: the plan must not
    # depend on how the input lists its rows.
    firsts = _first_plans(problem, options, deadline)
    greedy = min(firsts, key=lambda g: queue_term(problem, g))
    first_s = time.perf_counter() - start
    late = not options.deterministic and deadline - time.perf_counter() < SECOND_PLAN_SHARE * first_s
    if GREEDY_CUT in greedy.terms or late:
        # No time for the configuration LP (its realisation alone takes about a quarter of an FGD plan):
        # the FGD plan, partial if the deadline stopped it, is the plan.
        result = replace(greedy, solver="cpsat", wall_s=first_s)
        if freed:
            result = replace(result, mig_layouts=_restored(original, freed, result.mig_layouts))
        return FleetPlan(result, None, None)
    placer = _placer(problem)
    waiting = [r for r, q in enumerate(problem.requests) if q.running is None]
    singles = [r for r in waiting if problem.requests[r].gang is None]
    classes = request_classes(problem, singles)
    nodes = node_classes(placer, repartition=_repartitions(problem))
    share = DETERMINISTIC_GENERATION_SHARE if options.deterministic else GENERATION_SHARE
    generation_deadline = time.perf_counter() + share * (deadline - time.perf_counter())
    relaxed = aggregated_bound(nodes, classes, generation_deadline)
    initial = [p for g in firsts for p in _initial_patterns(problem, nodes, classes, g.assignments)]
    guided_cut = False
    if relaxed is not None:
        guided = guided_patterns(
            nodes, classes, relaxed,
            time.perf_counter() + GUIDED_SHARE * (generation_deadline - time.perf_counter()),
            deterministic=options.deterministic, seed=options.seed,
        )  # fmt: skip
        initial.extend(guided.patterns)
        guided_cut = guided.cut
        log.info("fleet: %d patterns from the aggregated LP%s", len(guided.patterns), " (cut)" * guided.cut)
    config = generate(
        nodes,
        classes,
        initial,
        generation_deadline,
        seed=options.seed,
        start=relaxed,
        deterministic=options.deterministic,
        max_rounds=_deterministic_rounds(options),
        workers=options.num_workers,
        ray=options.ray,
    )
    generated = time.perf_counter()
    # Price and branch: whole numbers of nodes per pattern over the columns generated (HiGHS' MIP).
    if options.deterministic:
        # Bounded by nodes; the deadline is only the safety net.
        counts, timed_out = config.master.solve_integer(
            max(0.1, deadline - time.perf_counter()), DETERMINISTIC_MASTER_NODES
        )
    else:
        counts, timed_out = config.master.solve_integer(
            max(0.1, INTEGER_SHARE * (deadline - time.perf_counter()))
        )
    cut = options.deterministic and (config.cut or timed_out or relaxed is None or guided_cut)
    integer = time.perf_counter()
    plan = assign_patterns(nodes, config.master.patterns, counts or config.solution.x)
    placed, done = realise(problem, placer, classes, plan)
    unplaced: list[Unplaced] = []
    gangs: dict[str, list[Request]] = {}
    for r in _queue_order(problem, [r for r in waiting if problem.requests[r].gang is not None]):
        q = problem.requests[r]
        assert q.gang is not None
        gangs.setdefault(q.gang, []).append(q)
    running = running_members(problem.requests)
    for gang, members in gangs.items():
        got, blocker = placer.place_gang(members, running.get(gang, ()))
        placed.extend(got)
        if blocker is not None:
            unplaced.extend(gang_failure(gang, members, blocker, placer, running.get(gang, ())))
    more, left = fill(problem, placer, _queue_order(problem, [r for r in singles if r not in done]))
    placed.extend(more)
    unplaced.extend(left)
    kept = [r.assignment(r.running) for r in problem.requests if r.running is not None]
    log.info(
        "fleet: first plans %.1f s, generation %.1f s (%d rounds%s), integer master %.1f s%s, "
        "realisation %.1f s",
        first_s, generated - start - first_s, config.rounds, ", cut by the clock" if config.cut else "",
        integer - generated, " (cut by the clock)" if timed_out else "", time.perf_counter() - integer,
    )  # fmt: skip
    result = SolveResult(
        status=PlanStatus.FEASIBLE,
        solver="cpsat",
        assignments=tuple(sorted(kept + placed, key=lambda a: (a.workload, a.replica))),
        unplaced=tuple(unplaced),
        mig_layouts=placer.mig_layouts(),
        wall_s=time.perf_counter() - start,
        terms={
            "fleet_rounds": float(config.rounds),
            "fleet_columns": float(config.columns),
            "fleet_converged": float(config.converged),
            "fleet_lp_value": round(config.solution.value, 3),
            "fleet_node_classes": float(len(nodes)),
            "fleet_request_classes": float(len(classes)),
            "fleet_integer_master": float(counts is not None),
            **({CUT: 1.0} if cut else {}),
        },
        model_size={"node_classes": len(nodes), "request_classes": len(classes), "patterns": config.columns},
    )
    finite = config.upper_bound < float("inf")
    bound = config.upper_bound + _gang_value(problem) if _exact(problem) and finite else None
    if queue_term(problem, greedy) < queue_term(problem, result):
        log.info("the configuration plan waits more than FGD's: keeping FGD's")
        result = replace(
            greedy,
            wall_s=time.perf_counter() - start,
            terms={**result.terms, "kept_hint": 1.0},
            model_size=result.model_size,
        )
    if freed:
        result = replace(result, mig_layouts=_restored(original, freed, result.mig_layouts))
    return FleetPlan(result, config, bound)

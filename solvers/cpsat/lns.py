"""Large-neighbourhood search for plans too large for one CP-SAT model.

Starting from a complete plan, each step takes a small set of nodes and lets CP-SAT re-place the
replicas on them together with waiting replicas that could use those nodes. Neighbourhoods alternate
between two kinds: around a waiting replica (nodes that could host it if work moved off them, plus
the nodes with the most room to take that work), and around fragmented nodes (with nodes of the same
kind, so that work can swap). The replicas on the neighbourhood enter the step as running work that may
move but not be dropped, so a step never loses placed work and the old placement is always a feasible
hint: the plan only improves. Replicas the search placed move freely; replicas that were running
before the plan move only within the disruption budget, and each one moved counts once.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.plan import Assignment
from gpuplan.models.policy import DisruptionBudget, ObjectiveMode, ObjectiveWeights, Quota
from gpuplan.models.rules.disruption import team_moves_allowed
from gpuplan.models.rules.quota import gpus_for_units, limit_units, quota_unit
from gpuplan.solvers.base import CUT, SolveResult
from gpuplan.solvers.formulation.constraints import charged_units
from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.placement import FirstFitScorer, Placer
from gpuplan.solvers.problem import PlacementProblem, Request, Running, disturbable
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)

#: Nodes per neighbourhood, and waiting replicas offered to it.
NEIGHBOURHOOD_NODES = 6
WAITING_OFFERED = 30
#: Seconds of CP-SAT per step (most steps are proved optimal well before).
STEP_S = 1.0
#: A step weighs the queue term far above moves, and ignores fragmentation and topology.
STEP_WEIGHTS = ObjectiveWeights(queue=1000, fragmentation=0, disruption=1, topology=0)

#: Solves one neighbourhood: (sub-problem, its run options, replicas allowed to move) -> result.
StepSolver = Callable[[PlacementProblem, RunOptions, set[int]], SolveResult]


@dataclass
class LnsReport:
    """What the search did: steps run, steps that placed more, queue units gained."""

    steps: int = 0
    improved: int = 0
    gained: int = 0
    #: Whether the wall clock ended a deterministic search before its steps were done.
    cut: bool = False
    #: Replicas running before the plan that the search moved.
    moved: int = 0


def _used_milli(a: Assignment) -> int:
    return sum(MILLI_PER_GPU if g.milli is None and g.mig_profile is None else g.milli or 0 for g in a.gpus)


class _State:
    """The current plan, indexed by node."""

    def __init__(self, problem: PlacementProblem, start: SolveResult) -> None:
        self.problem = problem
        self.node_pos = {n.name: i for i, n in enumerate(problem.nodes)}
        self.placed = {(a.workload, a.replica): a for a in start.assignments}
        self.layouts = {(lay.node, lay.gpu): lay for lay in start.mig_layouts}

    def by_node(self) -> tuple[dict[int, list[tuple[str, int]]], dict[int, int], dict[int, int]]:
        """Replicas per node, free GPU milli and free milli-CPU per node."""
        on_node: dict[int, list[tuple[str, int]]] = defaultdict(list)
        free = {n: MILLI_PER_GPU * len(nd.gpus) for n, nd in enumerate(self.problem.nodes)}
        cpu = {n: nd.cpu_milli for n, nd in enumerate(self.problem.nodes)}
        for key, a in self.placed.items():
            n = self.node_pos[a.node]
            on_node[n].append(key)
            free[n] -= _used_milli(a)
            cpu[n] -= a.cpu_milli
        return on_node, free, cpu


def _around_waiting(
    problem: PlacementProblem,
    waiting: list[Request],
    free: dict[int, int],
    cpu: dict[int, int],
    hosts: Callable[[Request], list[int]],
    rng: random.Random,
) -> list[int]:
    """Nodes that could host a high-penalty waiting replica once work moved off them (those with the
    most free GPU capacity among a sample), and nodes with the most free CPU: GPU room stranded by a
    lack of CPU on some nodes and CPU stranded by a lack of GPU room on others meet in one step, so
    replicas can trade places."""
    ranked = sorted(waiting, key=lambda q: -queue_penalty(q, problem))
    target = ranked[rng.randrange(min(len(ranked), WAITING_OFFERED))]
    could = hosts(target)
    if not could:
        return []
    rng.shuffle(could)
    half = NEIGHBOURHOOD_NODES // 2
    chosen = sorted(could[: 4 * NEIGHBOURHOOD_NODES], key=lambda n: (-free[n], n))[:half]
    spare = sorted((n for n in cpu if n not in chosen), key=lambda n: (-cpu[n], n))[: 4 * half]
    rng.shuffle(spare)
    return [*chosen, *spare[: NEIGHBOURHOOD_NODES - len(chosen)]]


def _neighbourhood(
    problem: PlacementProblem, free: dict[int, int], rng: random.Random, kinds: dict[int, object]
) -> list[int]:
    """A fragmented node, other fragmented nodes of its kind, then random nodes of its kind."""
    fragmented = sorted(
        (n for n, f in free.items() if 0 < f < MILLI_PER_GPU * len(problem.nodes[n].gpus)),
        key=lambda n: -free[n],
    )
    if not fragmented:
        return []
    seed = fragmented[rng.randrange(min(len(fragmented), 3 * NEIGHBOURHOOD_NODES))]
    near = [n for n in fragmented if kinds[n] == kinds[seed] and n != seed][: NEIGHBOURHOOD_NODES // 2]
    peers = [n for n in kinds if kinds[n] == kinds[seed] and n != seed and n not in near]
    rng.shuffle(peers)
    return [seed, *near, *peers][:NEIGHBOURHOOD_NODES]


def _offered(problem: PlacementProblem, waiting: list[Request], rng: random.Random) -> list[Request]:
    """Waiting replicas offered to a neighbourhood: whole gangs or single replicas, the highest queue
    penalties first (a random sample of them), at most :data:`WAITING_OFFERED` replicas."""
    units: dict[str, list[Request]] = {}
    for q in waiting:
        units.setdefault(q.gang or f"\0{q.workload}#{q.replica}", []).append(q)
    ranked = sorted(units.values(), key=lambda u: -sum(queue_penalty(q, problem) for q in u))
    sample = ranked[: 4 * WAITING_OFFERED]
    rng.shuffle(sample)
    offered: list[Request] = []
    for unit in sample:
        if len(offered) + len(unit) <= WAITING_OFFERED:
            offered.extend(unit)
    return offered


def _split_gangs(
    placed: dict[tuple[str, int], Assignment],
    by_key: dict[tuple[str, int], Request],
    domains: set[str],
    hood: set[str],
) -> set[str]:
    """The gangs of ``domains`` (those with a domain label) that have a member placed outside the
    neighbourhood: a step sees only part of them, so their members there stay and their waiting members
    (a gang that runs in part) are not offered (the step could leave the domain value of the members it
    does not see)."""
    if not domains:
        return set()
    return {g for k, a in placed.items() if (g := by_key[k].gang) in domains and a.node not in hood}


def _quotas_left(
    problem: PlacementProblem, placed: dict[tuple[str, int], Assignment], hood: set[str]
) -> tuple[Quota, ...]:
    """Each quota less what placed replicas outside the neighbourhood hold (they keep their share), to
    the unit (:func:`~gpuplan.models.rules.quota.gpus_for_units`)."""
    if not problem.policy.quotas:
        return ()
    by_key = {q.key: q for q in problem.requests}
    node_pos = {n.name: i for i, n in enumerate(problem.nodes)}
    unit = quota_unit(problem.catalog)
    out: list[Quota] = []
    for q in problem.policy.quotas:
        limit = limit_units(q.gpus, unit)
        if limit is None:
            out.append(q)  # an infinite quota never binds
            continue
        held = sum(
            charged_units(
                problem, q, by_key[k], node_pos[a.node], Running(a.node, a.gpus, a.alternative), unit
            )
            for k, a in placed.items()
            if a.node not in hood and by_key[k].team == q.team
        )
        out.append(q.model_copy(update={"gpus": gpus_for_units(max(0, limit - held), unit)}))
    return tuple(out)


def _floors_left(
    problem: PlacementProblem, placed: dict[tuple[str, int], Assignment], hood: set[str]
) -> dict[str, int]:
    """Each team's fairness floor less what its placed replicas outside the neighbourhood hold (they
    stay: a step never unplaces), the teams already over it left out."""
    if not problem.fair_floor:
        return {}
    served = problem.served_units(a for a in placed.values() if a.node not in hood)
    left = {t: f - served.get(t, 0) for t, f in problem.fair_floor.items()}
    return {t: units for t, units in left.items() if units > 0}


def _hosts(problem: PlacementProblem) -> Callable[[Request], list[int]]:
    """Node positions whose empty state could host one of a request's alternatives (memoised by the
    request's shapes and team)."""
    placer = Placer(problem.nodes, problem.catalog, FirstFitScorer(), policy=problem.policy)
    memo: dict[tuple[object, ...], list[int]] = {}

    def hosts(req: Request) -> list[int]:
        key = (req.shapes, req.team)
        if key not in memo:
            memo[key] = [n for n in range(len(problem.nodes)) if placer.fits_empty(req, n)]
        return list(memo[key])

    return hosts


def improve(
    problem: PlacementProblem,
    options: RunOptions,
    start: SolveResult,
    deadline: float,
    step: StepSolver,
    *,
    moves: int = 0,
    stall: int | None = None,
) -> tuple[SolveResult, LnsReport]:
    """Improve ``start`` by CP-SAT steps on small neighbourhoods until ``deadline`` (perf_counter),
    moving at most ``moves`` replicas that were running before the plan (those the policy lets move).

    A deterministic run takes a fixed number of steps (its time limit over :data:`STEP_S`), each
    stopped on deterministic time, so that the same input and seed give the same plan; the deadline
    still ends the search (the report then says the search was cut). With ``stall``, the search also
    ends after that many steps in a row that placed nothing more.
    """
    rng = random.Random(options.seed)
    report = LnsReport()
    by_key = {q.key: q for q in problem.requests}
    state = _State(problem, start)
    kinds: dict[int, object] = {
        n: (nd.cpu_milli, nd.pool, tuple(g.model for g in nd.gpus)) for n, nd in enumerate(problem.nodes)
    }
    hosts = _hosts(problem)
    domains = {q.gang for q in problem.requests if q.gang is not None and q.gang_domain}
    gang_members: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for q in problem.requests:
        if q.gang is not None:
            gang_members[q.gang].append(q.key)
    moved: set[tuple[str, int]] = set()
    steps = max(1, int(options.time_limit_s / STEP_S)) if options.deterministic else None
    since_gain = 0
    while (steps is None or report.steps < steps) and (stall is None or since_gain < stall):
        if time.perf_counter() + 0.2 >= deadline:
            report.cut = steps is not None
            break
        waiting = [q for q in problem.requests if q.key not in state.placed]
        on_node, free, cpu = state.by_node()
        if not waiting:
            break
        around = report.steps % 2 == 0
        hood = _around_waiting(problem, waiting, free, cpu, hosts, rng) if around else []
        hood = hood or _neighbourhood(problem, free, rng, kinds)
        if not hood:
            break
        names = {problem.nodes[n].name for n in hood}
        apart = _split_gangs(state.placed, by_key, domains, names)
        moving = [key for n in hood for key in on_node[n]]
        offered = _offered(problem, [q for q in waiting if q.gang not in apart], rng)
        # A gang the plan places in part whose waiting members the step does not see stays as it is.
        seen = {q.key for q in offered}
        held = apart | {
            g
            for k in moving
            if (g := by_key[k].gang) is not None
            and any(m not in state.placed and m not in seen for m in gang_members[g])
        }
        may_move = _movable(problem, moving, by_key, moved, moves - len(moved), state.placed) - {
            k for k in moving if by_key[k].gang in held
        }
        requests: list[Request] = []
        for key in moving:
            a = state.placed[key]
            requests.append(replace(by_key[key], running=Running(a.node, a.gpus, a.alternative)))
        requests.extend(offered)
        policy = problem.policy.model_copy(
            update={
                "disruption": DisruptionBudget(max_moves_per_round=len(moving)),
                "quotas": _quotas_left(problem, state.placed, names),
                # One stage: place the most, then move the least (a move spends the budget).
                "objective": ObjectiveMode.WEIGHTED,
                "weights": STEP_WEIGHTS,
            }
        )
        sub = replace(
            problem,
            nodes=tuple(problem.nodes[n] for n in hood),
            requests=tuple(requests),
            policy=policy,
            fair_floor=_floors_left(problem, state.placed, names),
        )
        limit = STEP_S if steps is not None else min(STEP_S, deadline - time.perf_counter())
        result = step(
            sub, replace(options, time_limit_s=limit), {i for i, key in enumerate(moving) if key in may_move}
        )
        report.steps += 1
        report.cut |= steps is not None and CUT in result.terms  # a step the wall clock stopped
        if result.status.value == "FALLBACK":
            since_gain += 1
            continue
        gained = sum(
            queue_penalty(by_key[(a.workload, a.replica)], problem)
            for a in result.assignments
            if (a.workload, a.replica) not in state.placed
        )
        report.improved += gained > 0
        since_gain = 0 if gained > 0 else since_gain + 1
        report.gained += gained
        for a in result.assignments:
            key = (a.workload, a.replica)
            state.placed[key] = a
            run = by_key[key].running
            if run is not None:
                if Running(a.node, a.gpus, a.alternative) == run:
                    moved.discard(key)
                else:
                    moved.add(key)
        for lay in result.mig_layouts:
            state.layouts[(lay.node, lay.gpu)] = lay
        log.debug(
            "LNS step %d on %d nodes: +%d queue units, %d moved", report.steps, len(hood), gained, len(moved)
        )
    placed = state.placed
    report.moved = len(moved)
    return (
        replace(
            start,
            assignments=tuple(sorted(placed.values(), key=lambda a: (a.workload, a.replica))),
            unplaced=tuple(u for u in start.unplaced if (u.workload, u.replica) not in placed),
            mig_layouts=tuple(state.layouts[k] for k in sorted(state.layouts)),
        ),
        report,
    )


def _movable(
    problem: PlacementProblem,
    keys: list[tuple[str, int]],
    by_key: dict[tuple[str, int], Request],
    moved: set[tuple[str, int]],
    budget: int,
    placed: dict[tuple[str, int], Assignment],
) -> set[tuple[str, int]]:
    """The replicas of a neighbourhood a step may move: those the search placed, those already moved
    (counted once), and up to ``budget`` more that were running before the plan (smallest first:
    moving little frees the most room per move), no more of a team than the moves its team has left
    (``disruption.max_moves_per_team``, counted over the plan so far, ``placed``: a step's own model sees
    only its neighbourhood's moves)."""
    out = {k for k in keys if by_key[k].running is None or k in moved}
    fresh = [k for k in keys if k not in out and disturbable(problem.policy, by_key[k])]
    fresh.sort(key=lambda k: (min(s.gpu_milli_total for s in by_key[k].shapes), k))
    cap = team_moves_allowed(problem.policy.disruption)
    displaced = {k for k, a in placed.items() if _displaced(by_key[k], a)}
    used = Counter(by_key[k].team for k in displaced)
    chosen: list[tuple[str, int]] = []
    for k in fresh:
        if len(chosen) >= budget:
            break
        if k in displaced:  # moved already (by the plan the search started from): counted
            chosen.append(k)
        elif cap is None or used[by_key[k].team] < cap:
            used[by_key[k].team] += 1
            chosen.append(k)
    return out | set(chosen)


def _displaced(q: Request, a: Assignment) -> bool:
    """Whether ``a`` takes running replica ``q`` elsewhere than where it runs."""
    return q.running is not None and Running(a.node, a.gpus, a.alternative) != q.running

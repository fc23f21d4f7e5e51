"""The CP-SAT back-end: the exact placement model, hinted with FGD, solved lexicographically and
reported honestly (status, objective, bound, gap, wall time, model size), with an FGD fallback.

A plan is ``OPTIMAL`` only when every stage was proved on the *full* model: every node a candidate
and every running replica the policy lets move free to move. Restricted models (candidate nodes on
large clusters, neighbourhoods of the large-neighbourhood search, parts of a split fleet) give at most
``FEASIBLE`` plans, whose bound is the fleet-level bound of :mod:`gpuplan.solvers.bounds`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace

from ortools.sat.python import cp_model

from gpuplan.models.plan import Assignment, PlanStatus
from gpuplan.models.policy import ObjectiveMode
from gpuplan.solvers.base import CUT, HINT_QUEUE, HINT_QUEUE_FGD, SolveResult, instead_of
from gpuplan.solvers.bounds import never_fitting, objective_bound, placed_value_bound, queue_lower_bound
from gpuplan.solvers.cpsat.builder import CpSatBuilder
from gpuplan.solvers.cpsat.candidates import Rankings, is_large
from gpuplan.solvers.cpsat.guard import exact_comparison
from gpuplan.solvers.cpsat.lns import NEIGHBOURHOOD_NODES, LnsReport, improve
from gpuplan.solvers.cpsat.pools import MIN_PART_S, Part, left_out, part_count, solve_parts, split
from gpuplan.solvers.evaluate import queue_term, reported, shortfall
from gpuplan.solvers.fleet.engine import aggregated_value_bound, node_class_count, plan_fleet
from gpuplan.solvers.fleet.transition import transition
from gpuplan.solvers.formulation.builder import Expr, Var
from gpuplan.solvers.formulation.constraints import add_all
from gpuplan.solvers.formulation.linear_frag import linear_fragmentation
from gpuplan.solvers.formulation.objective import build_terms
from gpuplan.solvers.formulation.staged import StageResult, Values, fallback, result, run_stages
from gpuplan.solvers.formulation.variables import Variables, build_variables
from gpuplan.solvers.greedy import Fgd, make_room, moved_running, reach_floors
from gpuplan.solvers.greedy.repack import repack_shared
from gpuplan.solvers.placement import NEVER_FITS, NO_CAPACITY, Placer
from gpuplan.solvers.problem import PlacementProblem, Running, disturbable
from gpuplan.solvers.run_options import RunOptions
from gpuplan.solvers.sat_parameters import cp_solver

log = logging.getLogger(__name__)

#: Above this many waiting replicas one model is too large: plan by target configurations.
MONOLITHIC_REPLICAS = 1500
#: Seconds per replica (running or waiting) kept from a split fleet's parts for the merged plan's bound
#: and evaluation (1.05-1.5 s for 66,624 replicas on 9,704 nodes, B7's rounds at 8x, quiet 2-core machine).
MERGE_S_PER_REPLICA = 0.00003
#: Seconds the FGD plan of a part gets at least: in B7's rounds at 8x (1,386 nodes, ~9,500 replicas
#: a part, a hundred of them waiting) it takes 0.3-0.45 s, and a shorter deadline leaves replicas waiting.
MIN_FGD_PART_S = 0.5
#: Share of the time limit the move towards the target configuration gets when running work may move.
TRANSITION_SHARE = 0.8
#: Share of the time limit the configuration LP and its rounding get (neighbourhood search the rest).
FLEET_SHARE = 0.95
#: Above this many variables, skip symmetry detection and probing in presolve (seconds for little gain).
FAST_PRESOLVE_VARIABLES = 4000
#: Share of the time limit the make-room search may take to improve the FGD hint of a whole-cluster
#: model (on the bundled example it places the 8-GPU training jobs FGD leaves waiting within a second).
ROOM_SHARE = 0.15
#: Share of the time limit the neighbourhood search (:mod:`.lns`) may take to improve the hint of a
#: whole-cluster model whose hint leaves replicas waiting: CP-SAT's own search on the full model rarely
#: re-packs shared GPUs in the seconds a request has (bundled example, 10 s: 2 more replicas placed).
HINT_SEARCH_SHARE = 0.4
#: Steps in a row that place nothing more after which the hint search gives its time back (on the
#: bundled example the step that places more comes among the first three).
HINT_SEARCH_STALL = 6
#: Share of the time the transition towards the target configuration leaves that the make-room search
#: gets on a large cluster whose running work may move (the neighbourhood search gets the rest).
ROOM_MOVES_SHARE = 0.8
#: Trials of the make-room search on a whole-cluster model per second of its share (about half a
#: second's worth on a quiet 2-core machine: 1,500 trials took 0.75 CPU seconds on the bundled example
#: at 10 s); the wall clock still stops it once ``ROOM_WALL_SHARE`` of the solve's time has passed
#: (flagged in a deterministic solve): the trials are the best use of a busy machine's CPU (with four
#: other busy processes on 2 cores they took 2 s of wall time on the bundled example).
ROOM_STEPS_PER_S = 1000
ROOM_WALL_SHARE = 0.5
#: Trials the make-room search gets at least, whatever the limit (about 0.75 CPU seconds): per CPU
#: second it is the best search there is (on the bundled example 1,100 trials take the queue term from
#: 216,407 to 103,607, which CP-SAT's own search reaches after 20-30 s); the wall clock still stops it.
ROOM_MIN_STEPS = 1500
#: Deterministic seconds a deterministic solve gets per second of its wall-clock share: CP-SAT's
#: deterministic time ran 0.3-0.5x the wall time on a busy 2-core machine, so a quarter leaves room for
#: slower machines to finish on deterministic time (and so give the same plan) within the time limit.
DETERMINISTIC_PER_WALL_S = 0.25
#: Queue orders the FGD hint of a large model without moves is the best of (``greedy.orders``), and
#: the share of the time limit their trials may take: in greedy-only openb rounds (B2 ablation) 4
#: orders gave +0.4 to +0.6 point of allocation at 130% arrived over the arrival order alone.
HINT_ORDERS = 8
ORDERS_SHARE = 0.25
#: Deterministic seconds for checking that the FGD plan is a solution of CP-SAT's model (every
#: decision fixed, so propagation alone decides; a limit, not a clock, so the answer repeats).
FIT_CHECK_DETERMINISTIC_S = 2.0
#: Conflicts CP-SAT spends completing the (complete, feasible) greedy hint rather than drop it after 10,
#: the default: on the bundled example that alone took the 10 s plan from 224k to 140k queue units.
#: (repair_hint would go further but aborts the process in some worker configurations.)
HINT_CONFLICT_LIMIT = 1000


class _Stages:
    """Solves the stages of one CP-SAT model, re-hinting each stage with the previous solution."""

    def __init__(
        self,
        model: cp_model.CpModel,
        options: RunOptions,
        deadline: float,
        *,
        large: bool,
        interleave: bool = False,
    ):
        self.model = model
        self.options = options
        self.deadline = deadline
        self.large = large
        #: Run every subsolver of the portfolio in turn (as deterministic solves do) rather than one per
        #: thread: on a whole-cluster model the LP-based ones prove far stronger bounds.
        self.interleave = interleave
        #: Whether a deterministic stage was stopped by the wall clock (its result may vary by machine).
        self.cut_by_wall = False

    def minimise(self, expr: Expr, time_limit_s: float) -> tuple[StageResult, Values | None]:
        self.model.minimize(expr)
        deterministic = self.options.deterministic
        solver = cp_solver(
            # Same seed and input give the same plan: subsolvers interleave in fixed batches and stop on
            # deterministic time. The wall clock still bounds the command: a stage cut by it is flagged.
            time_limit_s=max(0.01, self.deadline - time.perf_counter()) if deterministic else time_limit_s,
            deterministic_s=DETERMINISTIC_PER_WALL_S * time_limit_s if deterministic else None,
            workers=self.options.num_workers,
            seed=self.options.seed,
            interleave=self.interleave or deterministic,
            hint_conflict_limit=HINT_CONFLICT_LIMIT,
            # On fleet-sized models symmetry detection and probing take seconds of presolve per solve
            # for little gain; the FGD hint and LNS do the work.
            fast_presolve=self.large,
            log=log.debug if log.isEnabledFor(logging.DEBUG) else None,
        )
        t0 = time.perf_counter()
        code = solver.solve(self.model)
        wall = time.perf_counter() - t0
        if self.options.deterministic and code not in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
            self.cut_by_wall |= solver.deterministic_time < 0.99 * DETERMINISTIC_PER_WALL_S * time_limit_s
        name = str(code.name)
        if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            log.info("CP-SAT stage ended %s after %.2f s", name, wall)
            return StageResult(name, False, None, None, wall), None
        snapshot = [
            solver.value(self.model.get_int_var_from_proto_index(i))
            for i in range(len(self.model.proto.variables))
        ]

        def values(var: Var) -> int:
            return int(snapshot[var.index])

        report = StageResult(
            name, code == cp_model.OPTIMAL, solver.objective_value, solver.best_objective_bound, wall
        )
        return report, values

    def bound(self, expr: Expr, value: int, values: Values) -> None:
        self.model.add(expr <= value)
        self.model.clear_hints()  # type: ignore[no-untyped-call]
        for i in range(len(self.model.proto.variables)):
            var = self.model.get_int_var_from_proto_index(i)
            self.model.add_hint(var, values(var))


def _with_fleet_bound(
    problem: PlacementProblem, res: SolveResult, never: frozenset[tuple[str, int]]
) -> SolveResult:
    """``res`` with the better of its own bound (valid only from a full model) and the fleet-level
    knapsack bound."""
    knapsack = objective_bound(problem, queue_lower_bound(problem, never))
    if res.best_bound is not None and res.best_bound >= knapsack:
        return res
    return replace(res, best_bound=float(knapsack), bound_source="knapsack")


def _recoded(res: SolveResult, never: frozenset[tuple[str, int]]) -> SolveResult:
    """``res`` with NEVER_FITS only for replicas that fit nowhere in the whole fleet (a restricted model
    or a part of the fleet may have had no room for a replica that the fleet has)."""
    unplaced = tuple(
        u.model_copy(
            update={
                "code": NO_CAPACITY,
                "reason": u.reason.replace(", even if empty", " in the part it was given"),
            }
        )
        if u.code == NEVER_FITS and (u.workload, u.replica) not in never
        else u
        for u in res.unplaced
    )
    return replace(res, unplaced=unplaced)


class CpSat:
    """Whole-cluster placement with OR-Tools CP-SAT.

    ``movable_running`` (request positions) restricts which running replicas may move; the others are
    held where they run. A restricted solve (the steps of the large-neighbourhood search) is at most
    ``FEASIBLE``. ``decompose`` false solves one model whatever the size (a neighbourhood step).
    ``part`` solves one part of a split fleet: its plan gets no fleet bound, and no evaluation for the
    report unless it claims ``OPTIMAL`` (which the evaluation may withdraw); the merged plan of the
    whole fleet gets both (on 100,000 replicas each costs seconds that no share of the limit holds).
    """

    name = "cpsat"

    def __init__(
        self, movable_running: set[int] | None = None, *, decompose: bool = True, part: bool = False
    ) -> None:
        self.movable_running = movable_running
        self.decompose = decompose
        self.part = part

    def _finished(
        self, problem: PlacementProblem, out: SolveResult, never: frozenset[tuple[str, int]]
    ) -> SolveResult:
        """``out`` with the fleet bound and evaluated for the report (a part's plan: see the class)."""
        if not self.part:
            return reported(problem, _with_fleet_bound(problem, out, never))
        return reported(problem, out) if out.status is PlanStatus.OPTIMAL else out

    def solve(self, problem: PlacementProblem, options: RunOptions) -> SolveResult:
        """Solve; a problem CP-SAT cannot solve in time gets the FGD plan labelled ``FALLBACK``.

        Demand too large for one model (more than :data:`MONOLITHIC_REPLICAS` waiting replicas) is
        planned by target configurations (:mod:`gpuplan.solvers.fleet`); a large cluster whose running
        work may move, from the FGD plan by neighbourhood search within the disruption budget. A fleet
        of more GPUs than a part holds is split into parts (POP), unless it is planned by target
        configurations and :func:`one_configuration_lp` holds.
        """
        start = time.perf_counter()
        deadline = start + options.time_limit_s
        disturbed = {
            r
            for r, q in enumerate(problem.requests)
            if q.running is not None and disturbable(problem.policy, q)
        }
        movable = disturbed if self.movable_running is None else disturbed & self.movable_running
        # A fairness floor couples every team's replicas across the fleet: one model plans it (the parts
        # and the target configurations would plan each team's share apart).
        whole = self.decompose and not problem.fair_floor
        parts = part_count(problem.nodes) if whole else 1
        by_configurations = whole and _waiting(problem) > MONOLITHIC_REPLICAS
        if parts > 1 and not (by_configurations and one_configuration_lp(problem, parts)):
            return self._pools(problem, options, parts, movable, start)
        if by_configurations:
            return self._fleet(problem, options, never_fitting(problem), start)
        large = is_large(problem, movable)
        repack = large and bool(movable) and whole
        seen = Rankings(problem, movable, rank=large and not repack)
        # A large model's hint is the best of several queue orders (a round's arrivals seen at once);
        # a deterministic solve keeps one order, so that its plan never depends on the clock.
        orders = HINT_ORDERS if large and not movable and not options.deterministic else 1
        until = start + ORDERS_SHARE * options.time_limit_s
        greedy = Fgd().place(problem, options, on_kept=seen, orders=orders, orders_until=until)
        if problem.fair_floor and large:
            # A second start serving each team's floor first (a smaller model's start is the make-room
            # search's, which the greedy floor pass ends).
            floor_first = Fgd().place(replace(problem, floor_first=True), options)
            if queue_term(problem, floor_first) < queue_term(problem, greedy):
                greedy = replace(floor_first, solver=greedy.solver)
        assert seen.placer is not None
        never = never_fitting(problem, seen.placer)
        if repack:
            return self._repack(problem, options, seen.placer, greedy, never, start)
        room_cut = False
        search: LnsReport | None = None
        first = greedy
        if not large:
            greedy, room_cut = _with_room(problem, options, greedy, start, whole=self.decompose)
            if self.decompose and _worth_searching(problem, greedy, never):
                greedy, search = _searched(problem, options, greedy)
        candidates = seen.candidates(greedy) if seen.rank else None
        full = candidates is None and movable == disturbed
        builder = CpSatBuilder()
        v = build_variables(builder, problem, candidates, movable)
        add_all(problem, v)
        frag = linear_fragmentation(problem, v, seen.infos, seen.states) if seen.rank else None
        terms = build_terms(problem, v, frag)
        size = {
            "variables": len(builder.model.proto.variables),
            "constraints": len(builder.model.proto.constraints),
            "candidates": len(v.cands),
            "requests": len(problem.requests),
            "nodes": len(problem.nodes),
            "restricted": int(not full),
        }
        log.info("cpsat model: %s", size)
        hint_from(builder.model, v, problem, greedy)
        if terms.floor is not None and shortfall(problem, greedy.assignments) == 0:
            # The start meets the fairness floor: so does the best plan, and no stage need look for it.
            builder.model.add(terms.floor <= 0)
            terms = replace(terms, floor=None)
        stages = _Stages(
            builder.model,
            options,
            deadline,
            large=size["variables"] > FAST_PRESOLVE_VARIABLES,
            interleave=full and not large,
        )
        reports, solution, n_stages = run_stages(problem, options, v, terms, stages, start)
        wall = time.perf_counter() - start
        searched = {
            HINT_QUEUE_FGD: float(queue_term(problem, first)),
            HINT_QUEUE: float(queue_term(problem, greedy)),
        }
        if solution is None:
            # Anytime: the best plan so far is returned; FALLBACK only when no search beat the FGD start.
            better = searched[HINT_QUEUE] < searched[HINT_QUEUE_FGD]
            # A neighbourhood step's model (no decomposition) is the search's business: said at INFO.
            log.log(
                logging.WARNING if self.decompose else logging.INFO,
                "CP-SAT found no solution in %.1f s; returning the %s plan",
                wall, "searches' best" if better else "FGD",
            )  # fmt: skip
            out = fallback(self.name, greedy, reports, wall, size, improved=better)
        else:
            positions = {r for r, q in enumerate(problem.requests) if q.key in never}
            out = result(
                self.name, problem, v, reports, solution, n_stages, wall, size, never=positions, full=full
            )
            linearised = frag is not None and not movable and not problem.policy.mig.allow_repartition
            if linearised and problem.policy.objective is ObjectiveMode.LEXICOGRAPHIC:
                out = _better_of(
                    problem, seen, out, greedy, lambda: fits_model(problem, candidates, movable, greedy)
                )
        out = replace(out, terms={**out.terms, **(searched if not large else {})})
        if search is not None:
            out = replace(out, terms={**out.terms, **_search_terms(search)})
        search_cut = search is not None and search.cut
        if stages.cut_by_wall or ((room_cut or search_cut) and options.deterministic):
            out = replace(out, terms={**out.terms, CUT: 1.0})
        out = _never_worse(problem, out, greedy, lambda: fits_model(problem, candidates, movable, greedy))
        return self._finished(
            problem, replace(_recoded(out, never), wall_s=time.perf_counter() - start), never
        )

    def _repack(
        self,
        problem: PlacementProblem,
        options: RunOptions,
        placer: Placer,
        greedy: SolveResult,
        never: frozenset[tuple[str, int]],
        start: float,
    ) -> SolveResult:
        """A large cluster whose running work may move: the FGD plan (held by ``placer``), moved towards
        the target configuration (the configuration LP) within the budget, then room made for the
        replicas still waiting by chains of moves (the make-room search), then CP-SAT on neighbourhoods
        around waiting replicas and fragmented nodes with the moves left."""

        budget = problem.policy.disruption.max_moves_per_round
        until = start + TRANSITION_SHARE * options.time_limit_s
        moved, change = transition(problem, options, placer, greedy, until, moves=budget)
        roomed, room_cut = _room_with_moves(problem, options, placer, moved, start)
        improved, report = improve(
            problem,
            options,
            roomed,
            start + options.time_limit_s,
            _step,
            moves=budget - moved_running(problem, roomed),
        )
        out = replace(
            _recoded(improved, never),
            status=PlanStatus.FEASIBLE,
            solver=self.name,
            terms={
                **_search_terms(report),
                **({CUT: 1.0} if room_cut and options.deterministic else {}),
                "room_moved": float(moved_running(problem, roomed) - moved_running(problem, moved)),
                "room_placed": float(len(moved.unplaced) - len(roomed.unplaced)),
                "transition_nodes": float(change.nodes),
                "transition_moved": float(change.moved),
                "transition_placed": float(change.placed),
            },
            model_size={"requests": len(problem.requests), "nodes": len(problem.nodes), "lns": 1},
            wall_s=time.perf_counter() - start,
        )
        return self._finished(problem, out, never)

    def _fleet(
        self,
        problem: PlacementProblem,
        options: RunOptions,
        never: frozenset[tuple[str, int]],
        start: float,
    ) -> SolveResult:
        """Plan by target configurations (the configuration LP), then improve the plan by CP-SAT on
        neighbourhoods until the time limit."""
        deadline = start + options.time_limit_s
        fleet = plan_fleet(problem, options, start + FLEET_SHARE * options.time_limit_s)

        budget = problem.policy.disruption.max_moves_per_round
        # A deterministic search takes the steps of the share it is left, not of the whole limit.
        searched = replace(options, time_limit_s=(1 - FLEET_SHARE) * options.time_limit_s)
        search_options = searched if options.deterministic else options
        improved, report = improve(problem, search_options, fleet.result, deadline, _step, moves=budget)
        out = replace(
            _recoded(improved, never),
            status=PlanStatus.FEASIBLE,
            solver=self.name,
            terms={**fleet.result.terms, **_search_terms(report)},
            model_size={
                "requests": len(problem.requests),
                "nodes": len(problem.nodes),
                **fleet.result.model_size,
            },
            wall_s=time.perf_counter() - start,
        )
        if fleet.value_bound is not None:
            out = replace(
                out,
                best_bound=float(placed_value_bound(problem, fleet.value_bound)),
                bound_source="configuration LP",
            )
        return self._finished(problem, out, never)

    def _pools(
        self, problem: PlacementProblem, options: RunOptions, parts: int, movable: set[int], start: float
    ) -> SolveResult:
        """Split the fleet into parts (POP), solve them in parallel (processes or Ray tasks) and merge the
        plans."""
        pieces = split(problem, options, parts, movable)
        never = never_fitting(problem)
        processes = min(options.num_workers, parts)
        waves = math.ceil(parts / processes)
        if options.deterministic:  # every part gets the same share whatever the clock says
            each = max(MIN_PART_S, 0.9 * options.time_limit_s / waves)
        else:  # what the split left less the merged plan's evaluation; below MIN_PART_S, FGD's plan
            left = options.time_limit_s - (time.perf_counter() - start)
            each = max(0.0, 0.9 * (left - MERGE_S_PER_REPLICA * len(problem.requests)) / waves)
        pieces = [replace(p, options=replace(p.options, time_limit_s=each)) for p in pieces]
        results = solve_parts(pieces, processes, solve_part, options.ray)
        statuses = [r.status for r in results]
        size: dict[str, int] = {"parts": parts, "processes": processes}
        for r in results:
            for k, n in r.model_size.items():
                size[k] = size.get(k, 0) + n
        merged = SolveResult(
            status=PlanStatus.FALLBACK
            if all(s == PlanStatus.FALLBACK for s in statuses)
            else PlanStatus.FEASIBLE,
            solver=self.name,
            assignments=tuple(a for r in results for a in r.assignments),
            unplaced=tuple(u for r in results for u in r.unplaced) + left_out(problem, pieces),
            mig_layouts=tuple(lay for r in results for lay in r.mig_layouts),
            terms={
                "parts": float(parts),
                "parts_optimal": float(statuses.count(PlanStatus.OPTIMAL)),
                "parts_fallback": float(statuses.count(PlanStatus.FALLBACK)),
                **({CUT: 1.0} if any(CUT in r.terms for r in results) else {}),
            },
            model_size=size,
            wall_s=time.perf_counter() - start,
        )
        # The whole fleet's bound, in the time the parts leave (after them: HiGHS' threads must not be
        # running when the parts' processes are forked).
        value_bound = (
            aggregated_value_bound(problem, start + options.time_limit_s)
            if self.decompose and _waiting(problem) > MONOLITHIC_REPLICAS
            else None
        )
        if value_bound is not None:
            merged = replace(
                merged,
                best_bound=float(placed_value_bound(problem, value_bound)),
                bound_source="configuration LP",
            )
        return reported(problem, _with_fleet_bound(problem, _recoded(merged, never), never))


def _waiting(problem: PlacementProblem) -> int:
    """How many replicas wait."""
    return sum(q.running is None for q in problem.requests)


def one_configuration_lp(problem: PlacementProblem, parts: int) -> bool:
    """Whether a fleet the GPU count would split into ``parts`` is planned whole by one configuration
    LP: its nodes fall into no more classes than one part holds nodes, so the whole fleet's LP is no
    larger than a part's could be (replicated fleets: 15 classes for 9,704 nodes), and its plan and
    bound hold for the whole fleet. POP only where the classes really grow (nodes in many different
    states)."""
    return node_class_count(problem) <= len(problem.nodes) // parts


def _step(sub: PlacementProblem, options: RunOptions, movable: set[int]) -> SolveResult:
    """One neighbourhood of the search: CP-SAT on the sub-problem, moving only ``movable`` running work."""
    return CpSat(movable_running=movable, decompose=False).solve(sub, options)


def _worth_searching(problem: PlacementProblem, hint: SolveResult, never: frozenset[tuple[str, int]]) -> bool:
    """Whether the hint search may place more: some replica the hint leaves waiting fits somewhere, and
    the cluster is larger than one neighbourhood (else the model itself is the search)."""
    if len(problem.nodes) <= NEIGHBOURHOOD_NODES:
        return False
    return any((u.workload, u.replica) not in never for u in hint.unplaced)


def _searched(
    problem: PlacementProblem, options: RunOptions, hint: SolveResult
) -> tuple[SolveResult, LnsReport]:
    """``hint`` improved by neighbourhood search for :data:`HINT_SEARCH_SHARE` of the time limit, within
    the moves the hint leaves (a deterministic run takes that share's fixed number of steps)."""
    share = HINT_SEARCH_SHARE * options.time_limit_s
    budget = problem.policy.disruption.max_moves_per_round - moved_running(problem, hint)
    searched = replace(options, time_limit_s=share)
    improved, report = improve(
        problem, searched, hint, time.perf_counter() + share, _step, moves=budget, stall=HINT_SEARCH_STALL
    )
    log.info(
        "hint search: %d steps, %d placed more, %d waiting before, %d after",
        report.steps, report.improved, len(hint.unplaced), len(improved.unplaced),
    )  # fmt: skip
    return improved, report


def _with_room(
    problem: PlacementProblem, options: RunOptions, greedy: SolveResult, start: float, *, whole: bool
) -> tuple[SolveResult, bool]:
    """The FGD plan improved by re-packing shared GPUs and making room for waiting replicas (on a placer
    of its own, so that the candidate rankings keep the FGD state), and whether the wall clock cut that
    search short. The search is bounded by trials (work), so that a busy machine gets the same plan
    later rather than a worse one; the wall clock stops it only past :data:`ROOM_WALL_SHARE` of the
    solve's time. The ``whole`` problem (not a neighbourhood step's) gets at least
    :data:`ROOM_MIN_STEPS` trials."""
    share = ROOM_SHARE * options.work_limit_s
    held: list[Placer] = []
    greedy = Fgd().place(problem, options, on_kept=held.append)
    again = repack_shared(problem, held[0], greedy)
    steps = max(ROOM_MIN_STEPS if whole else 1, round(ROOM_STEPS_PER_S * share))
    roomed, cut = make_room(problem, held[0], again, start + ROOM_WALL_SHARE * options.time_limit_s, steps)
    return reach_floors(problem, held[0], roomed), cut


def _room_with_moves(
    problem: PlacementProblem, options: RunOptions, placer: Placer, plan: SolveResult, start: float
) -> tuple[SolveResult, bool]:
    """``plan`` (held by ``placer``) with room made for the waiting replicas by moving running work
    within the budget, and whether the wall clock cut that search short. It gets its share of the time
    left; a deterministic solve bounds the search by trials, not time."""
    if not options.deterministic:
        now = time.perf_counter()
        left = start + options.time_limit_s - now
        return make_room(problem, placer, plan, now + ROOM_MOVES_SHARE * left)
    share = ROOM_MOVES_SHARE * (1 - TRANSITION_SHARE) * options.time_limit_s
    steps = max(1, round(ROOM_STEPS_PER_S * share))
    return make_room(problem, placer, plan, start + options.time_limit_s, steps)


def _search_terms(report: LnsReport) -> dict[str, float]:
    """What a neighbourhood search did, as report terms."""
    return {
        "lns_steps": float(report.steps),
        "lns_improving_steps": float(report.improved),
        "lns_queue_gained": float(report.gained),
        "lns_moved": float(report.moved),
        **({CUT: 1.0} if report.cut else {}),
    }


def _never_worse(
    problem: PlacementProblem, solved: SolveResult, greedy: SolveResult, fits: Callable[[], bool]
) -> SolveResult:
    """CP-SAT's plan, or the FGD plan it started from when the search ended on a plan that waits more
    (a search cut short can end worse than its hint) and the FGD plan is a solution of the model
    (``fits``, asked only then)."""
    if queue_term(problem, solved) <= queue_term(problem, greedy) or not fits():
        return solved
    log.info("CP-SAT's plan waits more than the FGD plan it was hinted with: returning the FGD plan")
    return instead_of(solved, greedy, {**solved.terms, "kept_hint": 1.0})


def _better_of(
    problem: PlacementProblem,
    seen: Rankings,
    solved: SolveResult,
    hint: SolveResult,
    fits: Callable[[], bool],
) -> SolveResult:
    """CP-SAT's plan, or the FGD hint when it waits as little, is less fragmented by the exact measure
    (the model only saw linearised fragmentation costs) and is a solution of the model (``fits``)."""
    compared = exact_comparison(problem, seen.infos, seen.states, solved, hint)
    if compared is None:
        return solved
    ours, theirs = compared
    terms = {
        **solved.terms,
        "fragmentation_exact_cpsat": round(ours, 3),
        "fragmentation_exact_hint": round(theirs, 3),
    }
    if ours <= theirs or not fits():
        return replace(solved, terms=terms)
    log.info("kept the FGD hint: exact fragmentation %.0f against CP-SAT's %.0f", theirs, ours)
    return instead_of(solved, hint, {**terms, "kept_hint": 1.0})


def solve_part(part: Part) -> SolveResult:
    """Solve one part of a split fleet (runs in a worker process). A part given less than
    :data:`MIN_PART_S` gets the FGD plan, labelled ``FALLBACK`` (CP-SAT finds nothing in less), in at
    least :data:`MIN_FGD_PART_S`."""
    if part.options.time_limit_s < MIN_PART_S:
        start = time.perf_counter()
        limit = max(part.options.time_limit_s, MIN_FGD_PART_S)
        greedy = Fgd().place(part.problem, part.options, deadline=start + limit)
        return fallback(CpSat.name, greedy, [], time.perf_counter() - start, {})
    movable = {r for r, q in enumerate(part.problem.requests) if q.key in part.movable}
    return CpSat(movable_running=movable, part=True).solve(part.problem, part.options)


def hint_from(m: cp_model.CpModel, v: Variables, problem: PlacementProblem, greedy: SolveResult) -> bool:
    """A complete hint of the decision variables from the greedy plan (unused ones at 0); whether every
    assignment of the plan has its variables in the model (else the hint leaves some unplaced)."""
    node_pos = {n.name: i for i, n in enumerate(problem.nodes)}
    req_pos = {(q.workload, q.replica): i for i, q in enumerate(problem.requests)}
    chosen: set[int] = set()
    complete = True
    for a in greedy.assignments:
        r = req_pos[(a.workload, a.replica)]
        n = node_pos[a.node]
        if r in v.fixed:
            continue
        cand = v.cands.get((r, a.alternative, n))
        if cand is None:
            complete = False
            continue
        pos = {g.index: p for p, g in enumerate(problem.nodes[n].gpus)}
        chosen.add(cand.x.index)
        flag = v.placed[r]
        if not isinstance(flag, int):
            chosen.add(flag.index)
        for g in a.gpus:
            found = cand.var_for(pos[g.index], g)
            if found is not None:
                chosen.add(found.index)
            complete &= found is not None
        used = {pos[g.index] for g in a.gpus}
        grp = next((g for s, g in cand.groups if used <= s), None)
        if grp is not None:
            chosen.add(grp.index)
        complete &= grp is not None or not cand.groups
        run = problem.requests[r].running
        if r in v.stay and run is not None and _same_place(run, a):
            chosen.add(v.stay[r].index)
    for lay in greedy.mig_layouts:
        n = node_pos[lay.node]
        p = next(i for i, g in enumerate(problem.nodes[n].gpus) if g.index == lay.gpu)
        mg = v.mig_gpus.get((n, p))
        for inst in lay.instances if mg is not None else ():
            slot_var = mg.inst.get((inst.profile, inst.start)) if mg is not None else None
            if slot_var is not None and not isinstance(slot_var, int):
                chosen.add(slot_var.index)
    decisions: list[Var] = [p for p in v.placed.values() if not isinstance(p, int)] + list(v.stay.values())
    for cand in v.cands.values():
        decisions.append(cand.x)
        decisions.extend(var for _, var in cand.gpu_vars())
        decisions.extend(var for _, var in cand.groups)
    for mg in v.mig_gpus.values():
        decisions.extend(i for i in mg.inst.values() if not isinstance(i, int))
    for var in decisions:
        m.add_hint(var, 1 if var.index in chosen else 0)
    return complete


def _same_place(run: Running, a: Assignment) -> bool:
    """Whether assignment ``a`` keeps a running replica exactly where it runs."""
    entries = {(g.index, g.milli, g.mig_profile, g.mig_start) for g in run.gpus}
    return (run.node, run.alternative) == (a.node, a.alternative) and entries == {
        (g.index, g.milli, g.mig_profile, g.mig_start) for g in a.gpus
    }


def fits_model(
    problem: PlacementProblem,
    candidates: dict[int, list[int]] | None,
    movable: set[int],
    plan: SolveResult,
) -> bool:
    """Whether ``plan`` (the FGD plan a CP-SAT solve started from) is a solution of the same model, so
    that it may replace CP-SAT's own plan: the greedy placement keeps the rules its own way, and a plan
    the model rejects may break one (a quota or isolation rule the current state already breaks, the
    budget), so CP-SAT never trades its valid plan for it. Checked by fixing every decision to the plan
    (no search: propagation decides, within a short limit; unknown counts as no)."""
    builder = CpSatBuilder()
    v = build_variables(builder, problem, candidates, movable)
    add_all(problem, v)
    if not hint_from(builder.model, v, problem, plan):
        return False
    solver = cp_solver(fix_to_hint=True, workers=1, deterministic_s=FIT_CHECK_DETERMINISTIC_S)
    code = solver.solve(builder.model)
    log.debug("the FGD plan in CP-SAT's model: %s", code.name)
    return code in (cp_model.OPTIMAL, cp_model.FEASIBLE)

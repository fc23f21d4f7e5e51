"""The CP-SAT back-end: the exact placement model, hinted with FGD, solved lexicographically and
reported honestly (status, objective, bound, gap, wall time, model size), with an FGD fallback."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace

from ortools.sat.python import cp_model

from gpuplan.models.plan import PlanStatus
from gpuplan.models.policy import ObjectiveMode
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.cpsat.bounds import queue_lower_bound
from gpuplan.solvers.cpsat.builder import CpSatBuilder
from gpuplan.solvers.cpsat.candidates import Rankings, is_large
from gpuplan.solvers.cpsat.guard import exact_comparison, queue_term
from gpuplan.solvers.cpsat.lns import improve
from gpuplan.solvers.cpsat.pools import MIN_PART_S, Part, part_count, solve_parts, split
from gpuplan.solvers.formulation.builder import Expr, Var
from gpuplan.solvers.formulation.constraints import add_all
from gpuplan.solvers.formulation.linear_frag import linear_fragmentation
from gpuplan.solvers.formulation.objective import build_terms, queue_penalty
from gpuplan.solvers.formulation.staged import StageResult, Values, fallback, result, run_stages
from gpuplan.solvers.formulation.variables import Variables, build_variables
from gpuplan.solvers.formulation.variables import movable as may_move
from gpuplan.solvers.greedy import NEVER_FITS, Fgd
from gpuplan.solvers.problem import PlacementProblem

log = logging.getLogger(__name__)

#: Above this many waiting replicas one model is too large: plan by large-neighbourhood search.
MONOLITHIC_REPLICAS = 1500
#: Wall-clock safety net of a deterministic solve beyond 10x its deterministic limit (a busy machine
#: advances deterministic time slowly; hitting the net would make the plan depend on the clock).
DETERMINISTIC_WALL_S = 60.0
#: Above this many variables, skip symmetry detection and probing in presolve (seconds for little gain).
FAST_PRESOLVE_VARIABLES = 4000


class _Stages:
    """Solves the stages of one CP-SAT model, re-hinting each stage with the previous solution."""

    def __init__(self, model: cp_model.CpModel, problem: PlacementProblem, *, large: bool) -> None:
        self.model = model
        self.problem = problem
        self.large = large

    def minimise(
        self, expr: Expr, time_limit_s: float, measure: list[Expr]
    ) -> tuple[StageResult, Values | None, list[int]]:
        self.model.minimize(expr)
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = time_limit_s
        solver.parameters.num_workers = self.problem.num_workers
        solver.parameters.random_seed = self.problem.seed
        if self.large:
            # On fleet-sized models symmetry detection and probing take seconds of presolve per solve
            # for little gain; the FGD hint and LNS do the work.
            solver.parameters.symmetry_level = 0
            solver.parameters.cp_model_probing_level = 0
        if self.problem.deterministic:
            # Same seed and input give the same plan: subsolvers interleave in fixed batches and stop
            # on deterministic time (the wall-clock limit stays as a safety net).
            solver.parameters.interleave_search = True
            solver.parameters.max_deterministic_time = time_limit_s
            solver.parameters.max_time_in_seconds = DETERMINISTIC_WALL_S + 10 * time_limit_s
        if log.isEnabledFor(logging.DEBUG):
            solver.parameters.log_search_progress = True
            solver.log_callback = log.debug
        t0 = time.perf_counter()
        code = solver.solve(self.model)
        wall = time.perf_counter() - t0
        name = str(code.name)
        if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            log.info("CP-SAT stage ended %s after %.2f s", name, wall)
            return StageResult(name, False, None, None, wall), None, []
        snapshot = [
            solver.value(self.model.get_int_var_from_proto_index(i))
            for i in range(len(self.model.proto.variables))
        ]

        def values(var: Var) -> int:
            return int(snapshot[var.index])

        report = StageResult(
            name, code == cp_model.OPTIMAL, solver.objective_value, solver.best_objective_bound, wall
        )
        return report, values, [int(solver.value(e)) for e in measure]

    def bound(self, expr: Expr, value: int, values: Values) -> None:
        self.model.add(expr <= value)
        self.model.clear_hints()  # type: ignore[no-untyped-call]
        for i in range(len(self.model.proto.variables)):
            var = self.model.get_int_var_from_proto_index(i)
            self.model.add_hint(var, values(var))


class CpSat:
    """Whole-cluster placement with OR-Tools CP-SAT."""

    name = "cpsat"

    def __init__(self, movable_running: set[int] | None = None) -> None:
        self.movable_running = movable_running

    def solve(self, problem: PlacementProblem) -> SolveResult:
        """Solve; a problem CP-SAT cannot solve in time gets the FGD plan labelled ``FALLBACK``.

        Demand too large for one model is planned by large-neighbourhood search from the FGD plan.
        """
        start = time.perf_counter()
        movable = {
            r
            for r, q in enumerate(problem.requests)
            if q.running is not None
            and may_move(problem.policy, q)
            and (self.movable_running is None or r in self.movable_running)
        }
        parts = part_count(problem.nodes)
        if parts > 1:
            return self._pools(problem, parts, movable, start)
        if sum(q.running is None for q in problem.requests) > MONOLITHIC_REPLICAS:
            return self._lns(problem, Fgd().solve(problem), start)
        large = is_large(problem, movable)
        rankings = Rankings(problem, movable)
        greedy = Fgd().solve(problem, on_kept=rankings if large else None)
        candidates = rankings.candidates(greedy) if large else None
        builder = CpSatBuilder()
        v = build_variables(builder, problem, candidates, movable)
        add_all(problem, v)
        frag = linear_fragmentation(problem, v, rankings.infos, rankings.states) if large else None
        terms = build_terms(problem, v, frag)
        size = {
            "variables": len(builder.model.proto.variables),
            "constraints": len(builder.model.proto.constraints),
            "candidates": len(v.cands),
            "requests": len(problem.requests),
            "nodes": len(problem.nodes),
            "restricted": int(candidates is not None),
        }
        log.info("cpsat model: %s", size)
        hint_from(builder.model, v, problem, greedy)
        reports, solution, values, n_stages = run_stages(
            problem,
            v,
            terms,
            _Stages(builder.model, problem, large=size["variables"] > FAST_PRESOLVE_VARIABLES),
            start,
        )
        wall = time.perf_counter() - start
        if solution is None:
            log.warning("CP-SAT found no solution in %.1f s; returning the FGD plan", wall)
            return fallback(self.name, greedy, reports, wall, size)
        solved = result(self.name, problem, v, reports, solution, values, n_stages, wall, size)
        linearised = frag is not None and not movable and not problem.policy.mig.allow_repartition
        if linearised and problem.policy.objective is ObjectiveMode.LEXICOGRAPHIC:
            return _better_of(problem, rankings, solved, greedy, start)
        return solved

    def _lns(self, problem: PlacementProblem, greedy: SolveResult, start: float) -> SolveResult:
        """The FGD plan improved by CP-SAT on neighbourhoods until the time limit."""

        def step(sub: PlacementProblem, movable: set[int]) -> SolveResult:
            return CpSat(movable_running=movable).solve(sub)

        result, report = improve(problem, greedy, start + problem.time_limit_s, step)
        return _queue_result(
            self.name,
            problem,
            result,
            start,
            PlanStatus.FEASIBLE,
            {
                "lns_steps": float(report.steps),
                "lns_improving_steps": float(report.improved),
                "lns_queue_gained": float(report.gained),
            },
            {"requests": len(problem.requests), "nodes": len(problem.nodes), "lns": 1},
        )

    def _pools(self, problem: PlacementProblem, parts: int, movable: set[int], start: float) -> SolveResult:
        """Split the fleet into parts (POP), solve them in parallel processes and merge the plans."""
        pieces = split(problem, parts, movable)
        processes = min(problem.num_workers, parts)
        # Deterministic runs give every part the same share whatever the clock says.
        budget = problem.time_limit_s
        if not problem.deterministic:
            budget -= time.perf_counter() - start
        each = max(MIN_PART_S, 0.9 * budget / math.ceil(parts / processes))
        pieces = [replace(p, problem=replace(p.problem, time_limit_s=each)) for p in pieces]
        results = solve_parts(pieces, processes, solve_part)
        statuses = [r.status for r in results]
        size: dict[str, int] = {"parts": parts, "processes": processes}
        for r in results:
            for k, n in r.model_size.items():
                size[k] = size.get(k, 0) + n
        every_fallback = all(s == PlanStatus.FALLBACK for s in statuses)
        merged = SolveResult(
            status=PlanStatus.FALLBACK if every_fallback else PlanStatus.FEASIBLE,
            solver=self.name,
            assignments=tuple(a for r in results for a in r.assignments),
            unplaced=tuple(u for r in results for u in r.unplaced),
            mig_layouts=tuple(lay for r in results for lay in r.mig_layouts),
        )
        return _queue_result(
            self.name,
            problem,
            merged,
            start,
            merged.status,
            {
                "parts": float(parts),
                "parts_optimal": float(statuses.count(PlanStatus.OPTIMAL)),
                "parts_fallback": float(statuses.count(PlanStatus.FALLBACK)),
            },
            size,
        )


def _better_of(
    problem: PlacementProblem, rankings: Rankings, solved: SolveResult, hint: SolveResult, start: float
) -> SolveResult:
    """CP-SAT's plan, or the FGD hint when it waits as little and is less fragmented by the exact
    measure (the model only saw linearised fragmentation costs)."""
    compared = exact_comparison(problem, rankings.infos, rankings.states, solved, hint)
    if compared is None:
        return solved
    ours, theirs = compared
    terms = {
        **solved.terms,
        "fragmentation_exact_cpsat": round(ours, 3),
        "fragmentation_exact_hint": round(theirs, 3),
    }
    if ours <= theirs:
        return replace(solved, terms=terms)
    log.info("kept the FGD hint: exact fragmentation %.0f against CP-SAT's %.0f", theirs, ours)
    return replace(
        hint,
        status=PlanStatus.FEASIBLE,
        solver=solved.solver,
        objective=solved.objective,
        best_bound=solved.best_bound,
        gap=solved.gap,
        wall_s=time.perf_counter() - start,
        terms={
            "queue": float(queue_term(problem, hint)),
            **{k: v for k, v in terms.items() if k.startswith(("stage_", "fragmentation_exact"))},
            "kept_hint": 1.0,
        },
        model_size=solved.model_size,
    )


def solve_part(part: Part) -> SolveResult:
    """Solve one part of a split fleet (runs in a worker process)."""
    movable = {r for r, q in enumerate(part.problem.requests) if q.key in part.movable}
    return CpSat(movable_running=movable).solve(part.problem)


def _queue_result(
    name: str,
    problem: PlacementProblem,
    result: SolveResult,
    start: float,
    status: PlanStatus,
    terms: dict[str, float],
    size: dict[str, int],
) -> SolveResult:
    """A plan not solved as one model, reported by its queue term against the knapsack bound."""
    waiting = {(u.workload, u.replica) for u in result.unplaced}
    never = {(u.workload, u.replica) for u in result.unplaced if u.code == NEVER_FITS}
    objective = sum(queue_penalty(q, problem) for q in problem.requests if q.key in waiting)
    bound = queue_lower_bound(problem, never)
    return replace(
        result,
        status=status,
        solver=name,
        objective=float(objective),
        best_bound=float(bound),
        gap=abs(objective - bound) / max(1.0, abs(objective)),
        wall_s=time.perf_counter() - start,
        terms={"queue": float(objective), **terms},
        model_size=size,
    )


def hint_from(m: cp_model.CpModel, v: Variables, problem: PlacementProblem, greedy: SolveResult) -> None:
    """A complete hint of the decision variables from the greedy plan (unused ones at 0)."""
    node_pos = {n.name: i for i, n in enumerate(problem.nodes)}
    req_pos = {(q.workload, q.replica): i for i, q in enumerate(problem.requests)}
    chosen: set[int] = set()
    for a in greedy.assignments:
        r = req_pos[(a.workload, a.replica)]
        n = node_pos[a.node]
        cand = v.cands.get((r, a.alternative, n))
        if cand is None:
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
        used = {pos[g.index] for g in a.gpus}
        grp = next((g for s, g in cand.groups if used <= s), None)
        if grp is not None:
            chosen.add(grp.index)
        if r in v.stay:
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

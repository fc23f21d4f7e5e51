"""The MILP back-end (PuLP with HiGHS or CBC): the same formulation as CP-SAT, for cross-checks and
small instances. Optimality is proved to a zero gap; an interrupted HiGHS solve reports HiGHS' dual
bound (PuLP does not expose CBC's), and the fleet-level bound is used when it is better. It falls back
to FGD when it finds nothing in time."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace

import pulp

from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.bounds import never_fitting, objective_bound, queue_lower_bound
from gpuplan.solvers.evaluate import reported
from gpuplan.solvers.formulation.builder import Expr, Var
from gpuplan.solvers.formulation.constraints import add_all
from gpuplan.solvers.formulation.objective import build_terms
from gpuplan.solvers.formulation.staged import StageResult, Values, fallback, result, run_stages
from gpuplan.solvers.formulation.variables import build_variables
from gpuplan.solvers.greedy import Fgd
from gpuplan.solvers.milp.builder import PulpBuilder
from gpuplan.solvers.milp.engine import engine_name, pulp_engine
from gpuplan.solvers.problem import PlacementProblem
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)


class _Stages:
    """Solves the stages of one PuLP model."""

    def __init__(self, builder: PulpBuilder, backend: str, threads: int) -> None:
        self.builder = builder
        self.backend = backend
        self.threads = threads

    def minimise(self, expr: Expr, time_limit_s: float) -> tuple[StageResult, Values | None]:
        prob = self.builder.problem
        prob.setObjective(expr if not isinstance(expr, int) else pulp.lpSum([]) + expr)
        t0 = time.perf_counter()
        prob.solve(pulp_engine(self.backend, time_limit_s, self.threads))
        wall = time.perf_counter() - t0
        if prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
            status = pulp.LpStatus.get(prob.status, str(prob.status))
            log.info("%s stage ended %s after %.2f s", self.backend, status, wall)
            return StageResult(status, False, None, None, wall), None
        snapshot = {var.name: round(var.varValue or 0) for var in self.builder.variables}

        def values(var: Var) -> int:
            return snapshot[var.name]

        optimal = prob.sol_status == pulp.LpSolutionOptimal
        objective = float(round(pulp.value(prob.objective) or 0))
        bound = objective if optimal else self._dual_bound()
        report = StageResult("OPTIMAL" if optimal else "FEASIBLE", optimal, objective, bound, wall)
        return report, values

    def _dual_bound(self) -> float | None:
        """HiGHS' MIP dual bound of an interrupted solve (``None`` for CBC, or when HiGHS has none)."""
        model = getattr(self.builder.problem, "solverModel", None)
        if engine_name(self.backend) != "highs" or model is None:
            return None
        bound = float(model.getInfo().mip_dual_bound)
        return bound if math.isfinite(bound) else None

    def bound(self, expr: Expr, value: int, values: Values) -> None:
        if not isinstance(expr, int):
            self.builder.add(expr <= value)


class Milp:
    """Exact placement with a MILP solver through PuLP."""

    def __init__(self, backend: str = "highs") -> None:
        self.backend = backend
        self.name = f"milp-{engine_name(backend)}"

    def solve(self, problem: PlacementProblem, options: RunOptions) -> SolveResult:
        """Solve; if the MILP solver finds nothing in time, return the FGD plan as ``FALLBACK``."""
        start = time.perf_counter()
        builder = PulpBuilder()
        v = build_variables(builder, problem)
        add_all(problem, v)
        terms = build_terms(problem, v)
        size = {
            "variables": len(builder.variables),
            "constraints": builder.constraint_count,
            "candidates": len(v.cands),
            "requests": len(problem.requests),
            "nodes": len(problem.nodes),
        }
        reports, solution, n_stages = run_stages(
            problem, options, v, terms, _Stages(builder, self.backend, options.num_workers), start
        )
        wall = time.perf_counter() - start
        never = never_fitting(problem)
        if solution is None:
            log.warning("%s found no solution in %.1f s; returning the FGD plan", self.name, wall)
            out = fallback(self.name, Fgd().place(problem, options), reports, wall, size)
        else:
            positions = {r for r, q in enumerate(problem.requests) if q.key in never}
            out = result(
                self.name, problem, v, reports, solution, n_stages, wall, size, never=positions, full=True
            )
        knapsack = objective_bound(problem, queue_lower_bound(problem, never))
        if out.best_bound is None or out.best_bound < knapsack:
            out = replace(out, best_bound=float(knapsack), bound_source="knapsack")
        return reported(problem, out)


class MilpCbc(Milp):
    """The MILP back-end on COIN-OR CBC."""

    def __init__(self) -> None:
        super().__init__("cbc")


class MilpHighs(Milp):
    """The MILP back-end on HiGHS."""

    def __init__(self) -> None:
        super().__init__("highs")

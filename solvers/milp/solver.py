"""The MILP back-end (PuLP with HiGHS or CBC): the same formulation as CP-SAT, for cross-checks and
small instances. It reports a bound only when it proves optimality (PuLP does not expose the MIP bound
of an interrupted solve), and falls back to FGD when it finds nothing in time."""

from __future__ import annotations

import logging
import time
import warnings

import pulp

from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.formulation.builder import Expr, Var
from gpuplan.solvers.formulation.constraints import add_all
from gpuplan.solvers.formulation.objective import build_terms
from gpuplan.solvers.formulation.staged import StageResult, Values, fallback, result, run_stages
from gpuplan.solvers.formulation.variables import build_variables
from gpuplan.solvers.greedy import Fgd
from gpuplan.solvers.milp.builder import PulpBuilder
from gpuplan.solvers.problem import PlacementProblem

log = logging.getLogger(__name__)


def _engine(backend: str, time_limit_s: float, threads: int) -> pulp.LpSolver:
    if backend == "highs":
        return pulp.HiGHS(msg=False, timeLimit=time_limit_s, threads=threads)
    with warnings.catch_warnings():
        # PuLP 3.3 deprecates its bundled CBC binary for 4.0; it is the CBC this pinned PuLP ships.
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, threads=threads)


class _Stages:
    """Solves the stages of one PuLP model."""

    def __init__(self, builder: PulpBuilder, backend: str, threads: int) -> None:
        self.builder = builder
        self.backend = backend
        self.threads = threads

    def minimise(
        self, expr: Expr, time_limit_s: float, measure: list[Expr]
    ) -> tuple[StageResult, Values | None, list[int]]:
        prob = self.builder.problem
        prob.setObjective(expr if not isinstance(expr, int) else pulp.lpSum([]) + expr)
        t0 = time.perf_counter()
        prob.solve(_engine(self.backend, time_limit_s, self.threads))
        wall = time.perf_counter() - t0
        if prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
            status = pulp.LpStatus.get(prob.status, str(prob.status))
            log.info("%s stage ended %s after %.2f s", self.backend, status, wall)
            return StageResult(status, False, None, None, wall), None, []
        snapshot = {var.name: round(var.varValue or 0) for var in self.builder.variables}

        def values(var: Var) -> int:
            return snapshot[var.name]

        optimal = prob.sol_status == pulp.LpSolutionOptimal
        objective = float(round(pulp.value(prob.objective) or 0))
        report = StageResult(
            "OPTIMAL" if optimal else "FEASIBLE", optimal, objective, objective if optimal else None, wall
        )
        measured = [e if isinstance(e, int) else round(pulp.value(e) or 0) for e in measure]
        return report, values, measured

    def bound(self, expr: Expr, value: int, values: Values) -> None:
        if not isinstance(expr, int):
            self.builder.add(expr <= value)


class Milp:
    """Exact placement with a MILP solver through PuLP."""

    def __init__(self, backend: str = "highs") -> None:
        self.backend = backend
        self.name = f"milp-{backend}"

    def solve(self, problem: PlacementProblem) -> SolveResult:
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
        reports, solution, values, n_stages = run_stages(
            problem, v, terms, _Stages(builder, self.backend, problem.num_workers), start
        )
        wall = time.perf_counter() - start
        if solution is None:
            log.warning("%s found no solution in %.1f s; returning the FGD plan", self.name, wall)
            return fallback(self.name, Fgd().solve(problem), reports, wall, size)
        return result(self.name, problem, v, reports, solution, values, n_stages, wall, size)


class MilpCbc(Milp):
    """The MILP back-end on COIN-OR CBC."""

    def __init__(self) -> None:
        super().__init__("cbc")


class MilpHighs(Milp):
    """The MILP back-end on HiGHS."""

    def __init__(self) -> None:
        super().__init__("highs")

"""The fleet engine as a back-end of its own (``fleet``): the plan of the configuration LP
(:func:`~gpuplan.solvers.fleet.engine.plan_fleet`) over the whole fleet, whatever its size, without the
neighbourhood search ``cpsat`` runs after it on fleets of more than 1,500 waiting replicas, and never
split into parts. Its plan is ``FEASIBLE`` (the configuration LP proves no plan optimal); its bound is the
better of the configuration LP's (when no running work may be disturbed) and the knapsack bound.
"""

from __future__ import annotations

import time
from dataclasses import replace

from gpuplan.models.plan import PlanStatus
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.bounds import knapsack_bound, placed_value_bound
from gpuplan.solvers.evaluate import reported
from gpuplan.solvers.fleet.engine import plan_fleet
from gpuplan.solvers.problem import PlacementProblem
from gpuplan.solvers.run_options import RunOptions

#: Share of the time limit the configuration LP, its rounding and realisation get (the bounds and the
#: plan's evaluation for the report the rest).
PLAN_SHARE = 0.95


class Fleet:
    """Target-configuration planning (:mod:`gpuplan.solvers.fleet`) on its own."""

    name = "fleet"

    def solve(self, problem: PlacementProblem, options: RunOptions) -> SolveResult:
        """The configuration LP's plan (or FGD's, when it waits less or the LP has no time), with the
        better of its bounds, evaluated for the report."""
        start = time.perf_counter()
        fleet = plan_fleet(problem, options, start + PLAN_SHARE * options.time_limit_s)
        bound, source = float(knapsack_bound(problem)), "knapsack"
        if fleet.value_bound is not None:
            lp = float(placed_value_bound(problem, fleet.value_bound))
            if lp > bound:
                bound, source = lp, "configuration LP"
        out = replace(
            fleet.result,
            status=PlanStatus.FEASIBLE,
            solver=self.name,
            best_bound=bound,
            bound_source=source,
            wall_s=time.perf_counter() - start,
        )
        return reported(problem, out)

"""A solve result judged by the validator before its actions exist.

The passes that change or re-run a solver's plan (the idle-move repair, the timeline's starts, a
counterfactual's re-solve) check what they produce as a plan of its assignments, waiting replicas and MIG
layouts; the actions are derived later, so the validator is told not to ask for them.
"""

from __future__ import annotations

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan, SolverReport
from gpuplan.planner.validation.validate import Violation, validate_plan
from gpuplan.solvers.base import SolveResult


def result_violations(result: SolveResult, inp: PlanningInput, catalog: HardwareCatalog) -> list[Violation]:
    """Every rule the plan of ``result`` breaks for ``inp``, its actions not yet derived."""
    plan = Plan(
        status=result.status,
        solver=SolverReport(name=result.solver),
        assignments=result.assignments,
        unplaced=result.unplaced,
        mig_layouts=result.mig_layouts,
    )
    return validate_plan(plan, inp, catalog, actions_derived=False)

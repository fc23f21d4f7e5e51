"""Why a FEASIBLE plan is not called optimal: the summary says only what the solve did."""

from __future__ import annotations

from gpuplan.models import Plan, PlanStatus, SolverReport
from gpuplan.planner.presentation.summary import not_optimal_because


def _plan(**terms: float) -> Plan:
    return Plan(status=PlanStatus.FEASIBLE, solver=SolverReport(name="cpsat", terms=terms))


def test_a_search_that_moved_nothing_does_not_say_it_moved_running_work() -> None:
    assert not_optimal_because(_plan(lns_steps=3.0, lns_moved=0.0)) == [
        "a large-neighbourhood search took 3 step(s), each a restricted model"
    ]
    assert not_optimal_because(_plan(lns_steps=3.0, lns_moved=2.0)) == [
        "a large-neighbourhood search took 3 step(s), each a restricted model, moving 2 running replica(s)"
    ]
    assert not_optimal_because(_plan(lns_steps=0.0)) == [
        "the solve was not proved optimal within its time limit"
    ]

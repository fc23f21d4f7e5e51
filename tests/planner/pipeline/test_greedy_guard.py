"""After predicted starts, the plan returned never leaves more waiting than the FGD plan would."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuplan.models import Cluster, PlanningInput, Policy, Workload, default_catalog
from gpuplan.models.plan import Assignment, GpuUse, PlanStatus, Unplaced
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.deadline import Deadline
from gpuplan.planner.pipeline.greedy_guard import KEPT_FGD, better_than_fgd
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.run_options import RunOptions
from tests._factories import node_data

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def _input() -> PlanningInput:
    """One node of two GPUs and two 1-GPU replicas: FGD places both."""
    cluster = Cluster.model_validate({"nodes": [node_data("n", "H100-80GB", 2)]})
    work = [
        Workload.model_validate({"id": w, "gpus": 1, "queued_since": NOW - timedelta(hours=1)})
        for w in ("a", "b")
    ]
    return PlanningInput(cluster=cluster, workloads=tuple(work), policy=Policy())


def _solved(placed: tuple[str, ...], changed: float) -> SolveResult:
    """A solver's plan after predicted starts that places ``placed`` (GPU 0, 1, ... in turn)."""
    return SolveResult(
        status=PlanStatus.FEASIBLE,
        solver="cpsat",
        assignments=tuple(
            Assignment(workload=w, replica=0, node="n", gpus=(GpuUse(index=i),)) for i, w in enumerate(placed)
        ),
        unplaced=tuple(
            Unplaced(workload=w, replica=0, code="RESERVED_FOR_EARLIER", reason="held back")
            for w in ("a", "b")
            if w not in placed
        ),
        best_bound=0.0,
        bound_source="knapsack",
        terms={"timeline_changed": changed},
    )


def _guard(result: SolveResult) -> SolveResult:
    inp = _input()
    problem = compile_problem(inp, default_catalog(), NOW)
    return better_than_fgd(
        inp, problem, result, default_catalog(), NOW, RunOptions(), None, Deadline.after(10)
    )


def test_a_plan_the_pass_left_worse_than_fgd_is_replaced_by_the_fgd_plan() -> None:
    kept = _guard(_solved(("a",), changed=1.0))
    assert {a.workload for a in kept.assignments} == {"a", "b"} and not kept.unplaced
    assert kept.terms[KEPT_FGD] == 1.0 and kept.status is PlanStatus.FEASIBLE
    # The solver's name and bound stay: the bound holds for every plan.
    assert kept.solver == "cpsat" and kept.best_bound == 0.0 and kept.bound_source == "knapsack"


def test_a_plan_the_pass_did_not_change_or_that_waits_no_more_is_kept() -> None:
    unchanged = _solved(("a",), changed=0.0)
    assert _guard(unchanged) is unchanged
    as_good = _solved(("a", "b"), changed=1.0)
    assert _guard(as_good) is as_good

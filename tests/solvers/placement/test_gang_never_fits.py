"""A gang that can never be placed whole, even on the empty cluster, is NEVER_FITS on every path, with
the nodes it needs and the nodes there are (issue 45, item 11a); a gang that would fit the empty cluster
but finds its room taken by running work is not.

Cluster: four nodes of 8 H100s (racks r0: h0, h1; r1: h2, h3) and one of 8 L4s, which an H100 gang may
not use. The counts in the expected sentences are read off that cluster by hand.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.rules.gang import never_fits
from gpuplan.planner.explain.reasons import explain_workload
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.planning import make_plan
from gpuplan.solvers.base import get_solver
from gpuplan.solvers.bounds import never_fitting
from gpuplan.solvers.run_options import RunOptions

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
CATALOG = default_catalog()
SOLVERS = ["cpsat", "greedy-fgd", "milp-highs"]
WHAT = "8 whole GPUs (H100-80GB), 1000 mCPU, 1000 MiB"
FIVE = f"gang 'big' needs 5 nodes that can each host {WHAT}, and the cluster has only 4, even if empty"
RACK = (
    f"gang 'big' needs 3 nodes that can each host {WHAT} inside one value of node label 'rack', and the "
    "cluster has at most 2 in one (rack=r0), even if empty"
)


def _node(name: str, model: str, rack: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "cpu_milli": 128000,
        "memory_mib": 1_000_000,
        "labels": {} if rack is None else {"rack": rack},
        "gpus": [{"index": i, "model": model} for i in range(8)],
    }


def _inp(*workloads: dict[str, Any]) -> PlanningInput:
    nodes = [
        _node("h0", "H100-80GB", "r0"),
        _node("h1", "H100-80GB", "r0"),
        _node("h2", "H100-80GB", "r1"),
        _node("h3", "H100-80GB", "r1"),
        _node("l0", "L4-24GB"),
    ]
    return PlanningInput.model_validate(
        {"cluster": {"nodes": nodes}, "workloads": list(workloads), "policy": {}}
    )


def _gang(replicas: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": "big", "team": "ml", "gpus": 8, "gpu_models": ["H100-80GB"], "replicas": replicas,
        "gang": True, "cpu_milli": 1000, "memory_mib": 1000, **extra,
    }  # fmt: skip


#: Three 8-GPU replicas on h0, h1, h2 that may not move: the H100 room left is h3 alone.
HELD = {
    "id": "held", "team": "ml", "gpus": 8, "gpu_models": ["H100-80GB"], "replicas": 3,
    "cpu_milli": 1000, "memory_mib": 1000, "disruptible": False, "started_at": "2026-11-29T08:00:00Z",
    "running_on": [{"node": n, "gpus": [{"index": i} for i in range(8)]} for n in ("h0", "h1", "h2")],
}  # fmt: skip


def test_the_rule_counts_the_room_of_each_value() -> None:
    assert never_fits(5, [4])
    assert not never_fits(4, [4])
    assert never_fits(3, [2, 2])
    assert not never_fits(3, [2, 3])
    assert never_fits(2, [])  # no node carries the domain label


@pytest.mark.parametrize(("gang", "reason"), [(_gang(5), FIVE), (_gang(3, gang_domain="rack"), RACK)])
@pytest.mark.parametrize("solver", SOLVERS)
def test_every_solver_says_a_gang_too_large_for_the_empty_cluster_never_fits(
    solver: str, gang: dict[str, Any], reason: str
) -> None:
    problem = compile_problem(_inp(gang), CATALOG, NOW)
    members = {("big", r) for r in range(gang["replicas"])}
    assert never_fitting(problem) == members
    result = get_solver(solver).solve(problem, RunOptions(time_limit_s=5.0, num_workers=1))
    assert not result.assignments
    assert {((u.workload, u.replica), u.code, u.reason) for u in result.unplaced} == {
        (key, "NEVER_FITS", reason) for key in members
    }


@pytest.mark.parametrize("solver", SOLVERS)
def test_the_plan_and_explain_give_the_same_never_fits_reason(solver: str) -> None:
    inp = _inp(_gang(5))
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=10.0)
    assert {(u.code, u.reason) for u in plan.unplaced} == {("NEVER_FITS", FIVE)}
    explained = explain_workload(inp, plan, "big", catalog=CATALOG, counterfactuals=0)
    assert [(e.replica, e.code, e.reason, e.resources) for e in explained] == [
        (r, "NEVER_FITS", FIVE, ("h0", "h1", "h2", "h3")) for r in range(5)
    ]


def test_explain_verifies_the_node_the_gang_lacks() -> None:
    inp = _inp(_gang(5))
    plan = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=10.0)
    [first, *_] = explain_workload(inp, plan, "big", catalog=CATALOG, counterfactuals=1, solver="greedy-fgd")
    assert [c.summary for c in first.counterfactuals] == ["add a node new-h0 with 8 H100-80GB GPUs"]


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_gang_that_fits_the_empty_cluster_but_not_the_running_work_is_not_never_fits(solver: str) -> None:
    inp = _inp(_gang(2), HELD)
    problem = compile_problem(inp, CATALOG, NOW)
    assert never_fitting(problem) == set()
    result = get_solver(solver).solve(problem, RunOptions(time_limit_s=5.0, num_workers=1))
    assert {u.code for u in result.unplaced} == {"GANG"}
    assert {(u.workload, u.replica) for u in result.unplaced} == {("big", 0), ("big", 1)}
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=10.0)
    assert {u.code for u in plan.unplaced} == {"GANG"}
    explained = explain_workload(inp, plan, "big", catalog=CATALOG, counterfactuals=0)
    assert {e.code for e in explained} == {"GANG"}

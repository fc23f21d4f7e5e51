"""The fleet engine as a back-end of its own (issue 45): ``fleet`` is a registry name like the others, on
the command line's ``--solver`` list, and its plans pass the validator (``make_plan`` validates every
plan) on the bundled example and on random small clusters, with and without running work."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import gpuplan
from gpuplan.models import PlanningInput, PlanStatus, default_catalog
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.validate import validate_plan
from gpuplan.solvers.base import get_solver, solver_names
from gpuplan.solvers.fleet.solver import Fleet
from gpuplan.solvers.run_options import RunOptions
from tests._paths import ROOT_DIR
from tests.solvers.test_solvers_valid import _plan_and_check, nodes, policies, running_states, workloads

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
EXAMPLES = ROOT_DIR / "data" / "examples"


def test_the_registry_lists_fleet() -> None:
    assert "fleet" in solver_names()
    backend = get_solver("fleet")
    assert isinstance(backend, Fleet)
    assert backend.name == "fleet"


def test_the_command_line_offers_every_registered_solver() -> None:
    """``gpuplan plan --solver`` takes its choices from the registry, ``fleet`` among them."""
    shown = subprocess.run(
        [sys.executable, "-m", "gpuplan", "plan", "--help"], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"--solver \{([^}]*)\}", shown)
    assert found is not None, shown
    assert found.group(1).split(",") == solver_names()


@pytest.mark.slow
def test_the_bundled_example_gets_a_validated_fleet_plan() -> None:
    inp = gpuplan.load(
        str(EXAMPLES / "cluster.yaml"), str(EXAMPLES / "workloads.yaml"), str(EXAMPLES / "policy.yaml")
    )
    plan = make_plan(inp, solver="fleet", now=NOW, time_limit_s=5, num_workers=1)
    assert plan.solver.name == "fleet"
    assert plan.status is PlanStatus.FEASIBLE
    assert plan.solver.best_bound is not None and plan.solver.best_bound <= (plan.solver.objective or 0)
    assert len(plan.assignments) + len(plan.unplaced) == sum(w.replicas for w in inp.workloads)
    assert plan.assignments
    assert not validate_plan(plan, inp)


def test_make_plan_with_fleet_returns_a_validated_plan() -> None:
    """Three nodes of two L40S, fractions of one size and whole GPUs: the configuration LP plans them all
    (``make_plan`` validates the plan), and the bound it reports holds (tight: nothing waits)."""
    cluster = [
        {
            "name": f"n{i}", "cpu_milli": 64000, "memory_mib": 262144,
            "gpus": [{"index": g, "model": "L40S-48GB"} for g in range(2)],
        }
        for i in range(3)
    ]  # fmt: skip
    work = [
        {"id": "half", "team": "a", "gpu_milli": 500, "replicas": 6, "cpu_milli": 1000, "memory_mib": 1000},
        {"id": "whole", "team": "a", "gpus": 1, "replicas": 2, "cpu_milli": 1000, "memory_mib": 1000},
    ]
    inp = PlanningInput.model_validate({"cluster": {"nodes": cluster}, "workloads": work, "policy": {}})
    plan = make_plan(inp, solver="fleet", now=NOW, time_limit_s=5, num_workers=1)
    assert plan.solver.name == "fleet"
    assert plan.status is PlanStatus.FEASIBLE
    assert len(plan.assignments) == 8 and not plan.unplaced
    assert plan.solver.objective == 0 and plan.solver.best_bound == 0
    assert not validate_plan(plan, inp)
    problem = compile_problem(inp, default_catalog(), NOW)
    result = get_solver("fleet").solve(problem, RunOptions(time_limit_s=5, num_workers=1))
    assert result.solver == "fleet" and not result.unplaced
    assert "fleet_node_classes" in result.terms or "kept_hint" in result.terms


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes(), workloads(), policies())
def test_fleet_plans_are_valid(
    cluster: list[dict[str, Any]], demand: list[dict[str, Any]], policy: dict[str, Any]
) -> None:
    pools = {n["pool"] for n in cluster}
    policy["isolation"] = [r for r in policy["isolation"] if r.get("pool") in (None, *pools)]
    _plan_and_check(cluster, demand, policy, "fleet")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(running_states())
def test_fleet_plans_with_running_work_are_valid(
    drawn: tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]],
) -> None:
    cluster, demand, policy = drawn
    _plan_and_check(cluster, demand, policy, "fleet")

"""The public entry point: ``gpuplan.load`` and ``gpuplan.plan``, as a library user calls them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import gpuplan
from gpuplan.planner.validation.validate import validate_plan

EXAMPLES = Path(__file__).resolve().parent.parent / "data" / "examples"


def test_load_and_plan_the_example_from_the_package_root() -> None:
    inp = gpuplan.load(EXAMPLES / "cluster.yaml", EXAMPLES / "workloads.yaml", EXAMPLES / "policy.yaml")
    assert isinstance(inp, gpuplan.PlanningInput)
    plan = gpuplan.plan(inp, solver="first-fit", time_limit_s=10)
    assert isinstance(plan, gpuplan.Plan)
    assert plan.status is gpuplan.PlanStatus.FEASIBLE
    replicas = sum(w.replicas for w in inp.workloads)
    assert len(plan.assignments) + len(plan.unplaced) == replicas
    assert validate_plan(plan, inp) == []


def test_load_without_a_policy_uses_the_default_one() -> None:
    inp = gpuplan.load(str(EXAMPLES / "cluster.yaml"), str(EXAMPLES / "workloads.yaml"))
    assert (
        inp.policy
        == gpuplan.PlanningInput.model_validate({"cluster": inp.cluster, "workloads": inp.workloads}).policy
    )


def test_running_work_that_over_commits_a_gpu_is_one_error_naming_the_file_and_field(tmp_path: Path) -> None:
    cluster = {
        "nodes": [{"name": "n1", "gpus": [{"index": 0, "model": "L40S-48GB"}], "cpu_milli": 64000,
                   "memory_mib": 262144}]
    }  # fmt: skip
    both = {"tier": "standard", "team": "t", "gpus": 1, "running_on": "n1:0"}
    workloads = [{"id": "a", **both}, {"id": "b", **both}]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "w.yaml").write_text(yaml.safe_dump({"workloads": workloads}))
    with pytest.raises(gpuplan.InputError) as err:
        gpuplan.load(tmp_path / "c.yaml", tmp_path / "w.yaml")
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'w.yaml'}: workload 'b' field running_on[0]")
    assert "\n" not in message


def test_an_unknown_attribute_of_the_package_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'plans'"):
        _ = gpuplan.plans

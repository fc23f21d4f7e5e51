"""The fleet-scale paths of the CP-SAT engine: candidate restriction with linear fragmentation costs,
and large-neighbourhood search for demand too large for one model. Plans are validated by make_plan."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpuplan.models import PlanningInput, PlanStatus
from gpuplan.planner.planning import make_plan
from gpuplan.solvers.base import CUT
from gpuplan.solvers.cpsat import candidates, pools, solver

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def fleet(nodes: int, workloads: list[dict[str, Any]]) -> PlanningInput:
    cluster = {
        "nodes": [
            {
                "name": f"n{i:03d}",
                "cpu_milli": 32000,
                "memory_mib": 262144,
                "gpus": [{"index": g, "model": "L40S-48GB"} for g in range(4)],
            }
            for i in range(nodes)
        ]
    }
    return PlanningInput.model_validate({"cluster": cluster, "workloads": workloads})


def test_restricted_model_places_a_batch_on_a_partly_used_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(candidates, "FULL_MODEL_PAIRS", 500)
    running = [
        {"id": f"r{i}", "gpu_milli": 600, "cpu_milli": 2000, "running_on": f"n{i:03d}:{i % 4}=600"}
        for i in range(40)
    ]
    batch = [{"id": f"w{i}", "gpu_milli": 100 * (1 + i % 7), "cpu_milli": 1000} for i in range(60)]
    plan = make_plan(fleet(40, running + batch), now=NOW, time_limit_s=20)
    assert plan.solver.model_size["restricted"] == 1
    assert plan.status in (PlanStatus.OPTIMAL, PlanStatus.FEASIBLE)
    assert len(plan.assignments) == 100  # everything fits; running work unchanged
    kept = {a.workload: a for a in plan.assignments if a.workload.startswith("r")}
    assert all(kept[f"r{i}"].node == f"n{i:03d}" for i in range(40))
    # The linearised model never returns a plan more fragmented (exact FGD measure) than FGD's own.
    fgd = make_plan(fleet(40, running + batch), solver="greedy-fgd", now=NOW)
    assert len(fgd.assignments) == 100
    assert plan.metrics["fragmented_gpus"] <= fgd.metrics["fragmented_gpus"] + 1e-3
    assert "fragmentation_exact_hint" in plan.solver.terms


@pytest.mark.slow
def test_fleet_engine_improves_on_fgd_and_never_loses_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(solver, "MONOLITHIC_REPLICAS", 50)
    work = [
        {"id": f"w{i}", "gpu_milli": (700, 450, 350, 550, 250)[i % 5], "cpu_milli": 1000} for i in range(90)
    ]
    inp = fleet(10, work)
    fgd = make_plan(inp, solver="greedy-fgd", now=NOW)
    plan = make_plan(inp, now=NOW, time_limit_s=8)
    assert plan.solver.model_size["node_classes"] == 1 and plan.solver.model_size["request_classes"] == 5
    assert plan.solver.terms["fleet_converged"] == 1
    assert len(plan.assignments) >= len(fgd.assignments)
    assert plan.solver.bound_source == "configuration LP"
    bound, objective = plan.solver.best_bound, plan.solver.objective
    assert bound is not None and objective is not None and bound <= objective


def _pooled_input() -> PlanningInput:
    """24 nodes of 4 GPUs, some running work, a gang, a team over quota and mixed demand."""
    running = [
        {"id": f"r{i}", "team": "a", "gpu_milli": 500, "cpu_milli": 1000, "running_on": f"n{i:03d}:0=500"}
        for i in range(0, 24, 3)
    ]
    gang = [{"id": "g", "team": "b", "gpus": 4, "replicas": 3, "gang": "g", "cpu_milli": 1000}]
    shapes: list[dict[str, Any]] = [{"gpu_milli": 700}, {"gpu_milli": 450}, {"gpus": 1}, {"gpu_milli": 300}]
    work = [
        {"id": f"w{i}", "team": ("a", "b", "c")[i % 3], "cpu_milli": 500, **shapes[i % 4]} for i in range(80)
    ]
    inp = fleet(24, running + gang + work)
    quota = {"quotas": [{"team": "a", "gpus": 12}]}
    return inp.model_copy(update={"policy": inp.policy.model_validate(quota)})


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_pool_split_gives_a_valid_merged_plan_within_quota(
    monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    monkeypatch.setattr(pools, "POOL_GPUS", 32)
    inp = _pooled_input()
    plan = make_plan(inp, now=NOW, time_limit_s=4, num_workers=workers)  # validated inside
    # A split plan is never called optimal (FALLBACK when every part ran out of time on a busy machine).
    assert plan.status in (PlanStatus.FEASIBLE, PlanStatus.FALLBACK)
    assert plan.solver.terms["parts"] == 3
    assert plan.solver.model_size["parts"] == 3
    bound, objective = plan.solver.best_bound, plan.solver.objective
    assert bound is not None and objective is not None and bound <= objective
    assert len([a for a in plan.assignments if a.workload == "g"]) in (0, 3)
    team = {w.id: w.team for w in inp.workloads}
    team_a = sum(
        1000 if g.milli is None else g.milli
        for a in plan.assignments
        for g in a.gpus
        if team[a.workload] == "a"
    )
    assert 10_000 <= team_a <= 12_000  # the split quota is used, never exceeded
    fgd = make_plan(inp, solver="greedy-fgd", now=NOW)
    assert len(plan.assignments) >= len(fgd.assignments) - 2


@pytest.mark.slow
def test_pool_split_is_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pools, "POOL_GPUS", 32)
    monkeypatch.setattr(solver, "MIN_PART_S", 0.5)
    inp = _pooled_input()
    a, b = (make_plan(inp, now=NOW, time_limit_s=6, num_workers=1, deterministic=True) for _ in range(2))
    # Same plan, unless the wall clock cut a deterministic solve on a busy machine (then it says so).
    cut = CUT in a.solver.terms or CUT in b.solver.terms
    assert a.assignments == b.assignments or cut


def _large_waiting_list(models: list[str]) -> PlanningInput:
    """Six 4-GPU nodes (of ``models`` in turn) and 30 waiting replicas of mixed shares."""
    inp = fleet(
        6, [{"id": f"w{i}", "gpu_milli": (700, 300, 500)[i % 3], "cpu_milli": 500} for i in range(30)]
    )
    nodes = [
        n.model_copy(
            update={"gpus": tuple(g.model_copy(update={"model": models[i % len(models)]}) for g in n.gpus)}
        )
        for i, n in enumerate(inp.cluster.nodes)
    ]
    return inp.model_copy(update={"cluster": inp.cluster.model_copy(update={"nodes": tuple(nodes)})})


@pytest.mark.parametrize(
    ("models", "parts"),
    [
        # Six alike nodes form one class, fewer than the two nodes a part would hold: planned whole.
        (["L40S-48GB"], 1),
        # Three kinds of node in pairs: three classes, more than two: split into three parts.
        (["L40S-48GB", "L4-24GB", "A10-24GB"], 3),
    ],
)
def test_a_large_fleet_is_split_only_where_its_node_classes_grow(
    monkeypatch: pytest.MonkeyPatch, models: list[str], parts: int
) -> None:
    monkeypatch.setattr(solver, "MONOLITHIC_REPLICAS", 10)
    monkeypatch.setattr(pools, "POOL_GPUS", 8)  # 24 GPUs: three parts by size
    monkeypatch.setattr(solver, "MIN_PART_S", 0.5)
    plan = make_plan(_large_waiting_list(models), now=NOW, time_limit_s=6, num_workers=1)
    assert plan.solver.terms.get("parts", 1) == parts
    assert plan.solver.bound_source == "configuration LP"  # the whole fleet's, either way
    bound, objective = plan.solver.best_bound, plan.solver.objective
    assert bound is not None and objective is not None and bound <= objective


@pytest.mark.slow
def test_parts_given_less_than_cp_sat_needs_get_the_fgd_plan_labelled_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A split fleet whose parts' share of the limit is below what CP-SAT needs (here: any share) gets each
    part's FGD plan, and says so: every part a fallback, the merged plan ``FALLBACK``, still valid and
    within quota, placing as many replicas as FGD on the whole fleet less what the split costs."""
    monkeypatch.setattr(pools, "POOL_GPUS", 32)
    monkeypatch.setattr(solver, "MIN_PART_S", 1000.0)
    inp = _pooled_input()
    plan = make_plan(inp, now=NOW, time_limit_s=4, num_workers=1)  # validated inside
    assert plan.solver.terms["parts"] == 3
    assert plan.solver.terms["parts_fallback"] == 3
    assert plan.status is PlanStatus.FALLBACK or "kept_fgd_after_timeline" in plan.solver.terms
    fgd = make_plan(inp, solver="greedy-fgd", now=NOW)
    assert len(plan.assignments) >= len(fgd.assignments) - 4

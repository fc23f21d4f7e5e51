"""Fair share in the objective: among equal tiers the team below its share is served first, by every
exact solver and the greedy; a standing never lifts a lower tier over a higher one; and a policy without
``fair_share`` plans as before. Expectations computed by hand (queue penalty: tier weight x demand x
(8 + hours waited) x the team's factor in hundredths)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.planning import make_plan
from gpuplan.solvers.formulation.objective import queue_penalty

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
SOLVERS = ["cpsat", "milp-highs", "milp-cbc", "greedy-fgd"]
ONE_GPU = [{"name": "n", "cpu_milli": 64000, "memory_mib": 65536, "gpus": [{"index": 0, "model": "L4-24GB"}]}]


def _inp(workloads: list[dict[str, Any]], policy: dict[str, Any], nodes: Any = None) -> PlanningInput:
    return PlanningInput.model_validate(
        {"cluster": {"nodes": nodes or ONE_GPU}, "workloads": workloads, "policy": policy}
    )


def _two(first: str, tiers: tuple[str, str] = ("standard", "standard")) -> list[dict[str, Any]]:
    """One one-GPU replica of team a and one of team b (``first`` listed first), queued now."""
    ws = [{"id": f"{t}-job", "team": t, "tier": tier, "gpus": 1} for t, tier in zip("ab", tiers, strict=True)]
    return ws if first == "a" else ws[::-1]


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("over", ["a", "b"])
@pytest.mark.parametrize("first", ["a", "b"])
def test_the_team_below_its_share_is_served_first(solver: str, over: str, first: str) -> None:
    """Equal tiers, room for one: the team that used 10 GPU-hours (standing 2^-2, factor 1.25) waits,
    3 x 100 x 8 x 125, whichever team it is and whichever comes first in the file."""
    inp = _inp(_two(first), {"fair_share": {"usage": {over: 10}}})
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=5, deterministic=True, num_workers=1)
    assert [u.workload for u in plan.unplaced] == [f"{over}-job"]
    assert plan.solver.objective == 3 * 100 * 8 * 125
    assert plan.metrics[f"fair_share.{over}.standing"] == 0.25
    assert plan.metrics[f"fair_share.{over}.factor"] == 1.25


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_higher_tier_still_wins_over_an_under_share_lower_tier(solver: str) -> None:
    """Team a (latency-sensitive) used everything, team b (standard) nothing, factors 1 to 2.9 (the
    widest the default weights 10 and 3 allow): a runs, b waits, 3 x 100 x 8 x 290."""
    policy = {"fair_share": {"usage": {"a": 1000}, "min_factor": 1, "max_factor": 2.9}}
    inp = _inp(_two("b", ("latency-sensitive", "standard")), policy)
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=5, deterministic=True, num_workers=1)
    assert [u.workload for u in plan.unplaced] == ["b-job"]
    assert plan.solver.objective == 3 * 100 * 8 * 290


@pytest.mark.parametrize(
    ("high", "low", "factors"),
    [("latency-sensitive", "standard", (1, 2.9)), ("standard", "background", (1, 2.9)),
     ("standard", "background", (0.5, 1.4))],
)  # fmt: skip
@pytest.mark.parametrize("kind", [{"gpus": 2}, {"gpu_milli": 250}, {"mig_profile": "1g.6gb"}])
def test_a_standing_never_lifts_a_lower_tier_over_a_higher_one(
    high: str, low: str, factors: tuple[float, float], kind: dict[str, Any]
) -> None:
    """Same shape, same wait: the higher tier's replica of the most over-share team weighs more in the
    queue term than the lower tier's of a team that used nothing (the widest factor range allowed)."""
    workloads = [
        {
            "id": "hi",
            "team": "a",
            "tier": high,
            **kind,
            "queued_since": (NOW - timedelta(hours=5)).isoformat(),
        },
        {
            "id": "lo",
            "team": "b",
            "tier": low,
            **kind,
            "queued_since": (NOW - timedelta(hours=5)).isoformat(),
        },
    ]
    fair = {"usage": {"a": 1e6}, "shares": {"a": 0.001}, "min_factor": factors[0], "max_factor": factors[1]}
    problem = compile_problem(_inp(workloads, {"fair_share": fair}), default_catalog(), NOW)
    hi, lo = problem.requests
    assert problem.fair_units("a") == round(100 * factors[0]) and problem.fair_units("b") == round(
        100 * factors[1]
    )
    assert queue_penalty(hi, problem) > queue_penalty(lo, problem)
    assert problem.queue_order()[0].workload == "hi"


def test_the_queue_order_serves_the_better_standing_first_among_equals() -> None:
    problem = compile_problem(_inp(_two("a"), {"fair_share": {"usage": {"a": 1}}}), default_catalog(), NOW)
    assert [r.team for r in problem.queue_order()] == ["b", "a"]


#: Three nodes of one and two GPUs, mixed teams, tiers and waits: more asked than fits.
FLEET = [
    {"name": f"n{i}", "cpu_milli": 64000, "memory_mib": 65536,
     "gpus": [{"index": g, "model": "L4-24GB"} for g in range(1 + i % 2)]}
    for i in range(3)
]  # fmt: skip
DEMAND = [
    {"id": f"w{i}", "team": "abc"[i % 3], "tier": ["standard", "background", "latency-sensitive"][i % 3],
     "gpus": 1 + i % 2, "replicas": 1 + i % 2, "queued_since": (NOW - timedelta(hours=3 * i)).isoformat()}
    for i in range(5)
]  # fmt: skip


@pytest.mark.parametrize("solver", SOLVERS)
def test_without_fair_share_the_penalty_and_the_plans_are_as_before(solver: str) -> None:
    """No ``fair_share``: every replica's penalty is the documented weight x demand x (8 + hours), and
    a fair share with one factor for everybody (1 to 1) gives the same plan at 100 times the queue term."""
    inp = _inp(DEMAND, {}, FLEET)
    problem = compile_problem(inp, default_catalog(), NOW)
    weights = {"latency-sensitive": 10, "standard": 3, "background": 1}
    for r in problem.requests:
        assert problem.fair_units(r.team) == 1
        assert queue_penalty(r, problem) == weights[r.tier] * 100 * r.shapes[0].gpus * (8 + r.wait_s // 3600)
    flat = _inp(DEMAND, {"fair_share": {"usage": {"a": 50}, "min_factor": 1, "max_factor": 1}}, FLEET)
    plans = [
        make_plan(x, solver=solver, now=NOW, time_limit_s=5, deterministic=True, num_workers=1)
        for x in (inp, flat)
    ]
    assert plans[0].assignments == plans[1].assignments
    assert plans[0].solver.objective is not None
    assert plans[1].solver.objective == 100 * plans[0].solver.objective
    assert not any(k.startswith("fair_share.") for k in plans[0].metrics)

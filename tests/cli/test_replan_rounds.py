"""``replan --rounds N`` widens the disruption budget N times and keeps every other rule of it."""

from __future__ import annotations

from gpuplan.cli.rounds import _with_rounds
from gpuplan.models import PlanningInput


def test_rounds_scale_the_budget_and_keep_its_other_rules() -> None:
    disruption = {
        "max_moves_per_round": 2,
        "max_preemptions_per_round": 1,
        "max_moves_per_team": 1,
        "min_runtime_s": 600,
        "preempt_latency_sensitive": True,
        "preempt_only_for_higher_tier": False,
    }
    inp = PlanningInput.model_validate(
        {"cluster": {"nodes": []}, "workloads": [], "policy": {"disruption": disruption}}
    )
    widened = _with_rounds(inp, 3).policy.disruption
    assert (widened.max_moves_per_round, widened.max_preemptions_per_round, widened.max_moves_per_team) == (
        6,
        3,
        3,
    )
    assert widened.min_runtime_s == 600
    assert widened.preempt_latency_sensitive is True
    assert widened.preempt_only_for_higher_tier is False
    assert _with_rounds(inp, 1) is inp

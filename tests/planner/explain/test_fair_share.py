"""``FAIR_SHARE``: a replica waits because work of its tier and priority from a team with a better
fair-share standing took the room, and only then; the summary's fair-share table."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpuplan.models.inputs import PlanningInput
from gpuplan.planner.explain.reasons import explain_workload
from gpuplan.planner.planning import make_plan
from gpuplan.planner.presentation import summary

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
ONE_GPU = [{"name": "n", "cpu_milli": 64000, "memory_mib": 65536, "gpus": [{"index": 0, "model": "L4-24GB"}]}]


def _inp(a: dict[str, Any], b: dict[str, Any], policy: dict[str, Any]) -> PlanningInput:
    workloads = [{"id": "a-job", "team": "a", "gpus": 1, **a}, {"id": "b-job", "team": "b", "gpus": 1, **b}]
    return PlanningInput.model_validate(
        {"cluster": {"nodes": ONE_GPU}, "workloads": workloads, "policy": policy}
    )


def _waiting(inp: PlanningInput) -> tuple[str, str, str]:
    plan = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=3)
    (u,) = plan.unplaced
    (e,) = explain_workload(inp, plan, u.workload, counterfactuals=0)
    assert (e.code, e.reason) == (u.code, u.reason)  # the plan and explain agree
    return u.workload, u.code, u.reason


def test_a_team_over_its_share_waits_for_fair_share() -> None:
    """Team b used 30 GPU-hours and a 10 (shares 1:1): b stands at 2^-(0.75 / 0.5), a at 2^-(0.25 / 0.5)."""
    workload, code, reason = _waiting(_inp({}, {}, {"fair_share": {"usage": {"a": 10, "b": 30}}}))
    assert (workload, code) == ("b-job", "FAIR_SHARE")
    assert "team b is over its fair share (standing 0.35: 30 decayed GPU-hours, 75% of the usage" in reason
    assert "against a 50% share), below team a's standing 0.71: 10 decayed GPU-hours" in reason
    assert "placed in this plan: a-job" in reason


@pytest.mark.parametrize(
    ("a", "b", "policy"),
    [
        # A higher tier took the room, from the team with the worse standing.
        ({"tier": "latency-sensitive"}, {}, {"fair_share": {"usage": {"a": 30}}}),
        # A higher priority of the same tier, from the team with the better standing.
        ({"priority": 5}, {}, {"fair_share": {"usage": {"b": 30}}}),
        # No fair-share policy: the names decide between equals.
        ({}, {}, {}),
    ],
)
def test_fair_share_is_named_only_when_it_is_the_cause(
    a: dict[str, Any], b: dict[str, Any], policy: dict[str, Any]
) -> None:
    assert _waiting(_inp(a, b, policy))[:2] == ("b-job", "OUTRANKED")


def test_the_summary_prints_the_standings_only_under_a_fair_share_policy() -> None:
    inp = _inp({}, {}, {"fair_share": {"usage": {"b": 30}, "half_life_h": 24}})
    plan = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=3)
    text = summary.render(plan, inp)
    assert "fair share (usage half-life 24 h)" in text
    lines = text.splitlines()
    start = lines.index("fair share (usage half-life 24 h)")
    assert lines[start + 1].split() == [
        "team",
        "share",
        "usage",
        "GPU-h",
        "of",
        "usage",
        "standing",
        "factor",
    ]
    assert lines[start + 2].split() == ["a", "50.0%", "0.0", "0.0%", "1.00", "2.00"]
    assert lines[start + 3].split() == ["b", "50.0%", "30.0", "100.0%", "0.25", "1.25"]
    plain = _inp({}, {}, {})
    assert "fair share" not in summary.render(
        make_plan(plain, solver="greedy-fgd", now=NOW, time_limit_s=3), plain
    )

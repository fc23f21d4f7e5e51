"""The fair-share rule (:mod:`gpuplan.models.rules.fairness`) and its policy section, against values
computed by hand."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.policy import FairShare, Policy
from gpuplan.models.rules.fairness import decayed_gpu_hours, input_standings, standings

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
LN2 = math.log(2)


def _ago(hours: float) -> datetime:
    return NOW - timedelta(hours=hours)


@pytest.mark.parametrize(
    ("gpus", "start_h", "end_h", "half_life_h", "expected"),
    [
        # 2 GPUs from 2 h to 1 h ago, half-life 1 h: 2 x (1 / ln 2) x (1/2 - 1/4).
        (2, 2, 1, 1, 2 * 0.25 / LN2),
        # 1 GPU for the last half-life: (h / ln 2) x (1 - 1/2), h = 24.
        (1, 24, 0, 24, 24 * 0.5 / LN2),
        # Held for ever up to now: h / ln 2 GPU-hours per GPU, the most a decayed usage reaches.
        (1, 10_000, 0, 10, 10 / LN2),
        # Half a GPU for a week, half-life a week, ending a week ago: 0.5 x (168 / ln 2) x (1/2 - 1/4).
        (0.5, 336, 168, 168, 0.5 * 168 * 0.25 / LN2),
        # An interval that ends after now is cut at now; one that has not started counts nothing.
        (1, 1, -5, 1, 0.5 / LN2),
        (1, -1, -2, 1, 0.0),
    ],
)
def test_usage_decays_with_the_half_life(
    gpus: float, start_h: float, end_h: float, half_life_h: float, expected: float
) -> None:
    assert decayed_gpu_hours(gpus, _ago(start_h), _ago(end_h), NOW, half_life_h) == pytest.approx(expected)


def test_one_half_life_later_the_same_usage_counts_half() -> None:
    first = decayed_gpu_hours(4, _ago(10), _ago(6), NOW, 5)
    later = decayed_gpu_hours(4, _ago(10), _ago(6), NOW + timedelta(hours=5), 5)
    assert later == pytest.approx(first / 2)


def test_standings_are_slurms_fair_share_factor() -> None:
    """Shares 3:1 and usage 30:10: each team is exactly at its share (U / S = 1), standing 2^-1; with no
    usage a team stands at 1; the factor of the queue penalty is min + (max - min) x standing."""
    fair = FairShare(shares={"a": 3}, usage={"a": 30, "b": 10}, min_factor=1, max_factor=3)
    got = standings(fair, ["a", "b"], fair.usage)
    assert got["a"].share == pytest.approx(0.75) and got["b"].share == pytest.approx(0.25)
    assert got["a"].factor == pytest.approx(0.5) and got["b"].factor == pytest.approx(0.5)
    assert got["a"].units == got["b"].units == 200
    # Team c has a share and no usage: shares 3:1:1, a used 3/4 of everything against a 3/5 share.
    got = standings(fair.model_copy(update={"shares": {"a": 3, "c": 1}}), ["a", "b"], fair.usage)
    assert got["c"].factor == 1.0 and got["c"].units == 300
    assert got["a"].factor == pytest.approx(2 ** (-0.75 / 0.6))
    assert got["a"].over_share and not got["c"].over_share
    # Nobody used anything: everybody stands at 1.
    assert {s.factor for s in standings(FairShare(), ["a", "b"], {}).values()} == {1.0}


def test_usage_adds_the_given_the_history_and_running_work() -> None:
    """Team a: 5 GPU-hours given, 2 from the history, and one GPU running for 3 h, counted from
    ``history_until`` (1 h ago) only, half-life 1 h: (1 / ln 2) x (1 - 1/2). Team b's half GPU runs
    since 2 h ago but counts from 1 h ago too: 0.5 x (1 / ln 2) x 0.5."""
    data = {
        "cluster": {
            "nodes": [
                {"name": "n", "cpu_milli": 64000, "memory_mib": 65536,
                 "gpus": [{"index": 0, "model": "L4-24GB"}, {"index": 1, "model": "L4-24GB"}]}
            ]
        },
        "workloads": [
            {"id": "ra", "team": "a", "gpus": 1, "started_at": _ago(3).isoformat(),
             "running_on": [{"node": "n", "gpus": [{"index": 0}]}]},
            {"id": "rb", "team": "b", "gpu_milli": 500, "started_at": _ago(2).isoformat(),
             "running_on": [{"node": "n", "gpus": [{"index": 1, "milli": 500}]}]},
        ],
        "policy": {
            "fair_share": {"half_life_h": 1, "usage": {"a": 5}, "history_usage": {"a": 2},
                           "history_until": _ago(1).isoformat()}
        },
    }  # fmt: skip
    got = input_standings(PlanningInput.model_validate(data), default_catalog(), NOW)
    assert got["a"].usage_gpu_hours == pytest.approx(7 + 0.5 / LN2)
    assert got["b"].usage_gpu_hours == pytest.approx(0.25 / LN2)


def test_no_fair_share_no_standings_and_the_same_digest() -> None:
    """A policy without ``fair_share`` dumps as before (its digest, hence its plans, unchanged)."""
    assert "fair_share" not in Policy().model_dump()
    assert Policy.model_validate({"fair_share": {}}).model_dump()["fair_share"]["half_life_h"] == 168


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        # Standard (3) over background (1): a factor range wider than 3 would reorder them.
        ({"fair_share": {"min_factor": 1, "max_factor": 3}}, "weight 1 over one of weight 3"),
        ({"tiers": [{"name": "x", "weight": 5}, {"name": "y", "weight": 4}],
          "fair_share": {"max_factor": 1.3}}, "below 1.25"),
        ({"tiers": [{"name": "x", "weight": 1}, {"name": "y", "weight": 0}], "fair_share": {}},
         "weight 0 and 1"),
        ({"fair_share": {"min_factor": 2, "max_factor": 1}}, "below min_factor"),
        ({"fair_share": {"shares": {"a": 0}}}, "share 0"),
        ({"fair_share": {"half_life_h": 0}}, "greater than 0"),
    ],
)  # fmt: skip
def test_a_policy_that_would_let_a_standing_reorder_tiers_is_refused(
    policy: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        Policy.model_validate(policy)

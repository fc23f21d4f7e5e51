"""Fair-share usage read from the plan history: each stored plan's placements held until the next plan,
decayed to the planning time; ``gpuplan replan`` plans with it."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.cli import main
from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.planner.planning import make_plan
from gpuplan.planner.store.history import PlanHistory

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
LN2 = math.log(2)
CLUSTER = {
    "nodes": [
        {"name": "n", "cpu_milli": 64000, "memory_mib": 65536,
         "gpus": [{"index": 0, "model": "L4-24GB"}, {"index": 1, "model": "L4-24GB"}]}
    ]
}  # fmt: skip
#: Team a asks for one GPU, team b for half of one: both fit.
WORK: list[dict[str, Any]] = [
    {"id": "a-job", "team": "a", "gpus": 1},
    {"id": "b-job", "team": "b", "gpu_milli": 500},
]
FAIR = {"fair_share": {"half_life_h": 1}}


def _inp() -> PlanningInput:
    return PlanningInput.model_validate({"cluster": CLUSTER, "workloads": WORK, "policy": FAIR})


def test_the_history_counts_each_plan_until_the_next(tmp_path: Path) -> None:
    """Plans made 3 h and 1 h ago both place a's GPU and b's half: the first counts from 3 h to 1 h ago,
    half-life 1 h: (1 / ln 2) x (2^-1 - 2^-3) for a, half of it for b; the latest plan counts nothing
    (what it started runs now, counted from the workloads from its time on)."""
    history = PlanHistory(str(tmp_path / "plans.db"))
    for hours in (3, 1):
        plan = make_plan(_inp(), solver="greedy-fgd", now=NOW - timedelta(hours=hours), time_limit_s=2)
        assert len(plan.assignments) == 2
        history.save(plan, _inp())
    fair = history.with_usage(_inp(), NOW, default_catalog()).policy.fair_share
    assert fair is not None
    assert fair.history_usage["a"] == pytest.approx(0.375 / LN2)
    assert fair.history_usage["b"] == pytest.approx(0.1875 / LN2)
    assert fair.history_until == NOW - timedelta(hours=1)
    # Without a fair-share policy the input is left as it is.
    plain = _inp().model_copy(update={"policy": _inp().policy.model_copy(update={"fair_share": None})})
    assert history.with_usage(plain, NOW, default_catalog()) is plain


def test_replan_plans_with_the_history_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Three replans an hour apart, of a state where nothing runs yet: the third one's stored policy has
    the first plan's hour, from 2 h to 1 h ago ((1 / ln 2) x (2^-1 - 2^-2) for a's GPU), the history up to
    the second plan, and its summary prints the fair-share table."""
    for name, data in (("cluster", CLUSTER), ("workloads", {"workloads": WORK}), ("policy", FAIR)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
    db = str(tmp_path / "plans.db")
    args = ["replan", "--db", db, "--time-limit", "3", "-q", "--solver", "greedy-fgd"]
    args += [f"--{n}={tmp_path / f'{n}.yaml'}" for n in ("cluster", "workloads", "policy")]
    for hours in (2, 1, 0):
        assert main([*args, "--now", (NOW - timedelta(hours=hours)).isoformat()]) == 0
    out = capsys.readouterr().out
    assert "fair share (usage half-life 1 h)" in out
    latest = PlanHistory(db).latest()
    assert latest is not None and latest.inputs.policy.fair_share is not None
    assert latest.inputs.policy.fair_share.history_usage["a"] == pytest.approx(0.25 / LN2)
    assert latest.inputs.policy.fair_share.history_until == NOW - timedelta(hours=1)
    assert latest.plan.metrics["fair_share.a.usage_gpu_hours"] == pytest.approx(0.25 / LN2, abs=1e-6)

"""``/metrics`` bounded: at most ``MAX_TEAMS`` teams by name in the team gauges (the rest summed under
``(other)``), and an optional metrics key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuplan.api import create_app
from gpuplan.api.metrics import MAX_TEAMS, OTHER, FleetGauges, bounded
from gpuplan.api.settings import Settings
from gpuplan.planner.presentation.fleet_metrics import FleetMetrics
from tests._api import KEYS, PLANNER, auth

METRICS_KEY = "metrics-key-0123456789abcdef"


def test_few_teams_are_shown_as_they_are() -> None:
    assert bounded({"a": 1.0, "b": 2.0}) == {"a": 1.0, "b": 2.0}


def test_the_largest_teams_are_named_and_the_rest_summed() -> None:
    values = {f"t{i:02d}": float(i) for i in range(1, 26)}  # t01 = 1 ... t25 = 25
    shown = bounded(values)
    assert set(shown) == {f"t{i:02d}" for i in range(6, 26)} | {OTHER}
    assert shown[OTHER] == 1 + 2 + 3 + 4 + 5


def _series(gauges: FleetGauges) -> dict[str, dict[tuple[str, ...], float]]:
    """Each gauge's samples by their label values, in label-name order (``team`` before ``tier``)."""
    registry = CollectorRegistry()
    registry.register(gauges)
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(s.labels[k] for k in sorted(s.labels))] = s.value
    return out


def test_a_plan_of_many_teams_gives_bounded_series() -> None:
    teams = [f"team-{i:04d}" for i in range(2000)]
    gauges = FleetGauges()
    gauges.latest = FleetMetrics(
        allocated_gpu_ratio=0.5,
        fragmentation_rate=None,
        pools={},
        waiting={("standard", t): 1 for t in teams} | {("background", teams[0]): 100},
        team_gpus=dict.fromkeys(teams, 1.0),
        team_quota_gpus=dict.fromkeys(teams, 2.0),
        predicted_wait_p95_s={},
    )
    series = _series(gauges)
    for name in ("gpuplan_quota_used_gpus", "gpuplan_quota_limit_gpus"):
        assert len(series[name]) == MAX_TEAMS + 1
    used = series["gpuplan_quota_used_gpus"]
    assert used[(OTHER,)] == 2000 - MAX_TEAMS and sum(used.values()) == 2000
    assert sum(series["gpuplan_quota_limit_gpus"].values()) == 4000
    waiting = series["gpuplan_waiting_replicas"]
    assert sum(waiting.values()) == 2000 + 100
    assert waiting[(teams[0], "background")] == 100  # the team that waits most keeps its name
    assert len({team for team, _ in waiting}) == MAX_TEAMS + 1


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database=str(tmp_path / "gpuplan.db"), api_keys=KEYS, solver_processes=0, metrics_key=METRICS_KEY
    )
    with TestClient(create_app(settings)) as client:
        yield client


def test_a_metrics_key_guards_metrics(keyed: TestClient) -> None:
    assert keyed.get("/metrics").status_code == 401
    assert keyed.get("/metrics", headers=auth(PLANNER)).status_code == 401
    r = keyed.get("/metrics", headers=auth(METRICS_KEY))
    assert r.status_code == 200 and "gpuplan_queue_depth" in r.text
    assert keyed.get("/metrics", headers={"X-API-Key": METRICS_KEY}).status_code == 200
    assert keyed.get("/healthz").status_code == 200

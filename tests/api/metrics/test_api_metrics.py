"""The fleet gauges of ``/metrics`` on a real ``gpuplan serve``: after a plan they carry that plan's figures
(recomputed here from the plan JSON, without the planner's code), they come back from the store after a
restart, and the Grafana dashboard in ``docs/`` queries only metrics the server exposes."""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests._api import NOW, PLANNER, ROOT, Server, wait_status
from tests._factories import two_pools

#: The whole module runs a real ``gpuplan serve``, restarted: slow.
pytestmark = pytest.mark.slow

#: Share of an H100 a MIG profile's compute slices make (of 7).
MIG_SHARE = {"3g.40gb": 3 / 7, "1g.10gb": 1 / 7}
DASHBOARD = ROOT / "docs" / "grafana-gpuplan.json"
#: Metric name -> sorted labels -> value.
Gauges = dict[str, dict[tuple[tuple[str, str], ...], float]]


def _body(extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Two pools (four L40S; one H100 in MIG mode), two teams with a quota on one of them, and more work
    than fits, so that replicas of several tiers and teams wait."""
    cluster = two_pools()
    workloads = [
        {"id": "train", "team": "ml", "gpus": 2, "duration_s": 3600},
        {"id": "train-big", "team": "ml", "gpus": 4, "tier": "background", "duration_s": 7200},
        {
            "id": "serve",
            "team": "web",
            "tier": "latency-sensitive",
            "gpus": 1,
            "replicas": 2,
            "duration_s": 600,
        },
        {"id": "nb", "team": "web", "tier": "background", "gpu_milli": 500, "replicas": 3, "duration_s": 900},
        {"id": "slice", "team": "ml", "mig_profile": "3g.40gb", "replicas": 3, "duration_s": 1800},
        *(extra or []),
    ]
    policy = {"teams": ["ml", "web"], "quotas": [{"team": "ml", "gpus": 3.5}]}
    return {
        "cluster": cluster,
        "workloads": workloads,
        "policy": policy,
        "options": {"solver": "cpsat", "time_limit_s": 2.0, "now": NOW},
    }


def _scrape(server: Server) -> Gauges:
    """The samples of every metric the server exposes."""
    out: Gauges = defaultdict(dict)
    for family in text_string_to_metric_families(httpx.get(f"{server.url}/metrics").text):
        for s in family.samples:
            out[s.name][tuple(sorted(s.labels.items()))] = s.value
    return out


def _plan(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    """Submit ``body``, wait for the plan and return it."""
    with server.client(PLANNER) as c:
        job_id = c.post("/v1/plans", json=body).json()["id"]
        assert wait_status(c, job_id, {"done", "failed"})["status"] == "done"
        plan: dict[str, Any] = c.get(f"/v1/plans/{job_id}/result").json()["plan"]
    return plan


def _p95(values: list[float]) -> float:
    return sorted(values)[math.ceil(0.95 * len(values)) - 1] if values else 0.0


def _expected(
    body: dict[str, Any], plan: dict[str, Any]
) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The fleet gauges recomputed from the body and the plan JSON."""
    pool_of = {n["name"]: n["pool"] for n in body["cluster"]["nodes"]}
    gpus: dict[str, int] = defaultdict(int)
    for n in body["cluster"]["nodes"]:
        gpus[n["pool"]] += len(n["gpus"])
    team = {w["id"]: w["team"] for w in body["workloads"]}
    tier = {w["id"]: w.get("tier", "standard") for w in body["workloads"]}
    used: dict[str, float] = defaultdict(float)
    by_team: dict[str, float] = defaultdict(float)
    for a in plan["assignments"]:
        share = sum(
            MIG_SHARE[g["mig_profile"]] if g.get("mig_profile") else (g.get("milli") or 1000) / 1000
            for g in a["gpus"]
        )
        used[pool_of[a["node"]]] += share
        by_team[team[a["workload"]]] += share
    waiting = {(tier[w], team[w]): 0.0 for w in team}
    waits: dict[str, list[float]] = defaultdict(list)
    now = datetime.fromisoformat(plan["provenance"]["now"])
    for u in plan["unplaced"]:
        waiting[tier[u["workload"]], team[u["workload"]]] += 1
        start = u.get("predicted_start")
        wait = math.inf if start is None else max(0.0, (datetime.fromisoformat(start) - now).total_seconds())
        waits[tier[u["workload"]]].append(wait)
    return {
        "gpuplan_allocated_gpu_ratio": {(): sum(used.values()) / sum(gpus.values())},
        "gpuplan_pool_allocated_gpu_ratio": {(("pool", p),): used[p] / gpus[p] for p in gpus},
        "gpuplan_pool_gpus": {(("pool", p),): float(n) for p, n in gpus.items()},
        "gpuplan_fragmentation_rate": {(): plan["metrics"]["fragmentation_rate"]},
        "gpuplan_waiting_replicas": {(("team", tm), ("tier", tr)): n for (tr, tm), n in waiting.items()},
        "gpuplan_quota_used_gpus": {(("team", t),): by_team[t] for t in set(team.values())},
        "gpuplan_quota_limit_gpus": {(("team", q["team"]),): q["gpus"] for q in body["policy"]["quotas"]},
        "gpuplan_predicted_wait_p95_seconds": {
            (("tier", t),): _p95(waits[t]) for t in ("latency-sensitive", "standard", "background")
        },
    }


def _assert_gauges(server: Server, body: dict[str, Any], plan: dict[str, Any]) -> None:
    scraped = _scrape(server)
    for name, samples in _expected(body, plan).items():
        assert scraped[name].keys() == samples.keys(), name
        for labels, value in samples.items():
            assert scraped[name][labels] == pytest.approx(value, abs=1e-4), (name, labels)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of this module's own (its latest plan is the one the test made)."""
    root = tmp_path_factory.mktemp("metrics")
    running = Server(str(root / "gpuplan.db"), root / "serve.log")
    yield running
    running.stop()


def test_no_fleet_gauges_before_the_first_plan(server: Server) -> None:
    scraped = _scrape(server)
    assert "gpuplan_allocated_gpu_ratio" not in scraped and "gpuplan_waiting_replicas" not in scraped


def test_the_grafana_dashboard_queries_metrics_the_server_exposes(server: Server) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    queried = {m for e in exprs for m in re.findall(r"\bgpuplan_[a-z0-9_]+", e)}
    assert {"gpuplan_allocated_gpu_ratio", "gpuplan_waiting_replicas", "gpuplan_quota_limit_gpus"} <= queried
    _plan(server, _body())
    assert queried <= set(_scrape(server)), sorted(queried - set(_scrape(server)))


def test_fleet_gauges_carry_the_latest_plan_and_come_back_after_a_restart(
    server: Server, tmp_path: Path
) -> None:
    body = _body()
    plan = _plan(server, body)
    assert plan["unplaced"] and plan["mig_layouts"]  # waits and MIG use: the gauges have something to show
    _assert_gauges(server, body, plan)
    # A later plan replaces every figure (here: a third team appears, with its own waits).
    later = _body([{"id": "eval", "team": "research", "gpus": 4, "tier": "background", "duration_s": 60}])
    later["policy"]["teams"].append("research")
    second = _plan(server, later)
    _assert_gauges(server, later, second)
    # A new server on the same database shows the latest stored plan from its start.
    server.stop()
    restarted = Server(server.database, tmp_path / "restarted.log")
    try:
        _assert_gauges(restarted, later, second)
    finally:
        restarted.stop()

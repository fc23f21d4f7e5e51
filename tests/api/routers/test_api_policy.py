"""``POST /v1/policy-cost``, ``POST /v1/replay`` and ``POST /v1/frontier`` on the app in process: the
rules by cost of a tiny input (one entry per rule, most costly first, each with the plan as given), the
policy in force replayed on the API's own stored plans (their objectives back within their gaps), the
best plan at each fairness floor, bad input refused naming the field, and the roles (viewers neither
submit nor read reviews)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuplan.api import create_app
from gpuplan.api.settings import Settings
from gpuplan.models import Policy
from gpuplan.planner.policy.relax import relaxations
from tests._api import ADMIN, KEYS, NOW, PLANNER, VIEWER_ML, auth, tiny_body

LATER = "2026-11-29T13:00:00+00:00"


@pytest.fixture
def idle(tmp_path: Path) -> Iterator[TestClient]:
    """An app without solver processes: jobs stay queued (for the checks made when a job is submitted)."""
    settings = Settings(database=str(tmp_path / "gpuplan.db"), api_keys=KEYS, solver_processes=0)
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def solving(tmp_path: Path) -> Iterator[TestClient]:
    """An app with one solver process."""
    settings = Settings(database=str(tmp_path / "gpuplan.db"), api_keys=KEYS, solver_processes=1)
    with TestClient(create_app(settings)) as c:
        yield c


def _policy() -> dict[str, Any]:
    """Node a reserved for team x; team y may use 2 GPUs (slack); MIG and sharing changes allowed, the
    one running replica free to move, one tier: three rules to relax (the isolation rule, the quota one
    GPU looser, the quota removed)."""
    return {
        "tiers": [{"name": "standard", "weight": 3}],
        "isolation": [{"kind": "team-exclusive", "team": "x", "nodes": ["a"]}],
        "quotas": [{"team": "y", "gpus": 2}],
        "mig": {"allow_repartition": True, "allow_create": True},
        "sharing": {"allow_change": True},
        "disruption": {"max_moves_per_round": 1, "max_preemptions_per_round": 1},
    }


def cost_body(time_limit_s: float = 5.0) -> dict[str, Any]:
    """Node a (1 GPU) is team x's; node b's GPU runs y's service; y's job, queued for 2 hours, waits:
    lifting the isolation rule places it (3 x 100 x (8 + 2) = 3,000 less queue term)."""
    gpu = [{"index": 0, "model": "L40S-48GB"}]
    node = {"cpu_milli": 64000, "memory_mib": 262144, "gpus": gpu}
    queued = (datetime.fromisoformat(NOW) - timedelta(hours=2)).astimezone(UTC).isoformat()
    return {
        "cluster": {"nodes": [{"name": "a", **node}, {"name": "b", **node}]},
        "workloads": [
            {"id": "svc", "team": "y", "gpus": 1, "running_on": "b:0", "started_at": NOW},
            {"id": "job", "team": "y", "gpus": 1, "queued_since": queued},
        ],
        "policy": _policy(),
        "team": "ml",
        "options": {"solver": "cpsat", "time_limit_s": time_limit_s, "now": NOW},
    }


def _loc(r: Any) -> list[Any]:
    assert r.status_code == 422, r.text
    loc: list[Any] = r.json()["detail"][0]["loc"]
    return loc


def test_policy_cost_lists_every_rule_by_cost_with_the_plan_as_given(solving: TestClient) -> None:
    r = solving.post("/v1/policy-cost", params={"wait": 120}, json=cost_body(), headers=auth(PLANNER))
    assert r.status_code == 200, r.text
    out = r.json()
    job, costs = out["job"], out["policy_cost"]
    assert job["kind"] == "policy-cost" and job["status"] == "done" and job["plan_status"] == "OK"
    assert "3 rule(s) priced, 1 significant" in job["outcome"]
    rules, _ = relaxations(Policy.model_validate(_policy()), running=1)
    assert sorted(c["rule"] for c in costs) == sorted(r.rule for r in rules)
    assert [c["rule"] for c in costs] == ["isolation[0]", "quotas[0]", "quotas[0].gpus"]
    assert [c["cost"] for c in costs] == sorted((c["cost"] for c in costs), reverse=True)
    lifted = costs[0]
    assert lifted["cost"] == 3000 and lifted["significant"]
    assert lifted["replicas_placed_change"] == 1 and lifted["with_rule_relaxed"]["tally"]["waiting"] == 0
    # One plan as given, the same in every entry: the service placed, the job waiting, both proved.
    given = {repr(c["given"]) for c in costs}
    assert len(given) == 1
    assert lifted["given"]["tally"]["placed"] == 1 and lifted["given"]["tally"]["waiting"] == 1
    assert lifted["given"]["solve"]["status"] == "OPTIMAL"
    each = lifted["given"]["solve"]["time_limit_s"]
    assert 1.0 <= each <= 5.0 / 4  # the job's 5 s split among its 4 plans
    assert all(not c["significant"] and c["cost"] == 0 for c in costs[1:])

    job_id = job["id"]
    assert solving.get(f"/v1/plans/{job_id}/result", headers=auth(ADMIN)).json()["policy_cost"] == costs
    # A viewer of the job's team sees the job, not the review (it prices rules of every team).
    assert solving.get(f"/v1/plans/{job_id}", headers=auth(VIEWER_ML)).status_code == 200
    assert solving.get(f"/v1/plans/{job_id}/result", headers=auth(VIEWER_ML)).status_code == 403
    audit = solving.get(f"/v1/plans/{job_id}/audit", headers=auth(ADMIN)).json()
    assert audit[0]["detail"]["kind"] == "policy-cost" and audit[0]["detail"]["policy"]["quotas"]


def _plan(client: TestClient, now: str) -> dict[str, Any]:
    body = tiny_body(time_limit_s=2.0)
    body["workloads"].append({"id": "big", "team": "ml", "gpus": 4, "replicas": 2})
    body["options"]["now"] = now
    r = client.post("/v1/plans", params={"wait": 60}, json=body, headers=auth(PLANNER))
    assert r.status_code == 200 and r.json()["job"]["status"] == "done", r.text
    out: dict[str, Any] = r.json()
    return out


def test_replaying_the_policy_in_force_gives_back_the_stored_objectives(solving: TestClient) -> None:
    stored = [_plan(solving, NOW)["plan"], _plan(solving, LATER)["plan"]]
    body = {"policy": {}, "last": 2, "options": {"time_limit_s": 6}}
    r = solving.post("/v1/replay", params={"wait": 120}, json=body, headers=auth(PLANNER))
    assert r.status_code == 200, r.text
    job, report = r.json()["job"], r.json()["replay"]
    assert job["kind"] == "replay" and job["status"] == "done" and job["team"] is None
    assert job["plan_status"] == "OK" and "within the gaps" in job["outcome"]
    assert report["policy"] == "the proposed policy" and len(report["plans"]) == 2
    for plan, replayed in zip(stored, report["plans"], strict=True):  # oldest first
        assert replayed["within_gaps"]
        before, after = replayed["stored"], replayed["replayed"]
        assert before["objective"] == plan["solver"]["objective"]
        gaps = (before["gap_units"] or 0.0) + (after["gap_units"] or 0.0)
        assert abs(after["objective"] - before["objective"]) <= gaps
        assert replayed["total"]["stored"]["placed"] == replayed["total"]["replayed"]["placed"]
    assert report["total"]["stored"]["waiting"] > 0  # the big job waits: the objectives are not 0

    # Team ml held to 1 GPU: fewer of its replicas placed in each plan.
    tighter = {**body, "policy": {"quotas": [{"team": "ml", "gpus": 1}]}}
    r = solving.post("/v1/replay", params={"wait": 120}, json=tighter, headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    ml = next(line for line in r.json()["replay"]["by_team"] if line["key"] == "ml")
    assert ml["replayed"]["placed"] < ml["stored"]["placed"]
    assert ml["replayed"]["gpus_allocated"] <= 2  # 1 GPU in each of the 2 plans
    # Nobody but admins and planners reads a replay (its job has no team).
    replay_id = r.json()["job"]["id"]
    assert solving.get(f"/v1/plans/{replay_id}", headers=auth(VIEWER_ML)).status_code == 403
    assert solving.get(f"/v1/plans/{replay_id}/result", headers=auth(VIEWER_ML)).status_code == 403
    # The policy must fit every replayed plan's inputs: the tiny body's workloads use three tiers.
    one_tier = {**body, "policy": {"tiers": [{"name": "standard", "weight": 3}]}}
    r = solving.post("/v1/replay", json=one_tier, headers=auth(PLANNER))
    assert _loc(r) == ["body", "policy"] and "plan 1" in r.json()["detail"][0]["msg"]


def test_bad_input_is_422_naming_the_field(idle: TestClient) -> None:
    h = auth(PLANNER)
    # 4 plans (the policy as given and 3 rules) in 2 s: less than a second each.
    r = idle.post("/v1/policy-cost", json=cost_body(time_limit_s=2.0), headers=h)
    assert _loc(r) == ["body", "options", "time_limit_s"]
    assert "4 plans would get" in r.json()["detail"][0]["msg"]
    loose = cost_body()
    loose["policy"] = {k: v for k, v in _policy().items() if k in ("tiers", "mig", "sharing")}
    loose["workloads"] = [{"id": "job", "team": "y", "gpus": 1}]  # nothing runs: no budget to relax
    r = idle.post("/v1/policy-cost", json=loose, headers=h)
    assert _loc(r) == ["body", "policy"] and "no rule to relax" in r.json()["detail"][0]["msg"]
    bad = cost_body()
    bad["policy"]["quotas"][0]["gpus"] = -1
    assert _loc(idle.post("/v1/policy-cost", json=bad, headers=h)) == ["body", "policy", "quotas", 0, "gpus"]
    typo = {**cost_body(), "catalog": {}}
    assert _loc(idle.post("/v1/policy-cost", json=typo, headers=h)) == ["body", "catalog"]
    capped = idle.post("/v1/policy-cost", json=cost_body(time_limit_s=9999), headers=h)
    assert capped.status_code == 413 and capped.json()["limit"] == "max_time_limit_s"

    assert _loc(idle.post("/v1/replay", json={"policy": {}, "last": 0}, headers=h)) == ["body", "last"]
    assert _loc(idle.post("/v1/replay", json={"last": 2}, headers=h)) == ["body", "policy"]
    wrong = {"policy": {}, "options": {"time_limit_s": -1}}
    assert _loc(idle.post("/v1/replay", json=wrong, headers=h)) == ["body", "options", "time_limit_s"]
    empty = idle.post("/v1/replay", json={"policy": {}}, headers=h)
    assert empty.status_code == 409 and "no plans stored" in empty.json()["detail"]


def test_only_admins_and_planners_submit_reviews(idle: TestClient) -> None:
    for path, body in (("/v1/policy-cost", cost_body()), ("/v1/replay", {"policy": {}})):
        assert idle.post(path, json=body).status_code == 401
        assert idle.post(path, json=body, headers=auth("not-a-key-0123456789abcdef")).status_code == 401
        assert idle.post(path, json=body, headers=auth(VIEWER_ML)).status_code == 403
    r = idle.post("/v1/policy-cost", json=cost_body(), headers=auth(ADMIN))
    assert r.status_code == 202 and r.json()["kind"] == "policy-cost" and r.json()["status"] == "queued"
    assert r.headers["Location"] == f"/v1/plans/{r.json()['id']}"


def frontier_body(levels: list[float] | None = None) -> dict[str, Any]:
    """4 L40S GPUs: team a (standard) asks 4, team b (background) 2; entitlements 2 each. Without a floor
    b waits (2 x 1 x 100 x 8 = 1,600); at floor 1 two of a's replicas wait instead (2 x 3 x 100 x 8)."""
    gpus = [{"index": i, "model": "L40S-48GB"} for i in range(4)]
    body: dict[str, Any] = {
        "cluster": {"nodes": [{"name": "n", "cpu_milli": 64000, "memory_mib": 262144, "gpus": gpus}]},
        "workloads": [
            {"id": "a-job", "team": "a", "tier": "standard", "gpus": 1, "replicas": 4},
            {"id": "b-job", "team": "b", "tier": "background", "gpus": 1, "replicas": 2},
        ],
        "team": "ml",
        "options": {"solver": "cpsat", "time_limit_s": 6.0, "now": NOW},
    }
    if levels is not None:
        body["levels"] = levels
    return body


def test_the_frontier_lists_the_best_plan_at_each_floor(solving: TestClient) -> None:
    r = solving.post(
        "/v1/frontier", params={"wait": 120}, json=frontier_body([0.5, 1.0]), headers=auth(PLANNER)
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["job"]["kind"] == "frontier" and out["job"]["status"] == "done"
    points = out["frontier"]["points"]
    assert [p["level"] for p in points] == [0.0, 0.5, 1.0]
    assert [p["solve"]["objective"] for p in points] == [1600, 3200, 4800]
    assert all(p["reached"] for p in points) and points[0]["current"]
    assert {t["team"]: t["allocated"] for t in points[2]["teams"]} == {"a": 2, "b": 2}
    job_id = out["job"]["id"]
    assert (
        solving.get(f"/v1/plans/{job_id}/result", headers=auth(ADMIN)).json()["frontier"] == out["frontier"]
    )
    assert solving.get(f"/v1/plans/{job_id}/result", headers=auth(VIEWER_ML)).status_code == 403


def test_a_frontier_floor_outside_0_to_1_is_422_naming_it(idle: TestClient) -> None:
    r = idle.post("/v1/frontier", json=frontier_body([0.5, 1.5]), headers=auth(PLANNER))
    assert _loc(r)[:2] == ["body", "levels"]
    r = idle.post("/v1/frontier", json={**frontier_body(), "points": 1}, headers=auth(PLANNER))
    assert _loc(r) == ["body", "points"]

"""Small fixes of the REST service: roles as written, strict JSON types, dates that are not numbers, a
computed Retry-After, and ``?wait=`` on a job that ended without a plan."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import Response
from fastapi.testclient import TestClient

from gpuplan.api import create_app
from gpuplan.api.jobs import Jobs
from gpuplan.api.runner import Runner
from gpuplan.api.settings import Settings
from gpuplan.planner.store.records import JobStatus
from tests._api import ADMIN, KEYS, PLANNER, auth, tiny_body


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    """An in-process app without solver processes: jobs stay queued."""
    settings = Settings(database=str(tmp_path / "gpuplan.db"), api_keys=KEYS, solver_processes=0)
    with TestClient(create_app(settings)) as c:
        yield c


def _loc(r: Any) -> list[Any]:
    assert r.status_code == 422, r.text
    loc: list[Any] = r.json()["detail"][0]["loc"]
    return loc


@pytest.mark.parametrize("role", ["admin ", " planner", "viewer:", "viewer: ", "viewer:ml ", "Admin"])
def test_a_role_is_stored_only_as_written(client: TestClient, role: str) -> None:
    assert _loc(client.post("/v1/keys", json={"role": role}, headers=auth(ADMIN))) == ["body", "role"]


def test_a_well_written_role_is_stored(client: TestClient) -> None:
    r = client.post("/v1/keys", json={"role": "viewer:ml team"}, headers=auth(ADMIN))
    assert r.status_code == 201 and r.json()["role"] == "viewer:ml team", r.text


def test_json_values_of_another_type_are_refused(client: TestClient) -> None:
    body = tiny_body()
    body["options"]["deterministic"] = 0
    r = client.post("/v1/plans", json=body, headers=auth(PLANNER))
    assert _loc(r) == ["body", "options", "deterministic"]
    assert client.post("/v1/plans", json=tiny_body(), headers=auth(PLANNER)).status_code == 202


@pytest.mark.parametrize("weight", ["3", 3.5, True])
def test_a_tier_weight_is_a_whole_number(client: TestClient, weight: Any) -> None:
    tiers = [{"name": "standard", "weight": weight}]
    tiers += [{"name": "latency-sensitive", "weight": 10}, {"name": "background", "weight": 1}]
    body = {**tiny_body(), "policy": {"tiers": tiers}}
    r = client.post("/v1/plans", json=body, headers=auth(PLANNER))
    assert _loc(r) == ["body", "policy", "tiers", 0, "weight"]
    tiers[0]["weight"] = 3
    assert client.post("/v1/plans", json=body, headers=auth(PLANNER)).status_code == 202


@pytest.mark.parametrize("value", ["0.5", "0", "1700000000"])
def test_a_date_is_not_a_number(client: TestClient, value: str) -> None:
    r = client.get("/v1/plans", params={"until": value}, headers=auth(PLANNER))
    assert _loc(r) == ["query", "until"]


def test_a_date_is_iso(client: TestClient) -> None:
    r = client.get("/v1/plans", params={"since": "2026-11-01T00:00:00Z"}, headers=auth(PLANNER))
    assert r.status_code == 200, r.text


def test_wait_on_a_job_that_failed_answers_it(client: TestClient) -> None:
    r = client.post("/v1/plans", json=tiny_body(), headers=auth(PLANNER))
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    state = client.app.state  # type: ignore[attr-defined]
    assert state.store.finish(job_id, JobStatus.FAILED, error="the solve ran out of memory")
    jobs = Jobs(state.settings, state.store, state.runner)
    response = Response()
    answer = asyncio.run(jobs.result_or_job(job_id, response))
    assert response.status_code != 202
    assert b'"status":"failed"' in answer.body and b"ran out of memory" in answer.body


@pytest.mark.parametrize(
    ("mean", "slots", "active", "expected"),
    [(None, 2, 5, 1), (10.0, 4, 5, 3), (10.0, 1, 5, 10), (0.2, 2, 5, 1), (7.0, 0, 5, 7)],
)
def test_retry_after_is_the_expected_time_to_the_next_end(
    mean: float | None, slots: int, active: int, expected: int
) -> None:
    runner = SimpleNamespace(mean_solve_s=lambda: mean, slots=[object()] * slots)
    assert Runner.retry_after(runner, active) == expected  # type: ignore[arg-type]

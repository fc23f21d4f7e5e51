"""The job store on SQLite and PostgreSQL, and jobs surviving a server restart (real servers)."""

from __future__ import annotations

import json
import time
from datetime import timedelta

from fastapi.testclient import TestClient

from gpuplan.api import create_app
from gpuplan.api.keys import KeyStore
from gpuplan.api.queue import JobQueue
from gpuplan.api.settings import Settings
from gpuplan.api.store import Actor, Store
from gpuplan.planner.store.records import JobInput, JobStatus, now
from tests._api import (
    KEYS,
    PLANNER,
    Server,
    auth,
    drain,
    example_body,
    live,
    restart_live,
    tiny_body,
    wait_status,
)
from tests._factories import queued_job

__all__ = ["live"]

ACTOR = Actor("abc", "planner")


def test_store_round_trip(db_url: str) -> None:
    store = Store.open(db_url)
    try:
        data = JobInput("f" * 64, '{"x": 1}', {"solver": "cpsat"})
        for i, team in enumerate(["ml", "ml", "web"]):
            store.create_job(queued_job(f"{i:032x}", team), data, ACTOR, {"policy": {"tiers": []}})
            time.sleep(0.01)
        a, b, c = (f"{i:032x}" for i in range(3))
        claimed = JobQueue(store.engine, "here", 60.0, 3).claim()
        assert claimed is not None and claimed.id == a
        assert (running := store.job(a)) is not None and running.status is JobStatus.RUNNING
        assert store.finish(a, JobStatus.DONE, plan_json='{"status": "OPTIMAL"}', plan_status="OPTIMAL")
        assert not store.finish(a, JobStatus.CANCELLED)
        assert store.result(a) == '{"status": "OPTIMAL"}' and store.result(b) is None
        assert store.finish(b, JobStatus.CANCELLED)
        assert store.interrupt_active() == 1
        interrupted = store.job(c)
        assert interrupted is not None and interrupted.status is JobStatus.INTERRUPTED
        assert interrupted.created_at.tzinfo is not None
        assert store.requeue(c, ACTOR) and not store.requeue(a, ACTOR)
        again = store.job(c)
        assert again is not None and again.status is JobStatus.QUEUED and again.attempts == 2
        rows, total = store.history(team="ml", limit=1)
        assert total == 2 and [r.id for r in rows] == [b]
        rows, total = store.history(status=JobStatus.DONE)
        assert (total, rows[0].id) == (1, a)
        assert store.history(since=now() + timedelta(hours=1))[1] == 0
        assert store.history(until=now() + timedelta(hours=1))[1] == 3
        assert store.job_input(a) == data
        assert [r["action"] for r in store.audit_trail(c)] == ["submit", "resubmit"]
        assert store.status_counts() == {"done": 1, "cancelled": 1, "queued": 1}
        KeyStore(store.engine).add("d" * 64, "viewer:ml")
        assert (
            (key := KeyStore(store.engine).get("d" * 64)) is not None
            and key.role == "viewer:ml"
            and KeyStore(store.engine).get("e" * 64) is None
        )
    finally:
        store.close()


def test_jobs_survive_a_server_restart(live: Server) -> None:
    """The shared server killed mid-solve; a new one on the same SQLite file (it then serves the rest)."""
    drain(live)
    with live.client(PLANNER) as c:
        done = c.post("/v1/plans", params={"wait": 60}, json=tiny_body(solver="first-fit")).json()
        running = c.post("/v1/plans", json=example_body(time_limit_s=2.0)).json()["id"]
        queued = c.post("/v1/plans", json=tiny_body()).json()["id"]
        assert wait_status(c, running, {"running"})["status"] == "running"
    second = restart_live(live)
    with second.client(PLANNER) as c:
        kept = c.get(f"/v1/plans/{done['job']['id']}/result")
        assert kept.status_code == 200 and kept.json()["plan"] == done["plan"]
        for job_id in (running, queued):
            job = c.get(f"/v1/plans/{job_id}").json()
            assert job["status"] == "interrupted" and "resubmit" in job["error"]
        listed = c.get("/v1/plans", params={"status": "interrupted", "limit": 200}).json()
        assert {running, queued} <= {j["id"] for j in listed["items"]}
        assert c.post(f"/v1/plans/{queued}/resubmit").status_code == 202
        finished = wait_status(c, queued, {"done", "failed"})
        assert finished["status"] == "done" and finished["attempts"] == 2
        assert json.loads(c.get(f"/v1/plans/{queued}/result").text)["plan"]["status"] == "OPTIMAL"
        assert c.post(f"/v1/plans/{done['job']['id']}/resubmit").status_code == 409


def test_jobs_survive_an_app_restart(db_url: str) -> None:
    """The app stopped with a job running and one queued, then started again on the same database: on a
    SQLite file they were interrupted (resubmitted by hand), on PostgreSQL they went back to the queue
    that servers share and the new app runs them."""
    settings = Settings(database=db_url, api_keys=KEYS, solver_processes=1)
    with TestClient(create_app(settings), headers=auth(PLANNER)) as c:
        done = c.post("/v1/plans", params={"wait": 60}, json=tiny_body(solver="first-fit")).json()
        running = c.post("/v1/plans", json=example_body(time_limit_s=2.0)).json()["id"]
        queued = c.post("/v1/plans", json=tiny_body(solver="best-fit")).json()["id"]
        assert wait_status(c, running, {"running"})["status"] == "running"
    with TestClient(create_app(settings), headers=auth(PLANNER)) as c:
        assert c.get(f"/v1/plans/{done['job']['id']}/result").json()["plan"] == done["plan"]
        if "://" in db_url:
            for job_id in (running, queued):
                job = wait_status(c, job_id, {"done", "failed", "cancelled", "interrupted"})
                assert job["status"] == "done" and job["attempts"] == 1
            return
        assert {c.get(f"/v1/plans/{i}").json()["status"] for i in (running, queued)} == {"interrupted"}
        assert c.post(f"/v1/plans/{running}/resubmit").status_code == 202
        assert c.delete(f"/v1/plans/{running}").json()["status"] == "cancelled"
        assert c.post(f"/v1/plans/{queued}/resubmit").status_code == 202
        assert wait_status(c, queued, {"done", "failed"})["status"] == "done"

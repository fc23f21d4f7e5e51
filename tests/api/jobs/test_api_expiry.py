"""Any server expires leases: on PostgreSQL a server without solver processes (``--no-worker``) queues
again the job of a worker that died holding it, even while no worker runs."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from gpuplan.api.queue import JobQueue
from gpuplan.api.store import Actor, Store
from gpuplan.planner.store.records import JobInput
from tests._api import ADMIN, Server
from tests._factories import queued_job

#: The whole module runs real ``gpuplan serve`` processes on PostgreSQL: slow.
pytestmark = pytest.mark.slow


def test_an_http_only_server_expires_a_dead_workers_lease(db_url: str, tmp_path: Path) -> None:
    if "://" not in db_url:
        pytest.skip("several servers and workers share PostgreSQL only")
    store = Store.open(db_url)
    job_id = "a" * 32
    queued = queued_job(job_id, solver="first-fit")
    store.create_job(queued, JobInput("f" * 64, "{}", {}), Actor("abc", "planner"), {})
    # A worker claims the job under a 1 s lease and dies: nothing renews it.
    assert JobQueue(store.engine, "dead-worker", 1.0, 3).claim() is not None
    store.close()
    server = Server(db_url, tmp_path / "serve.log", env={"GPUPLAN_SOLVER_PROCESSES": "0"})
    try:
        with server.client(ADMIN) as c:
            deadline = time.monotonic() + 30
            while (job := c.get(f"/v1/plans/{job_id}").json())["status"] == "running":
                assert time.monotonic() < deadline, job
                time.sleep(0.2)
        assert job["status"] == "queued", job
    finally:
        server.stop()


def test_an_http_only_server_is_ready_while_a_worker_beats(db_url: str, tmp_path: Path) -> None:
    """``/readyz`` of a server without solver processes: 503 naming the missing worker until a worker's
    heartbeat is stored, 200 while it is younger than a lease, 503 again once the worker stops beating
    (it died)."""
    if "://" not in db_url:
        pytest.skip("several servers and workers share PostgreSQL only")
    env = {"GPUPLAN_SOLVER_PROCESSES": "0", "GPUPLAN_LEASE_SECONDS": "2"}
    server = Server(db_url, tmp_path / "serve.log", env=env)
    store = Store.open(db_url)
    try:
        alone = httpx.get(f"{server.url}/readyz")
        assert alone.status_code == 503 and "no worker" in alone.json()["checks"]["workers"]
        worker = JobQueue(store.engine, "a-worker", 2.0, 3)
        worker.beat(processes=2, ready=0)  # alive, but no solver process up yet: still not ready
        assert httpx.get(f"{server.url}/readyz").status_code == 503
        worker.beat(processes=2, ready=1)
        assert httpx.get(f"{server.url}/readyz").json() == {
            "status": "ready",
            "checks": {"database": "ok", "workers": "ok"},
        }
        deadline = time.monotonic() + 30
        while httpx.get(f"{server.url}/readyz").status_code == 200:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        store.close()
        server.stop()

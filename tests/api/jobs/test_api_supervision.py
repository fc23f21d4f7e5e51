"""Supervision of the solver processes against a real ``gpuplan serve``: a killed process is replaced
and its job fails with the reason, ``/readyz`` says so while none is up, the memory cap per process, and
no solver process outlives the server (SIGKILL or SIGTERM)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import annotated_types
import httpx
import pytest

from gpuplan.api.settings import Limits
from gpuplan.api.store import Store
from gpuplan.planner.store.records import JobStatus
from tests._api import (
    PLANNER,
    Server,
    _process,
    example_body,
    solver_processes,
    tiny_body,
    wait_gone,
    wait_status,
)

#: The whole module runs real ``gpuplan serve`` processes and their solver processes: slow.
pytestmark = pytest.mark.slow

#: A solve that runs far longer than any wait below, so that an early end is not the solve finishing.
LONG_S = 30.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A server of its own (these tests kill its processes), allowing long solves and large requests."""
    s = Server(
        str(tmp_path / "gpuplan.db"),
        tmp_path / "serve.log",
        env={**_unlimited(), "GPUPLAN_LIMIT_MAX_TIME_LIMIT_S": str(2 * LONG_S)},
    )
    yield s
    s.stop(hard=True)


def _solver(server: Server, timeout_s: float = 60.0) -> int:
    """The one solver process of ``server``, once it is up."""
    deadline = time.monotonic() + timeout_s
    while not (found := solver_processes(server)) and time.monotonic() < deadline:
        time.sleep(0.05)
    (pid,) = found
    return pid


def _fork_server(server: Server) -> int:
    """The multiprocessing fork server that ``server`` starts its solver processes from."""
    (pid,) = {
        p
        for p in (int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit())
        if (info := _process(p)) is not None and info[0] == server.proc.pid and "forkserver" in info[2]
    }
    return pid


def _readyz(server: Server) -> httpx.Response:
    return httpx.get(f"{server.url}/readyz", timeout=5.0)


def test_a_solver_killed_mid_job_fails_the_job_and_is_replaced(server: Server) -> None:
    with server.client(PLANNER) as c:
        job_id = c.post("/v1/plans", json=example_body(time_limit_s=LONG_S)).json()["id"]
        assert wait_status(c, job_id, {"running"})["status"] == "running"
        first = _solver(server)
        os.kill(first, signal.SIGKILL)
        job = wait_status(c, job_id, {"failed", "done"}, timeout_s=LONG_S / 2)
        assert job["status"] == "failed", job
        assert "solver process died (signal 9 (SIGKILL))" in job["error"]
        # The slot has a new process, and the next job runs in it.
        r = c.post("/v1/plans", params={"wait": 60}, json=tiny_body(solver="first-fit"))
        assert r.status_code == 200 and r.json()["job"]["status"] == "done"
        assert _solver(server) != first


def test_an_idle_solver_killed_is_replaced_and_readyz_says_so_meanwhile(server: Server) -> None:
    """The fork server is stopped so that no new process can start until it is continued: the runner is
    not ready while no solver process is up, queues jobs meanwhile, and runs them once one is."""
    solver = _solver(server)
    # The process may still be starting (the previous test replaced it): ready once it says so.
    deadline = time.monotonic() + 30
    while (r := _readyz(server)).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.status_code == 200
    fork_server = _fork_server(server)
    os.kill(fork_server, signal.SIGSTOP)
    try:
        os.kill(solver, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while (r := _readyz(server)).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert r.status_code == 503
        assert r.json()["checks"]["solvers"] == "no solver process is up"
        assert httpx.get(f"{server.url}/healthz").status_code == 200
        with server.client(PLANNER) as c:
            job_id = c.post("/v1/plans", json=tiny_body(solver="first-fit")).json()["id"]
    finally:
        os.kill(fork_server, signal.SIGCONT)
    with server.client(PLANNER) as c:
        assert wait_status(c, job_id, {"done", "failed"})["status"] == "done"
    assert _readyz(server).status_code == 200
    assert _solver(server) != solver


def _unlimited() -> dict[str, str]:
    """Every request limit without an upper bound of its own lifted (through its ``GPUPLAN_LIMIT_*``
    variable), except the body size and the time limit, so that an oversized request reaches a solver."""
    env = {}
    for name, info in Limits.model_fields.items():
        capped = any(isinstance(m, annotated_types.Le | annotated_types.Lt) for m in info.metadata)
        if name not in ("max_body_bytes", "max_time_limit_s") and not capped:
            env[f"GPUPLAN_LIMIT_{name.upper()}"] = "1000000000" if info.annotation is int else "1e9"
    return env


def test_a_job_beyond_the_memory_limit_fails_and_the_server_stays_up(tmp_path: Path) -> None:
    """The issue's request (a workload with 10 million replicas grows the solver process without bound)
    under a cap of 768 MiB: the job fails naming the cap, a new process serves the next job."""
    limit = 768
    env = {**_unlimited(), "GPUPLAN_SOLVER_MEMORY_MIB": str(limit), "GPUPLAN_SOLVE_GRACE_S": "300"}
    server = Server(str(tmp_path / "gpuplan.db"), tmp_path / "serve.log", env=env)
    try:
        first = _solver(server)
        body: dict[str, Any] = tiny_body(solver="first-fit", time_limit_s=1.0)
        body["workloads"][0]["replicas"] = 10_000_000
        with server.client(PLANNER) as c:
            r = c.post("/v1/plans", params={"wait": 240}, json=body)
            job = r.json()["job"] if r.status_code == 200 else wait_status(c, r.json()["id"], {"failed"})
            assert job["status"] == "failed", job
            assert job["error"] == f"solver process ran out of memory (limit {limit} MiB)"
            assert server.proc.poll() is None
            r = c.post("/v1/plans", params={"wait": 60}, json=tiny_body())
            assert r.json()["job"]["status"] == "done"
        assert _solver(server) != first
    finally:
        server.stop(hard=True)


def test_solver_processes_end_with_a_killed_server(server: Server) -> None:
    """SIGKILL of the server mid-solve: its solver process ends at once, not after its solve (a first-fit
    pass over a million replicas, about a minute without a message to the server)."""
    body: dict[str, Any] = tiny_body(solver="first-fit", time_limit_s=1.0)
    body["workloads"][0]["replicas"] = 1_000_000
    with server.client(PLANNER) as c:
        job_id = c.post("/v1/plans", json=body).json()["id"]
        assert wait_status(c, job_id, {"running"})["status"] == "running"
    solver = _solver(server)
    server.stop(hard=True)
    assert wait_gone(solver, timeout_s=10.0)


def test_sigterm_ends_running_jobs_cleanly(server: Server) -> None:
    """SIGTERM mid-solve: the running and the queued job are marked interrupted with the reason, and no
    solver process is left."""
    with server.client(PLANNER) as c:
        running = c.post("/v1/plans", json=example_body(time_limit_s=LONG_S)).json()["id"]
        queued = c.post("/v1/plans", json=tiny_body()).json()["id"]
        assert wait_status(c, running, {"running"})["status"] == "running"
    solver = _solver(server)
    server.stop()
    assert wait_gone(solver, timeout_s=5.0)
    store = Store.open(server.database)
    try:
        for job_id in (running, queued):
            job = store.job(job_id)
            assert job is not None and job.status is JobStatus.INTERRUPTED
            assert job.error == "the server stopped before this job finished; resubmit it"
    finally:
        store.close()

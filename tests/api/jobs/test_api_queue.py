"""Several ``gpuplan serve`` processes and ``gpuplan worker``s on one PostgreSQL database act as one
service (real servers on loopback, a real PostgreSQL); SQLite keeps one server and refuses the rest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from gpuplan.api.store import Store
from gpuplan.api.store.tables import jobs
from gpuplan.cli import main
from tests._api import (
    MAX_ACTIVE,
    PLANNER,
    ROOT,
    VIEWER_ML,
    Server,
    example_body,
    solver_processes,
    tiny_body,
    wait_gone,
    wait_status,
)

#: The whole module runs real ``gpuplan serve`` and ``gpuplan worker`` processes: slow.
pytestmark = pytest.mark.slow

#: A short lease, so that a dead server's job is taken over within seconds; a time limit cap that
#: lets a solve run long enough to be cancelled or killed mid-solve.
ENV = {"GPUPLAN_LEASE_SECONDS": "2", "GPUPLAN_LIMIT_MAX_TIME_LIMIT_S": "30"}
ENDED = {"done", "failed", "cancelled", "interrupted"}
_MAIN = "import sys; from gpuplan.cli import main; sys.exit(main())"

postgresql = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def _lease(database: str, job_id: str) -> tuple[str | None, int]:
    """The job's holder (``host:pid:random``) and how many of its leases ran out."""
    store = Store.open(database)
    try:
        with store.engine.connect() as conn:
            row = conn.execute(
                select(jobs.c.lease_owner, jobs.c.lease_expiries).where(jobs.c.id == job_id)
            ).one()
    finally:
        store.close()
    return row[0], row[1]


def _holder(servers: list[Server], job_id: str) -> Server:
    """The server whose process holds the running job's lease."""
    owner, _ = _lease(servers[0].database, job_id)
    assert owner is not None
    pid = int(owner.split(":")[-2])
    (holder,) = [s for s in servers if s.proc.pid == pid]
    return holder


@postgresql
def test_two_servers_are_one_service(db_url: str, tmp_path: Path) -> None:
    """A job submitted to A is read from B (state, plan, audit, history); ``max_active_jobs`` counts
    the jobs of both servers."""
    a = Server(db_url, tmp_path / "a.log", ENV)
    b = Server(db_url, tmp_path / "b.log", ENV)
    try:
        with a.client(PLANNER) as ca, b.client(PLANNER) as cb:
            done = ca.post("/v1/plans", params={"wait": 60}, json=tiny_body()).json()
            job_id = done["job"]["id"]
            assert cb.get(f"/v1/plans/{job_id}").json()["status"] == "done"
            assert json.loads(cb.get(f"/v1/plans/{job_id}/result").text)["plan"] == done["plan"]
            assert [r["action"] for r in cb.get(f"/v1/plans/{job_id}/audit").json()] == ["submit"]
            assert job_id in {j["id"] for j in cb.get("/v1/plans").json()["items"]}
            with b.client(VIEWER_ML) as viewer:
                assert viewer.get(f"/v1/plans/{job_id}/result").status_code == 200
            # Long jobs submitted to both fill max_active_jobs: the next one is refused by either.
            long = [
                (ca if i % 2 else cb).post("/v1/plans", json=example_body(time_limit_s=20.0)).json()["id"]
                for i in range(MAX_ACTIVE)
            ]
            for c in (ca, cb):
                refused = c.post("/v1/plans", json=tiny_body())
                assert refused.status_code == 429 and refused.json()["limit"] == "max_active_jobs"
            for job in long:
                assert cb.delete(f"/v1/plans/{job}").json()["status"] == "cancelled"
            assert ca.post("/v1/plans", json=tiny_body()).status_code == 202
    finally:
        a.stop()
        b.stop()


@postgresql
def test_a_cancellation_on_one_server_stops_the_solve_on_the_other(db_url: str, tmp_path: Path) -> None:
    """While one server solves, the other shows its progress; cancelled there, the holder's heartbeat
    finds the row cancelled and kills its solver process; the job stays cancelled."""
    servers = [Server(db_url, tmp_path / "a.log", ENV), Server(db_url, tmp_path / "b.log", ENV)]
    try:
        with servers[0].client(PLANNER) as c:
            job_id = c.post("/v1/plans", json=example_body(time_limit_s=25.0)).json()["id"]
            assert wait_status(c, job_id, {"running", *ENDED})["status"] == "running"
        holder = _holder(servers, job_id)
        (other,) = [s for s in servers if s is not holder]
        solvers = solver_processes(holder)
        assert solvers
        with other.client(PLANNER) as c:
            deadline = time.monotonic() + 20.0
            while (seen := c.get(f"/v1/plans/{job_id}").json())["progress"] is None:
                assert seen["status"] == "running" and time.monotonic() < deadline, seen
                time.sleep(0.1)
            assert seen["status"] == "running" and seen["progress"]["phase"]
            assert c.delete(f"/v1/plans/{job_id}").json()["status"] == "cancelled"
            # The holder's heartbeat (every half second with a 2 s lease) stops the solve: 25 s early.
            assert all(wait_gone(pid, timeout_s=15.0) for pid in solvers)
            job = c.get(f"/v1/plans/{job_id}").json()
            assert job["status"] == "cancelled" and c.get(f"/v1/plans/{job_id}/result").status_code == 409
    finally:
        for s in servers:
            s.stop()


@postgresql
def test_a_killed_servers_jobs_are_finished_by_the_other(db_url: str, tmp_path: Path) -> None:
    """SIGKILL to the server solving a job, with more jobs queued: the other server takes the job over
    once its lease runs out, re-runs it from its stored input, and every job ends done."""
    servers = [Server(db_url, tmp_path / "a.log", ENV), Server(db_url, tmp_path / "b.log", ENV)]
    try:
        with servers[0].client(PLANNER) as c:
            ids = [c.post("/v1/plans", json=example_body(time_limit_s=3.0)).json()["id"] for _ in range(2)]
            ids.append(c.post("/v1/plans", json=tiny_body()).json()["id"])
            assert wait_status(c, ids[0], {"running", *ENDED})["status"] == "running"
        holder = _holder(servers, ids[0])
        (survivor,) = [s for s in servers if s is not holder]
        holder.stop(hard=True)
        with survivor.client(PLANNER) as c:
            for job_id in ids:
                job = wait_status(c, job_id, ENDED, timeout_s=120.0)
                assert job["status"] == "done", job
                assert c.get(f"/v1/plans/{job_id}/result").status_code == 200
        owner, expiries = _lease(survivor.database, ids[0])
        assert owner is not None and int(owner.split(":")[-2]) == survivor.proc.pid and expiries == 1
        assert "ran out; queued again" in survivor.log_path.read_text()
    finally:
        for s in servers:
            s.stop()


def _worker(database: str, log: Path) -> subprocess.Popen[bytes]:
    """``gpuplan worker`` with one solver process, logging to ``log``."""
    return subprocess.Popen(
        [sys.executable, "-c", _MAIN, "worker", "--database", database, "--processes", "1"],
        env={**os.environ, **ENV},
        cwd=ROOT,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )


def _ready_within(server: Server, timeout_s: float) -> bool:
    """Poll ``/readyz`` until it answers 200; False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while httpx.get(f"{server.url}/readyz").status_code != 200:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@postgresql
def test_a_worker_runs_the_jobs_of_a_server_without_solvers(db_url: str, tmp_path: Path) -> None:
    """A server with no solver processes is not ready while no worker is alive, and queues jobs; a
    separate ``gpuplan worker`` makes it ready and runs them (one answers a ``?wait=`` on the server);
    SIGTERM stops the worker cleanly, and the server is not ready again."""
    web = Server(db_url, tmp_path / "web.log", {**ENV, "GPUPLAN_SOLVER_PROCESSES": "0"})
    worker = None
    try:
        alone = httpx.get(f"{web.url}/readyz")
        assert alone.status_code == 503, alone.text
        assert alone.json()["checks"]["database"] == "ok"
        assert alone.json()["checks"]["workers"].startswith("no worker with a solver process up")
        with web.client(PLANNER) as c:
            first = c.post("/v1/plans", json=tiny_body()).json()["id"]
            assert c.get(f"/v1/plans/{first}").json()["status"] == "queued"
            worker = _worker(db_url, tmp_path / "worker.log")
            assert _ready_within(web, 60.0), httpx.get(f"{web.url}/readyz").text
            waited = c.post("/v1/plans", params={"wait": 120}, json=tiny_body(solver="best-fit"))
            assert waited.status_code == 200, waited.text
            assert waited.json()["job"]["status"] == "done" and waited.json()["plan"]["status"]
            assert wait_status(c, first, ENDED)["status"] == "done"
            # An explanation is run by the server itself (it is never stored): not by this one.
            explained = c.get(f"/v1/plans/{first}/explain/train", params={"counterfactuals": 0})
            assert explained.status_code == 503 and "no solver processes" in explained.json()["detail"]
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
        assert httpx.get(f"{web.url}/readyz").status_code == 503
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
        web.stop()


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of a command that exits 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


def test_sqlite_has_no_separate_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On a SQLite file the one server runs the jobs: a worker, or a server without solver processes,
    is refused with one line saying why; so is a worker of no processes."""
    db = str(tmp_path / "gpuplan.db")
    line = _refused(["worker", "--database", db], capsys)
    assert "gpuplan worker needs a PostgreSQL database" in line and db in line
    line = _refused(["serve", "--no-worker", "--database", db], capsys)
    assert "serve --no-worker (GPUPLAN_SOLVER_PROCESSES=0) needs a PostgreSQL database" in line
    assert "--processes: 0 is not" in _refused(["worker", "--database", db, "--processes", "0"], capsys)

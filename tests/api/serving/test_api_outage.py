"""A PostgreSQL outage under a real server: requests answered 503 with ``Retry-After`` and one log line,
a result finished meanwhile written when the database returns, and the outage not counted against the
jobs' lease-expiry limit. The test starts its own throwaway PostgreSQL (``.ci/postgres.sh``), stops it
and starts it again on the same files and port."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import make_url, select

from gpuplan.api.store import Store
from gpuplan.api.store.tables import jobs
from tests._api import PLANNER, ROOT, Server, example_body, tiny_body, wait_status

#: The whole module runs a real ``gpuplan serve`` and a throwaway PostgreSQL: slow.
pytestmark = pytest.mark.slow

#: Leases shorter than the outage, and a job failed for good at its first expired lease: an outage
#: counted against a job fails it.
ENV = {
    "GPUPLAN_LEASE_SECONDS": "4",
    "GPUPLAN_MAX_LEASE_EXPIRIES": "1",
    "GPUPLAN_SOLVER_PROCESSES": "2",
    "GPUPLAN_LIMIT_MAX_TIME_LIMIT_S": "30",
}
#: How long the database stays down: two leases.
OUTAGE_S = 8.0


class Postgres:
    """A throwaway PostgreSQL on loopback whose server can be stopped and started on the same files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        started = subprocess.run(
            ["bash", str(ROOT / ".ci" / "postgres.sh"), "start", str(root)],
            capture_output=True,
            text=True,
            check=False,
        )
        if started.returncode != 0 or not started.stdout.strip():
            pytest.skip("PostgreSQL could not be started (.ci/postgres.sh)")
        self.url = started.stdout.strip()
        self.port = make_url(self.url).port
        self.bindir = max(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))

    def _ctl(self, *args: str) -> None:
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(
            [*as_postgres, str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), *args], check=True
        )

    def stop(self) -> None:
        """Stop the server (its clients' connections are closed); the files stay."""
        self._ctl("-m", "fast", "-w", "stop")

    def start(self) -> None:
        """Start the server again on the same files and port."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        self._ctl("-l", str(self.root / "log"), "-w", "-o", options, "start")

    def remove(self) -> None:
        """Stop the server and remove its files."""
        subprocess.run(["bash", str(ROOT / ".ci" / "postgres.sh"), "stop", str(self.root)], check=False)


@pytest.fixture
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL of this test's own, removed after it (its files outside pytest's directories, which
    the ``postgres`` user may not enter)."""
    pg = Postgres(Path(tempfile.mkdtemp(prefix="gpuplan-pg.")))
    try:
        yield pg
    finally:
        pg.remove()


def _job_row(database: str, job_id: str) -> tuple[str, int]:
    """The job's stored status and how many of its leases ran out."""
    store = Store.open(database)
    try:
        with store.engine.connect() as conn:
            row = conn.execute(select(jobs.c.status, jobs.c.lease_expiries).where(jobs.c.id == job_id)).one()
    finally:
        store.close()
    return str(row[0]), int(row[1])


def test_a_postgresql_outage_answers_503_keeps_results_and_counts_no_expiry(
    postgres: Postgres, tmp_path: Path
) -> None:
    server = Server(postgres.url, tmp_path / "serve.log", env=ENV)
    try:
        with server.client(PLANNER) as c:
            # One job that ends during the outage, one that runs through it.
            short = c.post("/v1/plans", json=example_body(time_limit_s=3.0)).json()["id"]
            long = c.post("/v1/plans", json=example_body(time_limit_s=16.0)).json()["id"]
            for job in (short, long):
                assert wait_status(c, job, {"running"})["status"] == "running"
            postgres.stop()
            down = time.monotonic()
            answers = []
            while time.monotonic() - down < OUTAGE_S:
                answers.append(c.get(f"/v1/plans/{long}"))
                answers.append(c.post("/v1/plans", json=tiny_body()))
                time.sleep(0.5)
            ready = httpx.get(f"{server.url}/readyz")
            postgres.start()
            assert {r.status_code for r in answers} == {503}
            assert all(int(r.headers["Retry-After"]) >= 1 for r in answers)
            assert "database" in answers[0].json()["detail"]
            assert ready.status_code == 503 and ready.json()["checks"]["database"] == "unreachable"
            ended = {job: wait_status(c, job, {"done", "failed"}, timeout_s=90.0) for job in (short, long)}
            for job, seen in ended.items():
                assert seen["status"] == "done", seen
                assert c.get(f"/v1/plans/{job}/result").json()["plan"]["assignments"]
                assert _job_row(postgres.url, job) == ("done", 0)
    finally:
        server.stop()
    log = (tmp_path / "serve.log").read_text()
    # The short job ended during the outage: its plan waited in the server for the database.
    assert log.count("database unreachable") == 1, log
    assert log.count("database reachable again") == 1, log
    assert "Traceback" not in log, log
    assert f"job {short} ended (done); kept here until the database returns" in log, log

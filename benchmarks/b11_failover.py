"""B11 failover: two ``gpuplan serve`` processes on one PostgreSQL database, one killed mid-solve.

Both servers (one solver process each, a lease of ``--lease`` seconds) start on a fresh database of the
PostgreSQL server at ``--database``. ``--jobs`` plans (B8's 64-GPU bodies, CP-SAT with ``--time-limit``)
are submitted to the two servers in turn, without waiting. Once server A has held a job for a quarter
of its time limit, A gets SIGKILL: nothing of it is cleaned up, and its job stays ``running`` under A's lease.
The benchmark then polls every job through B until all have ended, and reads from the database when
B took A's job over. Figures: jobs lost (not ``done``) and left ``running``, the time from the kill to
B claiming A's job (lease expiry and its detection), to that job being done (plus the re-run), and
until every job is done.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy import create_engine, select, text

from benchmarks.b8_api_load import append_row, body, launch
from gpuplan.api.store.tables import jobs
from gpuplan.planner.store.db import database_url

KEY = "b11-benchmark-planner-key-0123456789"
ENDED = {"done", "failed", "cancelled", "interrupted"}


def start_server(port: int, database: str, lease_s: float, log: Path) -> subprocess.Popen[bytes]:
    """``gpuplan serve`` on loopback with one solver process, ready to plan."""
    env = {
        **os.environ,
        "GPUPLAN_API_KEYS": json.dumps({KEY: "planner"}),
        "GPUPLAN_SOLVER_PROCESSES": "1",
        "GPUPLAN_LEASE_SECONDS": str(lease_s),
        "GPUPLAN_LIMIT_MAX_ACTIVE_JOBS": "1000",
        "GPUPLAN_LIMIT_RATE_PER_MINUTE": "0",
    }
    return launch(port, database, env, log)


def fresh_database(server_url: str) -> str:
    """A new, empty database on the PostgreSQL server of ``server_url``."""
    name = f"b11_{uuid.uuid4().hex[:10]}"
    admin = create_engine(database_url(server_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return database_url(server_url).rsplit("/", 1)[0] + "/" + name


def holders(database: str) -> dict[str, tuple[str, str | None]]:
    """Every job's status and lease holder, read from the database."""
    engine = create_engine(database)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(jobs.c.id, jobs.c.status, jobs.c.lease_owner)).all()
    finally:
        engine.dispose()
    return {r[0]: (r[1], r[2]) for r in rows}


def pid_of(owner: str | None) -> int | None:
    """The process id in a lease holder's name (``host:pid:random``)."""
    return int(owner.split(":")[-2]) if owner else None


def run(args: argparse.Namespace, database: str, logs: Path) -> dict[str, object]:
    """Start both servers, submit the jobs, kill A mid-solve, and follow every job to its end."""
    ports = [int(args.port), int(args.port) + 1]
    a, b = (start_server(p, database, args.lease, logs / f"server-{i}.log") for i, p in enumerate(ports))
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    try:
        with httpx.Client(headers=headers, timeout=60) as http:
            ids = [
                http.post(f"{urls[i % 2]}/v1/plans", content=body(i, "cpsat", args.time_limit)).json()["id"]
                for i in range(args.jobs)
            ]
            victim: str | None = None
            first_seen: dict[str, float] = {}
            while victim is None:
                for j, (s, o) in holders(database).items():
                    if s == "running" and pid_of(o) == a.pid:
                        since = first_seen.setdefault(j, time.monotonic())
                        if time.monotonic() - since >= args.time_limit / 4:
                            victim = j
                time.sleep(0.05)
            a.kill()
            killed = time.monotonic()
            a.wait()
            reclaimed = victim_done = None
            states: dict[str, str] = {}
            while True:
                now = time.monotonic()
                status, owner = holders(database)[victim]
                if reclaimed is None and status == "running" and pid_of(owner) == b.pid:
                    reclaimed = now - killed
                states = {j: http.get(f"{urls[1]}/v1/plans/{j}").json()["status"] for j in ids}
                if victim_done is None and states[victim] in ENDED:
                    victim_done = now - killed
                if all(s in ENDED for s in states.values()) or now - killed > args.timeout:
                    break
                time.sleep(0.1)
            total = time.monotonic() - killed
    finally:
        for proc in (a, b):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
    return {
        "jobs": args.jobs,
        "lease_s": args.lease,
        "time_limit_s": args.time_limit,
        "done": sum(1 for s in states.values() if s == "done"),
        "lost": sum(1 for s in states.values() if s != "done"),
        "left_running": sum(1 for s in states.values() if s == "running"),
        "reclaim_s": round(reclaimed, 2) if reclaimed is not None else "",
        "victim_done_s": round(victim_done, 2) if victim_done is not None else "",
        "all_done_s": round(total, 2),
    }


def main() -> None:
    """Run once and print (and with ``--out`` append) the row."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument(
        "--database",
        default=os.environ.get("GPUPLAN_TEST_POSTGRES_URL"),
        help="a PostgreSQL server's URL; a fresh database is made on it (default: GPUPLAN_TEST_POSTGRES_URL)",
    )
    p.add_argument("--jobs", type=int, default=20)
    p.add_argument("--lease", type=float, default=5.0, help="GPUPLAN_LEASE_SECONDS of both servers")
    p.add_argument("--time-limit", type=float, default=2.0, help="CP-SAT seconds per job")
    p.add_argument("--port", type=int, default=18110, help="A's port; B's is the next one")
    p.add_argument("--timeout", type=float, default=600.0, help="give up this long after the kill")
    p.add_argument("--out", help="append the row to this CSV")
    args = p.parse_args()
    if not args.database:
        p.error("--database: give a PostgreSQL URL (bash .ci/postgres.sh start DIR starts one)")
    database = fresh_database(args.database)
    with tempfile.TemporaryDirectory() as logs:
        row = run(args, database, Path(logs))
    sys.stdout.write(json.dumps(row) + "\n")
    if args.out:
        append_row(Path(args.out), row)


if __name__ == "__main__":
    main()

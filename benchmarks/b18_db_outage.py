"""B18 a PostgreSQL outage under load (issue 27 item 5): ``gpuplan serve`` (two solver processes) on a
throwaway PostgreSQL (``.ci/postgres.sh``), clients submitting B8 bodies and reading their jobs; the
database is stopped for ``--outage`` seconds mid-load and started again on the same files.

Prints the answers seen during the outage by status (and how many carried ``Retry-After``), the server's
log lines and tracebacks, and what became of every accepted job: its final status, whether a lease of
it ran out (``lease_expiries``), and how many ended during the outage and kept their result.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from benchmarks.b8_api_load import KEY, ROOT, body, launch

ENDED = {"done", "failed", "cancelled", "interrupted"}


class Postgres:
    """A throwaway PostgreSQL whose server can be stopped and started on the same files."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="gpuplan-b18."))
        out = subprocess.run(
            ["bash", str(ROOT / ".ci" / "postgres.sh"), "start", str(self.root)],
            capture_output=True,
            text=True,
            check=True,
        )
        self.url = out.stdout.strip()
        self.port = self.url.rsplit(":", 1)[1].split("/")[0]
        self.bindir = max(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))

    def ctl(self, *args: str) -> None:
        """Run ``pg_ctl`` on the files (as the postgres user when run as root)."""
        user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*user, str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), *args], check=True)

    def stop(self) -> None:
        """Stop the server; the files stay."""
        self.ctl("-m", "fast", "-w", "stop")

    def start(self) -> None:
        """Start it again on the same port."""
        self.ctl(
            "-l",
            str(self.root / "log"),
            "-w",
            "-o",
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1",
            "start",
        )

    def remove(self) -> None:
        """Stop it and remove the files."""
        subprocess.run(["bash", str(ROOT / ".ci" / "postgres.sh"), "stop", str(self.root)], check=False)


def load(url: str, until: float, seen: list[tuple[float, int, bool]], accepted: list[str], seed: int) -> None:
    """Submit a job and read it every 0.5 s until it ends, then the next, until ``until``; record every
    answer as (time, status, whether it carried Retry-After); 0 is a transport error."""
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        k = seed
        while time.monotonic() < until:
            job = None
            while job is None and time.monotonic() < until:
                job = _call(http, seen, "POST", "/v1/plans", content=body(k % 8, "cpsat", 3.0))
                time.sleep(0.5)
            if job is None:
                return
            accepted.append(job["id"])
            while (state := _call(http, seen, "GET", f"/v1/plans/{job['id']}")) is None or state[
                "status"
            ] not in ENDED:
                time.sleep(0.5)
            k += 4


def _call(
    http: httpx.Client, seen: list[tuple[float, int, bool]], method: str, path: str, **kw: Any
) -> Any | None:
    """One request, recorded; its JSON when it succeeded (2xx), else None."""
    try:
        r = http.request(method, path, **kw)
    except httpx.TransportError:
        seen.append((time.monotonic(), 0, False))
        return None
    seen.append((time.monotonic(), r.status_code, "retry-after" in r.headers))
    return r.json() if r.is_success else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--outage", type=float, default=21.0, help="seconds the database is down")
    ap.add_argument("--port", type=int, default=18741)
    args = ap.parse_args()
    pg = Postgres()
    try:
        run(pg, args.outage, args.port)
    finally:
        pg.remove()


def run(pg: Postgres, outage: float, port: int) -> None:
    """The load, the outage and the tally (see the module's text)."""
    log = pg.root / "serve.log"
    env = {
        **os.environ,
        "GPUPLAN_API_KEYS": json.dumps({KEY: "planner"}),
        "GPUPLAN_SOLVER_PROCESSES": "2",
        "GPUPLAN_LEASE_SECONDS": "10",
        "GPUPLAN_LIMIT_MAX_ACTIVE_JOBS": "1000",
    }
    proc = launch(port, pg.url, env, log)
    url = f"http://127.0.0.1:{port}"
    seen: list[tuple[float, int, bool]] = []
    accepted: list[str] = []
    try:
        start = time.monotonic()
        until = start + 10 + outage + 10
        clients = [threading.Thread(target=load, args=(url, until, seen, accepted, i)) for i in range(4)]
        for c in clients:
            c.start()
        time.sleep(10)
        pg.stop()
        down = time.monotonic()
        time.sleep(outage)
        pg.start()
        up = time.monotonic()
        for c in clients:
            c.join()
        deadline = time.monotonic() + 300
        final: dict[str, Any] = {}
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as http:
            for job in accepted:
                while (state := http.get(f"/v1/plans/{job}").json())["status"] not in ENDED:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
                final[job] = state
        engine = create_engine(pg.url)
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT id, lease_expiries, finished_at FROM gpuplan_jobs")).all()
        engine.dispose()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    during = [(s, r) for t, s, r in seen if down <= t <= up]
    lines = log.read_text().splitlines()
    expired = sum(1 for _, n, _ in rows if n)
    result = {
        "outage_s": round(up - down, 1),
        "answers_during_outage": dict(Counter(str(s) for s, _ in during)),
        "with_retry_after": sum(1 for _, r in during if r),
        "answers_outside": dict(Counter(str(s) for t, s, _ in seen if not down <= t <= up)),
        "log_lines": len(lines),
        "tracebacks": sum("Traceback" in line for line in lines),
        "kept_until_db_returned": sum("kept here until the database returns" in line for line in lines),
        "jobs_accepted": len(accepted),
        "jobs_final": dict(Counter(s["status"] for s in final.values())),
        "jobs_with_an_expired_lease": expired,
        "load": Path("/proc/loadavg").read_text().split()[:3],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()

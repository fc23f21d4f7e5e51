"""B8 API load: concurrent clients submitting small plans with ``?wait=`` to a real ``gpuplan serve``.

Each client loops for ``--duration`` seconds: ``POST /v1/plans?wait=W`` with a demand drawn from one of
``--bodies`` seeds (64 GPUs, 100 workloads each) and records the latency and the status. A request that
does not finish within the wait (202) is polled until its plan is there, so that the clients stay a
closed loop; it counts as an error, as does any answer other than 200 with a plan. At the end the
server's own metrics give the mean solve time, which bounds the throughput (solver processes / mean
solve time). CPU time per request is read from ``/proc`` over the measured period for the server
process, its solver processes and the clients (robust on a shared machine, where wall times are not).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

KEY = "b8-benchmark-planner-key-0123456789"
ROOT = Path(__file__).resolve().parent.parent
_MAIN = "import sys; from gpuplan.cli import main; sys.exit(main())"


def cluster() -> dict[str, Any]:
    """4 DGX H100 (two GPUs of each in MIG mode) and 4 PCIe L40S servers: 8 nodes, 64 GPUs."""
    nodes: list[dict[str, Any]] = []
    for i in range(4):
        nodes.append(
            {
                "name": f"dgx-{i}",
                "pool": "h100",
                "cpu_milli": 224_000,
                "memory_mib": 2_097_152,
                "topology": "dgx-h100",
                "gpus": [
                    {"index": g, "model": "H100-80GB", "numa": 1, "mig": {"instances": []}} for g in (6, 7)
                ],
            }
        )
    for i in range(4):
        nodes.append(
            {
                "name": f"l40s-{i}",
                "pool": "l40s",
                "cpu_milli": 128_000,
                "memory_mib": 1_048_576,
                "topology": "pcie-8x-l40s",
            }
        )
    return {"nodes": nodes}


def workloads(seed: int, count: int = 100) -> list[dict[str, Any]]:
    """A seeded demand mix: whole H100s (some over NVLink), L40S fractions, MIG slices and CPU-only work."""
    rng = random.Random(seed)
    teams = ["search", "ads", "vision", "nlp"]
    tiers = ["latency-sensitive", "standard", "standard", "background"]
    out: list[dict[str, Any]] = []
    for i in range(count):
        w: dict[str, Any] = {
            "id": f"w{i:03d}",
            "team": rng.choice(teams),
            "tier": rng.choice(tiers),
            "cpu_milli": rng.choice([2000, 4000, 8000]),
            "memory_mib": rng.choice([8192, 16384, 32768]),
        }
        kind = rng.random()
        if kind < 0.25:
            w["gpus"] = rng.choice([1, 1, 2, 4])
            w["gpu_models"] = ["H100-80GB"]
            if w["gpus"] > 1:
                w["topology"] = "nvlink"
        elif kind < 0.6:
            w["gpu_milli"] = rng.choice([100, 250, 300, 500])
            w["gpu_models"] = ["L40S-48GB"]
        elif kind < 0.8:
            w["mig_profile"] = rng.choice(["1g.10gb", "2g.20gb", "3g.40gb"])
            w["gpu_models"] = ["H100-80GB"]
        elif kind < 0.9:
            w["gpus"] = 1
            w["gpu_models"] = ["L40S-48GB"]
        out.append(w)
    return out


def body(seed: int, solver: str, time_limit_s: float) -> bytes:
    """One request body."""
    return json.dumps(
        {
            "cluster": cluster(),
            "workloads": workloads(seed),
            "team": "search",
            "options": {"solver": solver, "time_limit_s": time_limit_s, "seed": seed},
        }
    ).encode()


@dataclass
class Tally:
    """What the clients saw."""

    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    plan_statuses: dict[str, int] = field(default_factory=dict)
    transport_errors: int = 0


async def client(url: str, bodies: list[bytes], until: float, wait: float, tally: Tally, first: int) -> None:
    """Submit one request after another until ``until``."""
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=wait + 30) as http:
        k = first
        while time.monotonic() < until:
            payload = bodies[k % len(bodies)]
            k += 1
            t0 = time.perf_counter()
            try:
                r = await http.post("/v1/plans", params={"wait": wait}, content=payload)
            except httpx.HTTPError:
                tally.transport_errors += 1
                continue
            if r.status_code == 202:
                await finish(http, str(r.json()["id"]))
            tally.latencies.append(time.perf_counter() - t0)
            tally.statuses[r.status_code] = tally.statuses.get(r.status_code, 0) + 1
            if r.status_code == 200:
                status = str(r.json()["plan"]["status"])
                tally.plan_statuses[status] = tally.plan_statuses.get(status, 0) + 1


async def finish(http: httpx.AsyncClient, job_id: str) -> None:
    """Poll a job that outlived its wait until it ends."""
    while True:
        job = (await http.get(f"/v1/plans/{job_id}")).json()
        if job["status"] not in ("queued", "running"):
            return
        await asyncio.sleep(0.1)


def solve_seconds(url: str) -> tuple[float, int]:
    """Total solve seconds and solves, from the server's Prometheus metrics."""
    total, count = 0.0, 0
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("gpuplan_solve_duration_seconds_sum"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith("gpuplan_solve_duration_seconds_count"):
            count += int(float(line.rsplit(" ", 1)[1]))
    return total, count


def start_server(port: int, database: str, processes: int, log: Path) -> subprocess.Popen[bytes]:
    """``gpuplan serve`` on loopback, ready to plan."""
    env = {
        **os.environ,
        "GPUPLAN_API_KEYS": json.dumps({KEY: "planner"}),
        "GPUPLAN_SOLVER_PROCESSES": str(processes),
        "GPUPLAN_LIMIT_MAX_ACTIVE_JOBS": "1000",
        "GPUPLAN_LIMIT_RATE_PER_MINUTE": "0",  # 50 clients share one key: measure throughput, not limits
    }
    return launch(port, database, env, log)


def launch(port: int, database: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``gpuplan serve`` on loopback with environment ``env`` (output to ``log``), once it is ready."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", _MAIN, "serve", "--port", str(port), "--database", database],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not become ready")


def _ticks(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a process from ``/proc``; ``None`` once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(server: int) -> tuple[float, float]:
    """CPU seconds so far of the server process and of all its descendants (the solver processes and
    the fork server that starts them)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (found := _ticks(int(entry.name))) is not None:
            table[int(entry.name)] = found
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    below, todo = 0.0, list(children.get(server, []))
    while todo:
        pid = todo.pop()
        below += table[pid][1]
        todo += children.get(pid, [])
    return (table[server][1] if server in table else 0.0), below


def pct(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


async def run(
    args: argparse.Namespace, url: str, bodies: list[bytes], server: int
) -> tuple[Tally, float, tuple[float, float, float]]:
    """Warm up, then run the clients for the measured period; the tally, that period's length and the
    CPU seconds spent in it by the server process, its solver processes and the clients."""
    warm = Tally()
    await asyncio.gather(
        *(client(url, bodies, time.monotonic() + args.warmup, args.wait, warm, i) for i in range(4))
    )
    tally = Tally()
    before, mine = cpu_seconds(server), time.process_time()
    start = time.monotonic()
    until = start + args.duration
    await asyncio.gather(*(client(url, bodies, until, args.wait, tally, i * 7) for i in range(args.clients)))
    wall = time.monotonic() - start
    after = cpu_seconds(server)
    return tally, wall, (after[0] - before[0], after[1] - before[1], time.process_time() - mine)


def main() -> None:
    """Run B8 and print one row of figures (and append it as CSV with ``--out``)."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--wait", type=float, default=5.0)
    p.add_argument("--solver", default="greedy-fgd")
    p.add_argument("--time-limit", type=float, default=1.0)
    p.add_argument("--processes", type=int, default=2, help="solver processes of the server")
    p.add_argument("--bodies", type=int, default=200, help="distinct demands drawn (seeds)")
    p.add_argument("--database", help="SQLite file or PostgreSQL URL (default: a fresh temporary file)")
    p.add_argument("--out", help="append the row to this CSV")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = 18000 + os.getpid() % 1000
        database = args.database or str(Path(tmp) / "b8.db")
        server = start_server(port, database, args.processes, Path(tmp) / "serve.log")
        url = f"http://127.0.0.1:{port}"
        try:
            bodies = [body(seed, args.solver, args.time_limit) for seed in range(args.bodies)]
            tally, wall, cpu = asyncio.run(run(args, url, bodies, server.pid))
            solve_total, solves = solve_seconds(url)
        finally:
            server.terminate()
            server.wait(timeout=30)
    n = len(tally.latencies)
    ok = tally.statuses.get(200, 0)
    errors = n - ok + tally.transport_errors
    row = {
        "solver": args.solver,
        "clients": args.clients,
        "processes": args.processes,
        "requests": n,
        "throughput_rps": round(n / wall, 2),
        "p50_ms": round(1000 * pct(tally.latencies, 0.50), 1),
        "p95_ms": round(1000 * pct(tally.latencies, 0.95), 1),
        "p99_ms": round(1000 * pct(tally.latencies, 0.99), 1),
        "mean_ms": round(1000 * statistics.fmean(tally.latencies), 1),
        "errors": errors,
        "mean_solve_ms": round(1000 * solve_total / max(1, solves), 1),
        "solve_bound_rps": round(args.processes * solves / solve_total, 2) if solve_total else 0.0,
        "server_cpu_ms_per_req": round(1000 * cpu[0] / max(1, n), 1),
        "solver_cpu_ms_per_req": round(1000 * cpu[1] / max(1, n), 1),
        "client_cpu_ms_per_req": round(1000 * cpu[2] / max(1, n), 1),
        "statuses": json.dumps(tally.statuses, sort_keys=True),
        "plan_statuses": json.dumps(tally.plan_statuses, sort_keys=True),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(" ".join(f"{k}={v}" for k, v in row.items()))
    if args.out:
        append_row(Path(args.out), row)


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append ``row`` to the CSV ``path``, with a header line first when the file is new."""
    new = not path.exists()
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(row))
        if new:
            writer.writeheader()
        writer.writerow(row)


if __name__ == "__main__":
    main()

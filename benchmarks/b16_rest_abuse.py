"""B16 REST abuse: the server's memory and ``/healthz`` latency under two of issue probes.

``keyless``: 60 connections without a key announce 8 MB bodies and send what the kernel takes; the
server should answer each 401 from the headers and hold none of it. ``bodies``: 30 concurrent
submissions of one large valid body (2,000 nodes of 8 GPUs, 20,000 workloads, about 5.5 MB): at most
``max_parsing`` are parsed at once, the others answered 503 with ``Retry-After``. Prints the server's
resident and peak memory (``/proc``) and the ``/healthz`` latencies seen meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.b8_api_load import KEY, launch

HEAD = (
    b"POST /v1/plans HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 8000000\r\n\r\n"
)


def memory_mib(pid: int) -> tuple[int, int]:
    """Resident and peak resident memory of process ``pid``, in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) // 1024, int(fields["VmHWM"].split()[0]) // 1024


def large_body() -> bytes:
    """2,000 nodes of 8 L40S and 20,000 small workloads with long ids."""
    gpus = [{"index": g, "model": "L40S-48GB"} for g in range(8)]
    nodes = [
        {"name": f"node-{i:05d}", "cpu_milli": 64000, "memory_mib": 262144, "gpus": gpus} for i in range(2000)
    ]
    pad = "x" * 150
    work = [{"id": f"w{i:06d}-{pad}", "team": "ml", "gpu_milli": 100} for i in range(20000)]
    options = {"solver": "first-fit", "time_limit_s": 10}  # admitted: 2,000 replicas a second
    return json.dumps(
        {"cluster": {"nodes": nodes}, "workloads": work, "team": "ml", "options": options}
    ).encode()


def healthz_ms(url: str) -> float:
    start = time.perf_counter()
    httpx.get(f"{url}/healthz", timeout=30)
    return (time.perf_counter() - start) * 1000


def keyless(url: str, port: int, pid: int) -> dict[str, Any]:
    """60 keyless 8 MB uploads: how many were answered 401, what the kernel took, the server's memory."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(60)]
    sent = 0
    for s in socks:
        s.sendall(HEAD)
        s.settimeout(0.2)
        # The server refuses a keyless body after its headers: it stops reading (the send times out) or
        # closes the connection, and what was sent by then is what the kernel took.
        with contextlib.suppress(OSError):
            for _ in range(122):
                s.sendall(b"x" * 65536)
                sent += 65536
    time.sleep(2)
    answered = 0
    for s in socks:
        s.settimeout(1)
        # A connection the server closed without an answer counts as not answered 401.
        with contextlib.suppress(OSError):
            answered += s.recv(100).startswith(b"HTTP/1.1 401")
    result = {"answered_401": answered, "sent_mb": round(sent / 1e6), "rss_hwm_mib": memory_mib(pid)}
    result["healthz_ms"] = round(healthz_ms(url))
    for s in socks:
        s.close()
    return result


def bodies(url: str, pid: int, count: int) -> dict[str, Any]:
    """``count`` concurrent large submissions: their answers, the server's peak memory, /healthz."""
    raw = large_body()
    codes: list[int] = []
    latencies: list[float] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            latencies.append(healthz_ms(url))
            time.sleep(0.05)

    def post() -> None:
        headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
        with httpx.Client(timeout=300) as c:
            codes.append(c.post(f"{url}/v1/plans", content=raw, headers=headers).status_code)

    poller = threading.Thread(target=poll)
    poller.start()
    posts = [threading.Thread(target=post) for _ in range(count)]
    for t in posts:
        t.start()
    for t in posts:
        t.join()
    done.set()
    poller.join()
    latencies.sort()
    return {
        "body_mb": round(len(raw) / 1e6, 2),
        "codes": {c: codes.count(c) for c in sorted(set(codes))},
        "peak_mib": memory_mib(pid)[1],
        "healthz_p50_ms": round(latencies[len(latencies) // 2]),
        "healthz_max_ms": round(latencies[-1]),
    }


def main() -> None:
    """Run one probe against a fresh server on a temporary SQLite file."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("probe", choices=["keyless", "bodies"])
    ap.add_argument("--count", type=int, default=30, help="concurrent submissions (bodies)")
    ap.add_argument("--port", type=int, default=18731)
    args = ap.parse_args()
    env = {
        **os.environ,
        "GPUPLAN_API_KEYS": json.dumps({KEY: "planner"}),
        "GPUPLAN_SOLVER_PROCESSES": "1",
        "GPUPLAN_LIMIT_MAX_TIME_LIMIT_S": "300",
    }
    with tempfile.TemporaryDirectory() as tmp:
        proc = launch(args.port, str(Path(tmp) / "b16.db"), env, Path(tmp) / "serve.log")
        url = f"http://127.0.0.1:{args.port}"
        try:
            print("start rss/hwm MiB", memory_mib(proc.pid))
            result = (
                keyless(url, args.port, proc.pid)
                if args.probe == "keyless"
                else bodies(url, proc.pid, args.count)
            )
            print(json.dumps(result))
        finally:
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()

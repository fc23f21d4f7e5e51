"""Helpers for the API tests: small planning bodies and a real ``gpuplan serve`` on a loopback port."""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient

from gpuplan.models.catalog import data_dir
from tests.conftest import running_slow

ADMIN = "admin-key-0123456789abcdef"
PLANNER = "planner-key-0123456789abcdef"
VIEWER_ML = "viewer-ml-key-0123456789abcdef"
VIEWER_WEB = "viewer-web-key-0123456789abcdef"
KEYS = {ADMIN: "admin", PLANNER: "planner", VIEWER_ML: "viewer:ml", VIEWER_WEB: "viewer:web"}
#: ``max_active_jobs`` of the test server.
MAX_ACTIVE = 4
NOW = "2026-11-29T12:00:00+00:00"
ROOT = Path(__file__).resolve().parent.parent
_MAIN = "import sys; from gpuplan.cli import main; sys.exit(main())"


def auth(key: str) -> dict[str, str]:
    """The bearer header for ``key``."""
    return {"Authorization": f"Bearer {key}"}


def tiny_body(team: str = "ml", *, solver: str = "cpsat", time_limit_s: float = 1.0) -> dict[str, Any]:
    """Two 4-GPU nodes and three small workloads of one team."""
    gpus = [{"index": i, "model": "L40S-48GB"} for i in range(4)]
    node = {"cpu_milli": 64000, "memory_mib": 262144, "gpus": gpus}
    return {
        "cluster": {"nodes": [{"name": "n1", **node}, {"name": "n2", **node}]},
        "workloads": [
            {"id": "train", "team": team, "gpus": 2, "cpu_milli": 8000, "memory_mib": 65536},
            {"id": "serve", "team": team, "tier": "latency-sensitive", "gpus": 1, "replicas": 2},
            {"id": "nb", "team": team, "tier": "background", "gpu_milli": 300},
        ],
        "options": {"solver": solver, "time_limit_s": time_limit_s, "now": NOW},
    }


def example_body(time_limit_s: float = 2.0) -> dict[str, Any]:
    """The bundled example fleet and demand (112 GPUs, 189 workloads): CP-SAT uses its whole time limit."""
    ex = data_dir() / "examples"

    def load(name: str) -> Any:
        return yaml.safe_load((ex / name).read_text())

    body: dict[str, Any] = json.loads(
        json.dumps(
            {
                "cluster": load("cluster.yaml"),
                "workloads": load("workloads.yaml")["workloads"],
                "policy": load("policy.yaml"),
                "team": "ml",
                "options": {"time_limit_s": time_limit_s, "now": (ex / "now.txt").read_text().strip()},
            },
            default=str,
        )
    )
    return body


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, so that no server outlives an aborted run."""
    libc = ctypes.CDLL(None)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class Server:
    """``gpuplan serve`` in a child process on a free loopback port."""

    def __init__(self, database: str, log: Path, env: dict[str, str] | None = None) -> None:
        if running_slow() is False:
            # The fast subset (-m "not slow") starts no server: in-process tests use TestClient.
            raise RuntimeError("a test that starts a real gpuplan serve must be marked slow")
        self.database = database
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {
            **os.environ,
            "GPUPLAN_API_KEYS": json.dumps(KEYS),
            "GPUPLAN_SOLVER_PROCESSES": "1",
            "GPUPLAN_LIMIT_MAX_ACTIVE_JOBS": str(MAX_ACTIVE),
            "GPUPLAN_LIMIT_MAX_TIME_LIMIT_S": "2",
        }
        full_env.update(env or {})
        self.log_path = log
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _MAIN, "serve", "--port", str(self.port), "--database", database],
            env=full_env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        self._wait_ready()

    def _wait_ready(self, timeout_s: float = 90.0) -> None:
        """Wait until the server answers (its solver processes may still be starting: jobs then queue)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gpuplan serve exited with code {self.proc.returncode}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError("gpuplan serve did not become ready")

    def client(self, key: str | None = None) -> httpx.Client:
        """A client of this server (with ``key`` as bearer token)."""
        return httpx.Client(base_url=self.url, headers=auth(key) if key else None, timeout=30.0)

    def stop(self, *, hard: bool = False) -> None:
        """SIGTERM (or SIGKILL with ``hard``) and wait for the process."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.log.close()


def wait_status(
    client: httpx.Client | TestClient, job_id: str, states: set[str], timeout_s: float = 60.0
) -> dict[str, Any]:
    """Poll a job until its status is one of ``states``."""
    deadline = time.monotonic() + timeout_s
    while True:
        job: dict[str, Any] = client.get(f"/v1/plans/{job_id}").json()
        if job["status"] in states or time.monotonic() > deadline:
            return job
        time.sleep(0.05)


def _process(pid: int) -> tuple[int, str, str] | None:
    """Parent pid, state letter and command line of a process; ``None`` once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], cmdline


def solver_processes(server: Server) -> set[int]:
    """The live solver processes of ``server``: children of its multiprocessing fork server (which the
    server itself started), zombies excluded."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (info := _process(int(entry.name))) is not None:
            table[int(entry.name)] = info
    forkservers = {
        pid for pid, (parent, _, cmd) in table.items() if parent == server.proc.pid and "forkserver" in cmd
    }
    return {pid for pid, (parent, state, _) in table.items() if parent in forkservers and state not in "ZX"}


def wait_gone(pid: int, timeout_s: float = 30.0) -> bool:
    """Poll until process ``pid`` has ended (gone, or a zombie its parent has not reaped yet)."""
    deadline = time.monotonic() + timeout_s
    while (info := _process(pid)) is not None and info[1] not in "ZX":
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


_shared: list[Server] = []


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Server:
    """One ``gpuplan serve`` on a SQLite file for the whole run (one solver process).

    Test modules import this fixture, and pytest then keeps one copy per module: the server itself is
    shared through ``_shared`` and stopped when the test process exits.
    """
    if not _shared or _shared[0].proc.poll() is not None:
        root = tmp_path_factory.mktemp("live")
        server = Server(str(root / "gpuplan.db"), root / "serve.log")
        atexit.register(server.stop)
        _shared[:] = [server]
    return _shared[0]


def restart_live(server: Server) -> Server:
    """Kill the shared server (SIGKILL: nothing is cleaned up) and start a new one on its database."""
    server.stop(hard=True)
    second = Server(server.database, server.log_path.with_name("serve-restarted.log"))
    atexit.register(second.stop)
    _shared[:] = [second]
    return second


def drain(server: Server) -> None:
    """Cancel every queued or running job of ``server``."""
    with server.client(ADMIN) as c:
        for state in ("queued", "running"):
            for job in c.get("/v1/plans", params={"status": state, "limit": 200}).json()["items"]:
                c.delete(f"/v1/plans/{job['id']}")


def at_once(n: int, call: Callable[[int], Any]) -> list[Any]:
    """``call(i)`` for ``i`` in ``range(n)`` on ``n`` threads released together; what each returned or
    raised."""
    start = threading.Barrier(n)
    out: list[Any] = [None] * n

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = call(i)
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out

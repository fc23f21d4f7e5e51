"""Operations of ``gpuplan serve`` as real processes: one server per database, damaged databases and
bad settings refused at start in one line, passwords never printed, workload ids with ``/`` explained."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.api.store import Actor, Store
from gpuplan.planner.store.records import JobInput, JobStatus
from tests._api import (
    _MAIN,
    KEYS,
    PLANNER,
    ROOT,
    Server,
    example_body,
    free_port,
    live,
    tiny_body,
    wait_status,
)
from tests._factories import queued_job

__all__ = ["live"]

#: The whole module runs ``gpuplan serve`` as real processes: slow.
pytestmark = pytest.mark.slow


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``gpuplan serve ARGS`` to its end (it is expected to refuse to start)."""
    full_env = {**os.environ, "GPUPLAN_API_KEYS": json.dumps(KEYS), **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", _MAIN, "serve", "--port", str(free_port()), *args],
        env=full_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a refused start (exit 2, nothing else on stdout or stderr)."""
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_second_server_on_the_same_database_refuses_to_start(db_url: str, tmp_path: Path) -> None:
    """On a SQLite file it would mark the first server's jobs interrupted; it names the server holding
    the database. (On PostgreSQL servers share the database: ``test_api_queue.py``.)"""
    first = Server(db_url, tmp_path / "first.log")
    try:
        with first.client(PLANNER) as c:
            job_id = c.post("/v1/plans", json=example_body(time_limit_s=2.0)).json()["id"]
            assert wait_status(c, job_id, {"running"})["status"] == "running"
            line = _one_line(_serve("--database", first.database))
            expected = f"database {first.database} is in use by another gpuplan server"
            assert line.startswith(f"gpuplan: error: {expected} (pid {first.proc.pid}, host ")
            assert socket.gethostname() in line
            # The first server's running job was left alone and finishes.
            assert c.get(f"/v1/plans/{job_id}").json()["status"] in ("running", "done")
            assert wait_status(c, job_id, {"done", "failed", "interrupted"})["status"] == "done"
    finally:
        first.stop()
    # Once the first has stopped, a server starts on the database again.
    second = Server(first.database, tmp_path / "second.log")
    second.stop()


def _damaged(tmp_path: Path) -> str:
    """A store with some jobs whose pages after the first few are overwritten."""
    path = tmp_path / "damaged.db"
    store = Store.open(str(path))
    data = JobInput("f" * 64, json.dumps({"pad": "x" * 4000}), {})
    for i in range(50):
        job = queued_job(f"{i:032x}").model_copy(
            update={"status": JobStatus.DONE, "nodes": 1, "workloads": 1}
        )
        store.create_job(job, data, Actor("abc", "planner"), {})
    store.close()
    raw = bytearray(path.read_bytes())
    page = 4096
    for start in range(8 * page, len(raw) - page, 3 * page):
        raw[start : start + page] = b"\xa5" * page
    path.write_bytes(bytes(raw))
    return str(path)


def test_a_damaged_database_is_refused_at_start(tmp_path: Path) -> None:
    db = _damaged(tmp_path)
    line = _one_line(_serve("--database", db))
    assert line.startswith(f"gpuplan: error: database {db} ")
    # Making a key on it fails the same way instead of with a traceback.
    line = _one_line(_serve("--database", db, "--create-key", "planner"))
    assert line.startswith(f"gpuplan: error: database {db} ")


def test_the_postgresql_password_is_never_printed() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens on it
        url = f"postgresql://planner:s3cret-pw@127.0.0.1:{port}/gpuplan"
        for args in (("--database", url), ("--database", url, "--create-key", "planner")):
            proc = _serve(*args)
            line = _one_line(proc)
            assert "s3cret-pw" not in proc.stderr + proc.stdout
            assert f"postgresql://planner:***@127.0.0.1:{port}/gpuplan" in line


def test_bad_keys_in_the_environment_are_one_line(tmp_path: Path) -> None:
    for args in ((), ("--create-key", "planner")):
        line = _one_line(
            _serve("--database", str(tmp_path / "k.db"), *args, env={"GPUPLAN_API_KEYS": "notjson"})
        )
        assert "api_keys" in line and "GPUPLAN_" in line


def test_a_workload_id_with_a_slash_is_explained(live: Server) -> None:
    body = tiny_body(solver="first-fit")
    body["workloads"].append({"id": "ml/big", "team": "ml", "gpus": 4, "replicas": 2})
    with live.client(PLANNER) as c:
        out = c.post("/v1/plans", params={"wait": 60}, json=body).json()
        job_id = out["job"]["id"]
        assert "ml/big" in {u["workload"] for u in out["plan"]["unplaced"]}
        r = c.get(f"/v1/plans/{job_id}/explain/ml/big", params={"counterfactuals": 0, "time_limit_s": 1})
        assert r.status_code == 200, r.text
        assert r.json() and all(e["workload"] == "ml/big" for e in r.json())
        assert c.get(f"/v1/plans/{job_id}/explain/ml/ghost").status_code == 404

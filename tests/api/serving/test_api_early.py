"""Work before authentication and unbounded bodies: the key is checked from the headers before any body
is read, slow bodies time out, unknown keys are throttled per client address, open connections are
capped, and large bodies are parsed a bounded number at a time."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuplan.api import create_app
from gpuplan.api.settings import Limits, Settings
from tests._api import KEYS, PLANNER, Server, auth, live, tiny_body

__all__ = ["live"]

#: Seconds a test waits for an answer the server should give at once.
PROMPT_S = 10.0


def _head(server: Server, headers: dict[str, str], length: int, sent: bytes = b"") -> socket.socket:
    """A connection that sent the request line and headers of ``POST /v1/plans`` announcing a body of
    ``length`` bytes, then ``sent`` of it, and nothing more."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=PROMPT_S)
    lines = ["POST /v1/plans HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers.items()] + [f"Content-Length: {length}"]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + sent)
    return sock


def _status(sock: socket.socket) -> tuple[int, str]:
    """The status and the raw answer read from ``sock`` (``socket.timeout`` if none comes in time)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1]), data.decode("latin-1")


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer not-a-key-0123456789"}])
def test_no_valid_key_is_refused_before_the_body(live: Server, headers: dict[str, str]) -> None:
    with _head(live, headers, 8_000_000) as sock:
        status, answer = _status(sock)  # the 8 MB never come: an answer now means the body was not awaited
    assert status == 401
    assert "www-authenticate: bearer" in answer.lower()


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with a 1 s body timeout, 3 unknown keys per address, and at most 6 connections."""
    root = tmp_path_factory.mktemp("strict")
    env = {
        "GPUPLAN_LIMIT_BODY_TIMEOUT_S": "1",
        "GPUPLAN_LIMIT_AUTH_FAILURE_BURST": "3",
        "GPUPLAN_LIMIT_AUTH_FAILURES_PER_MINUTE": "1",
        "GPUPLAN_LIMIT_MAX_CONNECTIONS": "6",
    }
    server = Server(str(root / "gpuplan.db"), root / "serve.log", env=env)
    yield server
    server.stop()


@pytest.mark.slow  # its own gpuplan serve
def test_a_slow_body_times_out(strict: Server) -> None:
    with _head(strict, auth(PLANNER), 1000, b'{"clu') as sock:
        start = time.monotonic()
        status, _ = _status(sock)
    assert status == 408
    assert time.monotonic() - start < PROMPT_S


@pytest.mark.slow  # its own gpuplan serve
def test_unknown_keys_are_throttled_per_address(strict: Server) -> None:
    with strict.client() as c:
        codes = [c.get("/v1/plans", headers=auth(f"bogus-key-{i:020d}")).status_code for i in range(5)]
        assert codes == [401, 401, 401, 429, 429]
        refused = c.get("/v1/plans", headers=auth("bogus-key-again-0000000000"))
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["limit"] == "auth_failures_per_minute"
        # A configured key still passes: it needs no lookup.
        assert c.get("/v1/plans", headers=auth(PLANNER)).status_code == 200


@pytest.mark.slow  # its own gpuplan serve
def test_open_connections_are_capped(strict: Server) -> None:
    idle = [socket.create_connection(("127.0.0.1", strict.port), timeout=PROMPT_S) for _ in range(6)]
    try:
        time.sleep(0.5)  # let the server accept them all
        with strict.client(PLANNER) as c:
            assert c.get("/healthz").status_code == 503
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.5)
    with strict.client(PLANNER) as c:
        assert c.get("/healthz").status_code == 200


@pytest.fixture
def app_client(tmp_path: Path) -> Iterator[TestClient]:
    """An in-process app that parses one body of 1 KiB or more at a time."""
    settings = Settings(
        database=str(tmp_path / "gpuplan.db"),
        api_keys=KEYS,
        solver_processes=0,
        limits=Limits(max_parsing=1, large_body_bytes=1024),
    )
    with TestClient(create_app(settings)) as client:
        yield client


def test_a_large_body_beyond_the_parsing_slots_gets_503(app_client: TestClient) -> None:
    small = tiny_body(solver="first-fit")
    large = tiny_body(solver="first-fit")
    large["workloads"] += [{"id": f"pad-{i}", "team": "ml", "gpu_milli": 100} for i in range(40)]
    assert len(json.dumps(small)) < 1024 <= len(json.dumps(large))
    gate = app_client.app.state.parsing  # type: ignore[attr-defined]
    gate.busy = gate.slots  # every slot taken by a parse in progress
    try:
        r = app_client.post("/v1/plans", json=large, headers=auth(PLANNER))
        assert r.status_code == 503 and int(r.headers["Retry-After"]) >= 1, r.text
        r = app_client.post("/v1/plans", json=small, headers=auth(PLANNER))
        assert r.status_code == 202, r.text  # a small body is parsed whatever the slots
    finally:
        gate.busy = 0
    r = app_client.post("/v1/plans", json=large, headers=auth(PLANNER))
    assert r.status_code == 202, r.text

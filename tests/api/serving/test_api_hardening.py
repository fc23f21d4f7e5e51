"""Issue 44: nothing unauthenticated costs memory, every limit is atomic.

Bodies outside ``/v1/`` are answered unread; resubmissions are admitted under the same lock as
submissions (one server on SQLite, two on PostgreSQL); the unknown-key throttle takes its token before
the store look-up; a connection must send its request's headers in time; a large body holds its place in
the parse gate while it is received; and a frozen PostgreSQL (a proxy that stops forwarding) gives 503s
and a not-ready ``/readyz`` within the database time limit, logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy import make_url

from gpuplan.api import create_app
from gpuplan.api.keys import KeyStore, key_hash
from gpuplan.api.serving import uvicorn_options
from gpuplan.api.settings import Limits, Settings
from gpuplan.api.store import Actor, Store
from gpuplan.planner.store.records import JobInput, JobStatus
from tests._api import (
    KEYS,
    PLANNER,
    Server,
    at_once,
    auth,
    drain,
    example_body,
    free_port,
    live,
    tiny_body,
    wait_status,
)
from tests._factories import queued_job
from tests.conftest import fresh_postgres

__all__ = ["live"]

#: The whole module runs real servers on loopback (``gpuplan serve``, uvicorn in a thread): slow.
pytestmark = pytest.mark.slow

#: Seconds a test waits for an answer the server should give at once (only to avoid a hang).
PROMPT_S = 15.0
LIMIT = 4
CALLERS = 40




def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=PROMPT_S)


def _request(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (``socket.timeout`` if it does not)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _answer(raw: bytes) -> tuple[int, dict[str, str], Any]:
    """Status, headers (lower-case names) and JSON body of one raw HTTP answer."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return (
        int(lines[0].split(" ", 2)[1]),
        {k.lower(): v for k, v in headers.items()},
        json.loads(body or b"null"),
    )


# --- 1. bodies outside /v1/ -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("POST", "/healthz", 405), ("POST", "/", 404), ("PUT", "/docs", 405), ("GET", "/healthz", 400)],
)
@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_a_keyless_body_outside_v1_is_answered_unread(
    live: Server, method: str, path: str, status: int, framing: str
) -> None:
    """The request announces 8 MB (or a chunked body) and sends none of it: an answer that comes back
    means the server did not wait for the body; it closes the connection after it."""
    framed = {"Content-Length": "8000000"} if framing == "length" else {"Transfer-Encoding": "chunked"}
    with _connect(live.port) as sock:
        sock.sendall(_request(method, path, {"Content-Type": "application/json", **framed}))
        got, headers, body = _answer(_until_closed(sock))
    assert got == status, body
    assert headers["content-type"] == "application/json" and headers["connection"] == "close"
    assert isinstance(body["detail"], str)
    if status == 405:
        assert "GET" in headers["allow"] and method not in headers["allow"]
    with httpx.Client(base_url=live.url) as c:
        assert c.get("/healthz").status_code == 200  # bodiless requests outside /v1/ are as before


# --- 2. resubmissions under the admission lock ------------------------------------------------------


def _cancelled_jobs(database: str, n: int) -> list[str]:
    """``n`` cancelled jobs stored directly (resubmittable), with an input no solver will get to."""
    store = Store.open(database)
    try:
        ids = [uuid.uuid4().hex for _ in range(n)]
        for job_id in ids:
            store.create_job(queued_job(job_id), JobInput("f" * 64, "{}", {}), Actor("abc", "planner"), {})
            assert store.finish(job_id, JobStatus.CANCELLED)
        return ids
    finally:
        store.close()


def _active(database: str) -> int:
    store = Store.open(database)
    try:
        counts = store.status_counts()
    finally:
        store.close()
    return counts.get("queued", 0) + counts.get("running", 0)


def test_concurrent_resubmits_admit_at_most_the_limit(db_url: str, tmp_path: Path) -> None:
    """40 resubmissions at once with ``max_active_jobs`` 4: on SQLite one server whose one solver
    process is busy with a long job (3 places left), on PostgreSQL two servers without solver processes
    (4 places): exactly the places left are taken, the others get 429 naming the limit."""
    env = {"GPUPLAN_LIMIT_MAX_ACTIVE_JOBS": str(LIMIT), "GPUPLAN_LIMIT_MAX_TIME_LIMIT_S": "120"}
    sqlite = not db_url.startswith("postgresql")
    if sqlite:
        servers = [Server(db_url, tmp_path / "serve.log", env=env)]
    else:
        env["GPUPLAN_SOLVER_PROCESSES"] = "0"
        servers = [Server(db_url, tmp_path / f"serve-{i}.log", env=env) for i in range(2)]
    try:
        busy = 0
        if sqlite:
            with servers[0].client(PLANNER) as c:
                job = c.post("/v1/plans", json=example_body(time_limit_s=90)).json()["id"]
                assert wait_status(c, job, {"running"})["status"] == "running"
            busy = 1
        ids = _cancelled_jobs(db_url, CALLERS)
        clients = [s.client(PLANNER) for s in servers]
        try:
            out = at_once(CALLERS, lambda i: clients[i % len(clients)].post(f"/v1/plans/{ids[i]}/resubmit"))
        finally:
            for c in clients:
                c.close()
        codes = sorted(r.status_code for r in out)
        left = LIMIT - busy
        assert codes == [202] * left + [429] * (CALLERS - left), codes
        refused = [r for r in out if r.status_code == 429]
        assert all(
            r.json()["limit"] == "max_active_jobs" and int(r.headers["Retry-After"]) >= 1 for r in refused
        )
        assert _active(db_url) == LIMIT
        drain(servers[0])
    finally:
        for s in servers:
            s.stop()


# --- 3. the unknown-key throttle takes first --------------------------------------------------------


@contextmanager
def _in_process(settings: Settings) -> Iterator[str]:
    """The app on a real uvicorn server on loopback, in a thread of this process (so that a test can
    count what it does), with the options ``gpuplan serve`` runs it with; yields its URL."""
    port = free_port()
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=port, log_config=None, **uvicorn_options(settings)
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


BURST = 10


def test_unknown_keys_are_looked_up_at_most_burst_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Look-ups take a tenth of a second (so that they overlap). 30 requests at once with one stored key
    share one look-up and all pass (the token each took is given back); then 60 requests at once, each
    with a different unknown key, from one address whose burst is 10: exactly 10 are looked up (401),
    the other 50 get 429 without a look-up."""
    looked_up: list[str] = []
    lock = threading.Lock()
    original = KeyStore.get

    def counted(self: KeyStore, digest: str) -> Any:
        with lock:
            looked_up.append(digest)
        time.sleep(0.1)
        return original(self, digest)

    monkeypatch.setattr(KeyStore, "get", counted)
    database = str(tmp_path / "gpuplan.db")
    stored = "stored-key-0123456789abcdef"
    store = Store.open(database)
    KeyStore(store.engine).add(key_hash(stored), "planner")
    store.close()
    limits = Limits(auth_failure_burst=BURST, auth_failures_per_minute=1)
    settings = Settings(database=database, api_keys=KEYS, limits=limits, solver_processes=0)
    with _in_process(settings) as url, httpx.Client(base_url=url, timeout=PROMPT_S) as c:
        same = at_once(30, lambda _: c.get("/v1/plans", headers=auth(stored)))
        assert [r.status_code for r in same] == [200] * 30
        assert 1 <= len(looked_up) < 30
        looked_up.clear()
        out = at_once(60, lambda i: c.get("/v1/plans", headers=auth(f"unknown-key-{i:020d}")))
    codes = [r.status_code for r in out]
    assert len(looked_up) == BURST, len(looked_up)
    assert codes.count(401) == BURST and codes.count(429) == 60 - BURST, codes
    refused = next(r for r in out if r.status_code == 429)
    assert refused.json()["limit"] == "auth_failures_per_minute" and int(refused.headers["Retry-After"]) >= 1


# --- 4. headers in time; large bodies hold their place while received -------------------------------


@pytest.fixture(scope="module")
def timed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose connections must send their headers within 1 s, with 6 connection places, that
    receives and parses one body of 1 KiB or more at a time."""
    root = tmp_path_factory.mktemp("timed")
    env = {
        "GPUPLAN_LIMIT_HEADER_TIMEOUT_S": "1",
        "GPUPLAN_LIMIT_MAX_CONNECTIONS": "6",
        "GPUPLAN_LIMIT_MAX_PARSING": "1",
        "GPUPLAN_LIMIT_LARGE_BODY_BYTES": "1024",
    }
    server = Server(str(root / "gpuplan.db"), root / "serve.log", env=env)
    yield server
    server.stop()


@pytest.mark.parametrize("sent", [b"", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"])
def test_a_connection_without_whole_headers_is_closed(timed: Server, sent: bytes) -> None:
    with _connect(timed.port) as sock:
        sock.sendall(sent)
        answer = _until_closed(sock)  # the server closes it: no socket.timeout
    if sent:
        status, _, body = _answer(answer)
        assert status == 408 and body["limit"] == "header_timeout_s" and body["value"] == 1
    else:
        assert answer == b""


def test_a_kept_alive_connection_must_send_its_next_headers_in_time(timed: Server) -> None:
    with _connect(timed.port) as sock:
        sock.sendall(_request("GET", "/healthz", {}))
        first = b""
        while b'"ok"' not in first:
            first += sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 12")
        assert _answer(_until_closed(sock))[0] == 408


def test_connections_held_with_partial_headers_are_freed(timed: Server) -> None:
    """Six connections that send half a request fill every place: /healthz gets 503 meanwhile; the
    server closes them itself, and then answers again."""
    held = [_connect(timed.port) for _ in range(6)]
    try:
        for sock in held:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        time.sleep(0.3)
        with httpx.Client(base_url=timed.url) as c:
            assert c.get("/healthz").status_code == 503
        for sock in held:
            _until_closed(sock)
        with httpx.Client(base_url=timed.url) as c:
            assert c.get("/healthz").status_code == 200
    finally:
        for sock in held:
            sock.close()


def test_a_large_body_holds_its_place_while_it_is_received(timed: Server) -> None:
    """One large body is being received (its first bytes sent, then a pause): a second one, declared or
    chunked, is answered 503 with Retry-After before its body is read; once the first connection is
    gone, a large body is taken again."""
    body = json.dumps(tiny_body(solver="first-fit") | {"team": "x" * 2000}).encode()
    assert len(body) >= 1024
    headers = {"Content-Type": "application/json", **auth(PLANNER)}
    with _connect(timed.port) as first:
        first.sendall(
            _request("POST", "/v1/plans", {**headers, "Content-Length": str(len(body))}) + body[:10]
        )
        time.sleep(0.3)
        for framed in ({"Content-Length": str(len(body))}, {"Transfer-Encoding": "chunked"}):
            with _connect(timed.port) as second:
                sent = _request("POST", "/v1/plans", {**headers, **framed})
                if "Transfer-Encoding" in framed:
                    sent += f"{len(body):x}\r\n".encode() + body + b"\r\n"  # large; no last chunk
                second.sendall(sent)
                status, answer_headers, answer = _answer(_until_closed(second))
            assert status == 503, answer
            assert int(answer_headers["retry-after"]) >= 1 and "at most 1 at once" in answer["detail"]
    deadline = time.monotonic() + PROMPT_S
    with httpx.Client(base_url=timed.url, headers=headers) as c:
        while (r := c.post("/v1/plans", content=body)).status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.1)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "team"], r.text


# --- 5. a frozen PostgreSQL -------------------------------------------------------------------------


class PausableProxy:
    """A TCP proxy on loopback, in a thread, that can stop forwarding (both ways, new connections too)
    while keeping every connection open: to the server behind it, the database looks frozen."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.loop = asyncio.new_event_loop()
        self.forwarding = asyncio.Event()
        self.stopping = asyncio.Event()
        self.port = 0
        ready = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._serve(ready),))
        self.thread.start()
        assert ready.wait(10)

    async def _serve(self, ready: threading.Event) -> None:
        self.forwarding.set()
        server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        await self.stopping.wait()
        server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            with contextlib.suppress(OSError):  # a side that hung up ends the pipe
                while data := await reader.read(65536):
                    await self.forwarding.wait()
                    writer.write(data)
                    await writer.drain()
        finally:
            writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.forwarding.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    def pause(self) -> None:
        self.loop.call_soon_threadsafe(self.forwarding.clear)

    def resume(self) -> None:
        self.loop.call_soon_threadsafe(self.forwarding.set)

    def close(self) -> None:
        """Stop: every connection through the proxy is closed."""
        self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """A new database on the CI PostgreSQL (skip without one), dropped after the test."""
    with fresh_postgres() as url:
        yield url


#: The database time limit of the frozen-database test (psycopg waits at least 2 s to connect).
DB_TIMEOUT_S = 2


def test_a_frozen_postgresql_gives_503_and_not_ready(postgres_database: str, tmp_path: Path) -> None:
    """The proxy to PostgreSQL stops forwarding (connections stay open, nothing answers): a submission,
    then submissions, reads, resubmissions and ``/readyz`` twelve at once, are all answered (503 with
    Retry-After, not ready); the outage is logged once, and the server is ready again once the proxy
    forwards again."""
    url = make_url(postgres_database)
    proxy = PausableProxy(str(url.host), int(url.port or 5432))
    through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    env = {"GPUPLAN_DATABASE_TIMEOUT_S": str(DB_TIMEOUT_S)}
    server = Server(through, tmp_path / "serve.log", env=env)
    try:
        with server.client(PLANNER) as c:
            done = c.post("/v1/plans", params={"wait": 30}, json=tiny_body(solver="first-fit"))
            job = done.json()["job"]["id"]
            assert c.get("/readyz").status_code == 200
            proxy.pause()
            calls: list[Callable[[], httpx.Response]] = [
                lambda: c.post("/v1/plans", json=tiny_body(solver="first-fit")),
                lambda: c.get(f"/v1/plans/{job}"),
                lambda: c.post(f"/v1/plans/{job}/resubmit"),
                lambda: c.get("/readyz"),
            ]
            first = calls[0]()
            together = at_once(12, lambda i: calls[i % len(calls)]())
            proxy.resume()
            answers = [first, *(r for r in together if r.url.path != "/readyz")]
            readies = [r for r in together if r.url.path == "/readyz"]
            assert [r.status_code for r in answers] == [503] * len(answers), [r.text for r in answers]
            assert all(int(r.headers["Retry-After"]) >= 1 for r in answers)
            assert all("database" in r.json()["detail"] for r in answers)
            for r in readies:
                assert r.status_code == 503 and r.json()["checks"]["database"] == "unreachable", r.text
            deadline = time.monotonic() + 60
            while c.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, "not ready again after the database returned"
                time.sleep(0.2)
            assert c.post("/v1/plans", json=tiny_body(solver="first-fit")).status_code == 202
    finally:
        server.stop()
        proxy.close()
    log = (tmp_path / "serve.log").read_text()
    assert log.count("database unreachable") == 1, log
    assert log.count("database reachable again") == 1, log
    assert "Traceback" not in log, log

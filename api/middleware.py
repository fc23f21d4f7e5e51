"""ASGI middleware: the API key checked from the headers before any body is read, requests with a body
outside ``/v1/`` answered unread, the request-body size and time limits, and the request metrics."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuplan.api.auth import Keyring, RateLimiter
from gpuplan.api.bodies import BODY_HOLD, BodyHold, ParseGate
from gpuplan.api.errors import allowed_methods
from gpuplan.api.metrics import ApiMetrics
from gpuplan.api.outage import Outage, unreachable

#: The answer to a request without a valid API key.
UNAUTHENTICATED = "a valid API key is required (Authorization: Bearer <key> or X-API-Key: <key>)"
#: Methods whose requests carry no body the service reads.
_BODILESS = ("GET", "HEAD", "DELETE", "OPTIONS")


async def _answer(
    send: Send, status: int, body: dict[str, Any], headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    """A JSON answer that closes the connection (the request's body, if any, is left unread)."""
    raw = json.dumps(body).encode()
    fixed = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*fixed, (b"connection", b"close"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": raw})


def has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request announces a body: a ``Content-Length`` above 0, or chunked transfer."""
    for name, value in headers:
        if name == b"content-length" and (not value.strip().isdigit() or int(value) > 0):
            return True
        if name == b"transfer-encoding" and b"chunked" in value.lower():
            return True
    return False


async def _unread(scope: Scope, send: Send) -> None:
    """The answer to a request with a body outside ``/v1/``, where no route takes one, without reading
    the body: 404 when no route has the path, 405 (with ``Allow``) when none serves the method there,
    else 400; JSON, and the connection closed."""
    method, path = str(scope["method"]), str(scope["path"])
    allowed = allowed_methods(scope)
    if method in allowed:
        await _answer(send, 400, {"detail": f"{method} {path} takes no request body"})
    elif allowed:
        await _answer(send, 405, {"detail": "Method Not Allowed"}, ((b"allow", ", ".join(allowed).encode()),))
    else:
        await _answer(send, 404, {"detail": "Not Found"})


def request_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The API key of a request: the bearer token of ``Authorization``, else ``X-API-Key``."""
    bearer = header = None
    for name, value in headers:
        if name == b"authorization":
            scheme, _, credentials = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                bearer = credentials.strip()
        elif name == b"x-api-key":
            header = value.decode("latin-1")
    return bearer or header or None


class KeyFirst:
    """Check the API key of every ``/v1/`` request from its headers, before anything reads its body: a
    client without a valid key gets 401 at once and the connection closed, whatever body it announced.
    Outside ``/v1/`` no route takes a body: a request that announces one is answered at once, unread
    (:func:`_unread`), so that no client without a key makes the server hold a body.

    Each key the store has to look up takes one of the client address's ``burst`` tokens (refilled at
    ``per_minute``) before the look-up, and gives it back if the key is valid: an address out of tokens
    gets 429 without a look-up, so that however many requests with unknown keys arrive at once, at most
    ``burst`` are looked up (a key known without the store still passes; requests with the same key
    share one look-up). The caller found is left in the request's state for the routes."""

    def __init__(self, app: ASGIApp, per_minute: int, burst: int) -> None:
        self.app = app
        self.failures = RateLimiter(per_minute, burst)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass on a request with a valid key (or outside ``/v1/`` without a body); answer any other at
        once."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not str(scope["path"]).startswith("/v1/"):
            if has_body(scope["headers"]):
                await _unread(scope, send)
            else:
                await self.app(scope, receive, send)
            return
        key = request_key(scope["headers"])
        if key is None:
            await _answer(send, 401, {"detail": UNAUTHENTICATED}, ((b"www-authenticate", b"Bearer"),))
            return
        state = scope["app"].state
        keyring: Keyring = state.keys
        caller = keyring.known(key)
        if caller is None:
            client = scope.get("client")
            address = str(client[0]) if client else "unknown"
            # A look-up already under way for this key costs nothing more; any other takes a token first.
            took = not keyring.looking_up(key)
            wait = self.failures.take(address) if took else 0
            if wait:
                detail = f"too many requests with unknown API keys from {address}; retry in {wait} s"
                limit = {"limit": "auth_failures_per_minute", "value": round(self.failures.per_second * 60)}
                await _answer(send, 429, {"detail": detail, **limit}, ((b"retry-after", str(wait).encode()),))
                return
            try:
                caller = await keyring.principal(key, state.store)
            except BaseException:
                if took:  # the database, not the key, failed: no token spent
                    self.failures.give_back(address)
                raise
            if caller is None:
                await _answer(send, 401, {"detail": UNAUTHENTICATED}, ((b"www-authenticate", b"Bearer"),))
                return
            if took:
                self.failures.give_back(address)
        scope.setdefault("state", {})["principal"] = caller
        await self.app(scope, receive, send)


def _length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The declared ``Content-Length`` of a request, or ``None`` (chunked, or none)."""
    for name, value in headers:
        if name == b"content-length" and value.strip().isdigit():
            return int(value)
    return None


class BodyLimit:
    """Refuse bodies over ``max_bytes`` with 413 before the app reads them (declared or streamed), a
    large one while the app's :class:`ParseGate` is full with 503 (before its first byte is read when
    declared, as soon as it grows large when streamed), and a client that pauses more than ``timeout_s``
    while sending one with 408. A large body keeps its place in the gate until it is parsed."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def _refuse(self, send: Send) -> None:
        detail = f"request body larger than {self.max_bytes} bytes"
        await _answer(send, 413, {"detail": detail, "limit": "max_body_bytes", "value": self.max_bytes})

    @staticmethod
    async def _full(send: Send, gate: ParseGate) -> None:
        detail, retry = gate.refusal()
        await _answer(send, 503, {"detail": detail}, ((b"retry-after", str(retry).encode()),))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Buffer the body up to the limit, then hand it to the app."""
        if scope["type"] != "http" or scope["method"] in _BODILESS:
            await self.app(scope, receive, send)
            return
        declared = _length(scope["headers"])
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send)
            return
        gate: ParseGate = scope["app"].state.parsing
        hold: BodyHold | None = None
        if declared is not None and declared >= gate.large:
            hold = gate.admit()
            if hold is None:
                await self._full(send, gate)
                return
        try:
            chunks: list[bytes] = []
            size = 0
            while True:
                try:
                    message = await asyncio.wait_for(receive(), self.timeout_s)
                except TimeoutError:
                    detail = f"the body did not arrive: nothing for {self.timeout_s:g} s"
                    limit = {"limit": "body_timeout_s", "value": self.timeout_s}
                    await _answer(send, 408, {"detail": detail, **limit})
                    return
                if message["type"] != "http.request":
                    return  # the client went away: no one to answer
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_bytes:
                    await self._refuse(send)
                    return
                if hold is None and size >= gate.large:
                    hold = gate.admit()
                    if hold is None:
                        await self._full(send, gate)
                        return
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    body = b"".join(chunks)
                    chunks.clear()
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            if hold is not None:
                scope.setdefault("state", {})[BODY_HOLD] = hold
            await self.app(scope, replay, send)
        finally:
            if hold is not None:
                hold.release()


class DatabaseDown:
    """Answer 503 with ``Retry-After`` to a request that found the database unreachable (in a route or
    in the key check), counting it in the app's :class:`~gpuplan.api.outage.Outage`, which logs the
    outage once: no traceback per call."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; answer 503 if the database could not be reached before the answer began."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except SQLAlchemyError as exc:
            if not unreachable(exc) or started:
                raise
            outage: Outage = scope["app"].state.outage
            outage.failed(exc)
            wait = outage.retry_after()
            detail = f"the database cannot be reached; retry in {wait} s"
            await _answer(send, 503, {"detail": detail}, ((b"retry-after", str(wait).encode()),))


class RequestMetrics:
    """Count requests by method, route template and status, and time them."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, recording its status and latency."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, record)
        finally:
            route = scope.get("route")
            name = str(getattr(route, "path", "unmatched"))
            self.metrics.requests.labels(scope["method"], name, str(status)).inc()
            self.metrics.request_seconds.labels(scope["method"], name).observe(time.perf_counter() - start)

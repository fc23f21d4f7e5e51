"""ASGI middleware: the API key checked from the headers before any body is read, the request-body size
and time limits, and the request metrics."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuplan.api.auth import Keyring, RateLimiter
from gpuplan.api.bodies import ParseGate
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
    A client address that sent ``burst`` unknown keys (refilled at ``per_minute``) gets 429 without its
    key being looked up (a key known without the store still passes). The caller found is left in the
    request's state for the routes."""

    def __init__(self, app: ASGIApp, per_minute: int, burst: int) -> None:
        self.app = app
        self.failures = RateLimiter(per_minute, burst)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass on a request with a valid key (or outside ``/v1/``); answer any other at once."""
        if scope["type"] != "http" or not str(scope["path"]).startswith("/v1/"):
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
            wait = self.failures.refused(address)
            if wait:
                detail = f"too many requests with unknown API keys from {address}; retry in {wait} s"
                limit = {"limit": "auth_failures_per_minute", "value": round(self.failures.per_second * 60)}
                await _answer(send, 429, {"detail": detail, **limit}, ((b"retry-after", str(wait).encode()),))
                return
            caller = await keyring.principal(key, state.store)
            if caller is None:
                self.failures.take(address)
                await _answer(send, 401, {"detail": UNAUTHENTICATED}, ((b"www-authenticate", b"Bearer"),))
                return
        scope.setdefault("state", {})["principal"] = caller
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuse bodies over ``max_bytes`` with 413 before the app reads them (declared or streamed), a
    declared large one while the app's :class:`ParseGate` is full with 503, and a client that pauses
    more than ``timeout_s`` while sending one with 408."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def _refuse(self, send: Send) -> None:
        detail = f"request body larger than {self.max_bytes} bytes"
        await _answer(send, 413, {"detail": detail, "limit": "max_body_bytes", "value": self.max_bytes})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Buffer the body up to the limit, then hand it to the app."""
        if scope["type"] != "http" or scope["method"] in _BODILESS:
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._refuse(send)
                return
            if name == b"content-length" and value.isdigit():
                # A large body that could not be parsed now is refused before it is read.
                gate: ParseGate = scope["app"].state.parsing
                refused = gate.refusal(int(value))
                if refused is not None:
                    retry = ((b"retry-after", str(refused[1]).encode()),)
                    await _answer(send, 503, {"detail": refused[0]}, retry)
                    return
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
                await self.app(scope, receive, send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


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

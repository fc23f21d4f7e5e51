"""How ``gpuplan serve`` runs the app on uvicorn: connection limits and time-outs, and the HTTP protocol
that closes a connection that does not send its request line and headers in time.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but any byte received stops
that clock, and a new connection has no clock at all: a client that opens connections and sends part of
a request's headers holds them for as long as it likes, and with them the server's
``limit_concurrency`` places (every other request then gets 503). :func:`timed_h11` adds that clock: from
a connection's opening, and from the end of each answer on it, the next request's line and headers must
have arrived within ``header_timeout_s``, else the connection is closed (with 408 when part of a request
had come).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from gpuplan.api.settings import Settings

#: Seconds an idle keep-alive connection stays open after an answer.
KEEP_ALIVE_S = 5
#: Longest request line and headers, in bytes (beyond it: 400).
MAX_HEADER_BYTES = 16 * 1024
#: Seconds the server gives running requests to end when it is stopped.
GRACEFUL_SHUTDOWN_S = 5


def _timeout_answer(timeout_s: float) -> bytes:
    """The raw 408 written to a connection whose request's headers did not arrive in time."""
    body = json.dumps(
        {
            "detail": f"the request's headers did not arrive within {timeout_s:g} s",
            "limit": "header_timeout_s",
            "value": timeout_s,
        }
    ).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


def timed_h11(header_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a clock on each request's line and headers (see the module's text)."""

    class TimedH11(H11Protocol):
        """A connection that must send each request's line and headers within ``header_timeout_s`` of its
        opening or of the end of the answer before."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_clock: asyncio.TimerHandle | None = None
            #: The request cycle that was current when the clock started: a new one means headers came.
            self._clocked: object = None

        def _start_clock(self) -> None:
            self._stop_clock()
            self._clocked = self.cycle
            self._header_clock = self.loop.call_later(header_timeout_s, self._headers_late)

        def _stop_clock(self) -> None:
            if self._header_clock is not None:
                self._header_clock.cancel()
                self._header_clock = None

        def _headers_late(self) -> None:
            self._header_clock = None
            if self.transport.is_closing():
                return
            pending, _ = self.conn.trailing_data
            if pending and self.conn.their_state is h11.IDLE:
                self.transport.write(_timeout_answer(header_timeout_s))
            self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._start_clock()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._header_clock is not None and self.cycle is not self._clocked:
                self._stop_clock()

        def on_response_complete(self) -> None:
            answered = self.cycle
            super().on_response_complete()
            # Unless a pipelined request already arrived (a new cycle), the next one's headers are due.
            if not self.transport.is_closing() and self.cycle is answered:
                self._start_clock()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_clock()
            super().connection_lost(exc)

    return TimedH11


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The keyword arguments of ``uvicorn.run`` / ``uvicorn.Config`` that bound connections: beyond
    ``max_connections`` open connections and requests every request is answered 503 at once; a
    connection's request line and headers must arrive within ``header_timeout_s`` (else it is closed);
    an idle keep-alive connection is closed after :data:`KEEP_ALIVE_S`; request line and headers are
    capped at :data:`MAX_HEADER_BYTES`."""
    limits = settings.limits
    return {
        "http": timed_h11(limits.header_timeout_s),
        "limit_concurrency": limits.max_connections,
        "timeout_keep_alive": KEEP_ALIVE_S,
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S,
    }

"""Error answers: limits (413/429 naming the limit and its value), bad input (422 with the field path)
and a last-resort handler so that no request ends in a bare traceback."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import Scope

from gpuplan.models.base import InputError

log = logging.getLogger(__name__)


class LimitExceeded(Exception):
    """A request beyond a configured limit: 413 (too large) or 429 (too many at once); ``loc`` is the
    field path when one field is beyond the limit."""

    def __init__(
        self,
        status: int,
        limit: str,
        value: float,
        detail: str,
        loc: tuple[str | int, ...] = (),
        *,
        retry_after: int = 1,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.retry_after = retry_after
        self.limit = limit
        self.value = value
        self.detail = detail
        self.loc = loc

    def body(self) -> dict[str, Any]:
        """The JSON answer."""
        body = {"detail": self.detail, "limit": self.limit, "value": self.value}
        return {**body, "loc": list(self.loc)} if self.loc else body


class InputRejected(Exception):
    """Input that parses but does not make sense (a cross-reference error): 422 at ``loc``."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


def _json_safe(errors: Any) -> list[dict[str, Any]]:
    out = []
    for e in errors:
        out.append(
            {
                "loc": [p if isinstance(p, int | str) else str(p) for p in e.get("loc", ())],
                "msg": str(e.get("msg", "")).removeprefix("Value error, "),
                "type": str(e.get("type", "value_error")),
            }
        )
    return out


#: The methods a route may serve, asked of each route in turn (see :func:`allowed_methods`).
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(scope: Scope) -> list[str]:
    """Every method some route of the app serves at the path of ``scope`` (Starlette names only the
    first route's): each route is asked whether it matches the path with each method, so that routers
    included in any way (FastAPI keeps them whole in ``app.router.routes``) are asked too."""
    routes = scope["app"].router.routes
    return [m for m in _METHODS if any(r.matches({**scope, "method": m})[0] is Match.FULL for r in routes)]


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(LimitExceeded)
    async def _limit(request: Request, exc: LimitExceeded) -> JSONResponse:
        request.app.state.metrics.rejected.labels(limit=exc.limit).inc()
        headers = {"Retry-After": str(exc.retry_after)} if exc.status == 429 else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request.scope))
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _json_safe(exc.errors())}, status_code=422)

    @app.exception_handler(InputRejected)
    async def _rejected(_: Request, exc: InputRejected) -> JSONResponse:
        item = {"loc": list(exc.loc), "msg": exc.message, "type": "value_error"}
        return JSONResponse({"detail": [item]}, status_code=422)

    @app.exception_handler(InputError)
    async def _input(_: Request, exc: InputError) -> JSONResponse:
        item = {"loc": ["body"], "msg": str(exc), "type": "value_error"}
        return JSONResponse({"detail": [item]}, status_code=422)

    @app.exception_handler(OverflowError)
    async def _overflow(_: Request, exc: OverflowError) -> JSONResponse:
        # A validator that converts a huge number (e.g. an epoch time) may overflow instead of failing.
        item = {"loc": ["body"], "msg": f"a number is out of range ({exc})", "type": "value_error"}
        return JSONResponse({"detail": [item]}, status_code=422)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": f"internal error ({type(exc).__name__})"}, status_code=500)

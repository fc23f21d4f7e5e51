"""The FastAPI application: routers, error handlers, middleware, and the store and runner it starts."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gpuplan.api import errors
from gpuplan.api.auth import Keyring, RateLimiter
from gpuplan.api.bodies import ParseGate
from gpuplan.api.metrics import ApiMetrics
from gpuplan.api.middleware import BodyLimit, DatabaseDown, KeyFirst, RequestMetrics
from gpuplan.api.outage import Outage
from gpuplan.api.routers import capacity, explain, exports, health, keys, map, plans, policy, validate
from gpuplan.api.runner import Runner
from gpuplan.api.settings import Settings
from gpuplan.api.startup import ServerLock
from gpuplan.api.store import Store


def create_app(settings: Settings | None = None, *, lock: ServerLock | None = None) -> FastAPI:
    """An app serving ``settings`` (by default read from the ``GPUPLAN_*`` environment). It holds
    ``lock`` on its database while it runs (taking it at start when none is given) and releases it."""
    settings = settings or Settings()
    metrics = ApiMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        held = lock or ServerLock.acquire(settings.database)
        try:
            async with _serving(app, settings, metrics):
                yield
        finally:
            held.release()

    app = FastAPI(
        title="gpuplan",
        summary="GPU placement plans over HTTP: jobs, history, validation, health and metrics",
        version="1",
        lifespan=lifespan,
        responses={
            400: {"description": "the body could not be parsed"},
            413: {"description": "the body is larger than max_body_bytes"},
            429: {"description": "the key's rate_per_minute (or a job limit) is used up: see Retry-After"},
            503: {"description": "the database is unreachable, or max_parsing is reached: see Retry-After"},
        },
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.keys = Keyring(settings.api_keys)
    app.state.outage = Outage(settings.lease_seconds)
    app.state.rates = RateLimiter(settings.limits.rate_per_minute, settings.limits.rate_burst)
    errors.install(app)
    app.include_router(plans.router)
    app.include_router(exports.router)
    app.include_router(map.router)
    app.include_router(capacity.router)
    app.include_router(policy.router)
    app.include_router(explain.router)
    app.include_router(validate.router)
    app.include_router(keys.router)
    app.include_router(health.router)
    app.state.parsing = ParseGate(settings.limits.max_parsing, settings.limits.large_body_bytes)
    # The last added runs first: metrics, then the database outage's 503, then the key (from the
    # headers), then the body.
    limits = settings.limits
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes, timeout_s=limits.body_timeout_s)
    app.add_middleware(KeyFirst, per_minute=limits.auth_failures_per_minute, burst=limits.auth_failure_burst)
    app.add_middleware(DatabaseDown)
    app.add_middleware(RequestMetrics, metrics=metrics)
    return app


@asynccontextmanager
async def _serving(app: FastAPI, settings: Settings, metrics: ApiMetrics) -> AsyncIterator[None]:
    """The store and the runner of the app, while it runs (on a database this server holds)."""
    store = Store.open(settings.database, settings.database_timeout_s)
    runner = Runner.of(settings, store, metrics, app.state.outage)
    app.state.store = store
    app.state.runner = runner
    await runner.start()
    # What start-up made (the modules, the catalog) lives as long as the server: out of the garbage
    # collector's sight, so that the full collections a large body triggers do not scan it all
    # while holding the GIL (hundreds of ms during which the event loop cannot answer).
    gc.freeze()
    try:
        yield
    finally:
        await runner.stop()
        store.close()

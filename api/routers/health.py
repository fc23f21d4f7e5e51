"""``/healthz`` (the process answers), ``/readyz`` (database and a solver process up) and ``/metrics``."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from fastapi import APIRouter, HTTPException, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from gpuplan.api.deps import RunnerDep, StoreDep
from gpuplan.api.metrics import ApiMetrics
from gpuplan.api.middleware import request_key
from gpuplan.api.outage import Outage, unreachable
from gpuplan.api.schemas import Health
from gpuplan.planner.store.records import JobStatus

T = TypeVar("T")

router = APIRouter(tags=["health"])
_BEARER = {"WWW-Authenticate": "Bearer"}


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The server is up."""
    return Health(status="ok")


def _noted(outage: Outage, call: asyncio.Future[Any]) -> None:
    """Note in ``outage`` whether a finished database call reached the database."""
    if call.cancelled():
        return
    exc = call.exception()
    if exc is None:
        outage.succeeded()
    elif isinstance(exc, SQLAlchemyError) and unreachable(exc):
        outage.failed(exc)


async def _answered(call: Callable[[], T], outage: Outage, timeout_s: float) -> tuple[bool, T | None]:
    """``call()`` in a worker thread: ``(True, its value)``, or ``(False, None)`` when the database cannot
    be reached or has not answered within ``timeout_s`` (the call goes on, cut by the store's own time
    limits, and its outcome is still noted in ``outage``)."""
    future = asyncio.ensure_future(asyncio.to_thread(call))
    future.add_done_callback(partial(_noted, outage))
    done, _ = await asyncio.wait({future}, timeout=timeout_s)
    if not done:
        return False, None
    exc = future.exception()
    if exc is None:
        return True, future.result()
    if isinstance(exc, SQLAlchemyError) and unreachable(exc):
        return False, None
    raise exc


@router.get("/readyz", response_model=Health, responses={503: {"model": Health, "description": "not ready"}})
async def readyz(request: Request, store: StoreDep, runner: RunnerDep, response: Response) -> Health:
    """Ready to plan: the database answers (within ``database_timeout_s``) and a solver process is up:
    one of this server's, or, on a server without them (``--no-worker``), one of a server or worker whose
    heartbeat is younger than a lease (else the jobs it queues would wait for one)."""
    checks = {"solvers": "ok" if runner.ready else "no solver process is up"} if runner.slots else {}
    outage: Outage = request.app.state.outage
    timeout_s: float = request.app.state.settings.database_timeout_s
    reached, _ = await _answered(store.ping, outage, timeout_s)
    checks["database"] = "ok" if reached else "unreachable"
    if reached and not runner.slots:
        reached, alive = await _answered(runner.queue.alive, outage, timeout_s)
        lease = runner.queue.lease.total_seconds()
        if not reached:
            checks["database"] = "unreachable"
        else:
            checks["workers"] = (
                "ok" if alive else f"no worker with a solver process up in the last {lease:g} s"
            )
    ready = all(v == "ok" for v in checks.values())
    response.status_code = 200 if ready else 503
    return Health(status="ready" if ready else "not ready", checks=checks)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}}},
        401: {"description": "metrics_key is set and not given"},
    },
)
async def metrics(request: Request, store: StoreDep, runner: RunnerDep) -> Response:
    """Prometheus metrics: requests, solve durations, queue depth and jobs by status, and the fleet gauges
    of the latest plan; rendered off the event loop. With ``GPUPLAN_METRICS_KEY`` set, only a scraper
    giving that key (Bearer or X-API-Key) reads them."""
    expected = request.app.state.settings.metrics_key
    if expected is not None:
        given = request_key(request.scope["headers"]) or ""
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise HTTPException(status_code=401, detail="/metrics needs the metrics key", headers=_BEARER)
    m: ApiMetrics = request.app.state.metrics
    outage: Outage = request.app.state.outage
    try:
        counts = await asyncio.to_thread(store.status_counts)
    except SQLAlchemyError as exc:
        if not unreachable(exc):
            raise
        outage.failed(exc)  # the job gauges keep their last values
    else:
        outage.succeeded()
        m.jobs_by_status.clear()
        for name, n in counts.items():
            m.jobs_by_status.labels(status=name).set(n)
        m.queue_depth.set(counts.get(JobStatus.QUEUED.value, 0) + len(runner.waiting))
    text = await asyncio.to_thread(generate_latest, m.registry)
    return Response(text, media_type=CONTENT_TYPE_LATEST)

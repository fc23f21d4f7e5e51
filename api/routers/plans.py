"""``/v1/plans``: submit a planning job, poll it, fetch its plan, cancel or resubmit it, list the history."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response, status
from pydantic import BeforeValidator

from gpuplan.api.bodies import PlanBody, documented
from gpuplan.api.deps import Caller, JobsDep, RunnerDep, SettingsDep, StoreDep, Submitter
from gpuplan.api.jobs import SUBMIT_RESPONSES, JobId, Wait, actor, check_active, too_many_active
from gpuplan.api.schemas import AuditOut, JobOut, JobPage, JobResult, PlanRequest
from gpuplan.api.store import ActiveLimitReached
from gpuplan.api.views import PLAN, PLANS, job_out, readable, result_body, visible_result
from gpuplan.planner.store.records import JobStatus


def _iso(value: object) -> object:
    """A date or time as ISO-8601 text, not a number (which would be read as seconds since 1970)."""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return value
        raise ValueError("an ISO-8601 date or time, not a number")
    return value


IsoTime = Annotated[datetime, BeforeValidator(_iso)]

router = APIRouter(prefix=PLANS, tags=["plans"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "no such job"}}
_AUTH: dict[int | str, dict[str, Any]] = {
    401: {"description": "no valid API key"},
    403: {"description": "outside the caller's role"},
}


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses={
        200: {"model": JobResult, "description": "finished within ?wait: the job and its plan"},
        **SUBMIT_RESPONSES,
    },
    openapi_extra=documented(PlanRequest),
)
async def submit(caller: Submitter, body: PlanBody, jobs: JobsDep, response: Response, wait: Wait = 0) -> Any:
    """Queue a planning job; with ``?wait=`` answer 200 with the plan if it finishes in time, else 202."""
    return await jobs.enqueue(PLAN, body, {}, caller, response, wait)


@router.get("", response_model=JobPage, responses=_AUTH)
async def history(
    caller: Caller,
    store: StoreDep,
    team: Annotated[str | None, Query(max_length=200)] = None,
    status_: Annotated[JobStatus | None, Query(alias="status")] = None,
    since: Annotated[IsoTime | None, Query(description="created at or after (ISO-8601)")] = None,
    until: Annotated[IsoTime | None, Query(description="created before (ISO-8601)")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> JobPage:
    """Past and current jobs, newest first; a viewer sees only its own team's."""
    if not caller.can_submit:
        if team is not None and team != caller.team:
            raise HTTPException(
                status_code=403, detail=f"role '{caller.role_text}' may not read plans of team '{team}'"
            )
        team = caller.team
    rows, total = await asyncio.to_thread(
        store.history,
        team=team,
        status=status_,
        since=_utc(since),
        until=_utc(until),
        limit=limit,
        offset=offset,
    )
    return JobPage(items=[job_out(r) for r in rows], total=total, limit=limit, offset=offset)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


@router.get("/{job_id}", response_model=JobOut, responses={**_AUTH, **_NOT_FOUND})
async def get_job(job_id: JobId, caller: Caller, store: StoreDep, runner: RunnerDep) -> JobOut:
    """A job's state, with progress (phase, incumbent objective and bound) while it runs."""
    job = readable(await asyncio.to_thread(store.job, job_id), caller, job_id)
    return job_out(job, await runner.progress(job))


@router.get(
    "/{job_id}/result",
    response_model=JobResult,
    responses={**_AUTH, **_NOT_FOUND, 409: {"description": "the job has no plan (yet)"}},
)
async def get_result(job_id: JobId, caller: Caller, store: StoreDep) -> Response:
    """The plan of a finished job (409 while it is queued or running, or when it failed); a viewer
    sees its team's workloads and the fleet as a whole."""
    job = readable(await asyncio.to_thread(store.job, job_id), caller, job_id)
    plan = await asyncio.to_thread(store.result, job_id) if job.status is JobStatus.DONE else None
    if plan is None:
        reason = f": {job.error}" if job.error else ""
        raise HTTPException(status_code=409, detail=f"job '{job_id}' is {job.status.value}{reason}")
    plan = await visible_result(store, caller, job, plan)
    return Response(result_body(job_out(job), plan), media_type="application/json")


@router.delete(
    "/{job_id}",
    response_model=JobOut,
    responses={**_AUTH, **_NOT_FOUND, 409: {"description": "the job had already ended"}},
)
async def cancel(job_id: JobId, caller: Submitter, store: StoreDep, runner: RunnerDep) -> JobOut:
    """Cancel a queued or running job at once (its solver process is stopped)."""
    readable(await asyncio.to_thread(store.job, job_id), caller, job_id)
    if not await runner.cancel(job_id):
        job = await asyncio.to_thread(store.job, job_id)
        assert job is not None
        raise HTTPException(status_code=409, detail=f"job '{job_id}' had already ended ({job.status.value})")
    await asyncio.to_thread(store.record, actor(caller), "cancel", job_id, {})
    job = await asyncio.to_thread(store.job, job_id)
    assert job is not None
    return job_out(job)


@router.post(
    "/{job_id}/resubmit",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses={
        **_AUTH,
        **_NOT_FOUND,
        409: {"description": "only interrupted, failed or cancelled jobs are resubmitted"},
        429: {"description": "too many jobs queued or running"},
    },
)
async def resubmit(
    job_id: JobId, caller: Submitter, settings: SettingsDep, store: StoreDep, runner: RunnerDep
) -> JobOut:
    """Queue an interrupted, failed or cancelled job again with its stored input (admitted against
    ``max_active_jobs`` as a new job is: counted and queued under one lock)."""
    readable(await asyncio.to_thread(store.job, job_id), caller, job_id)
    limits = settings.limits
    await check_active(limits, runner)
    data = await asyncio.to_thread(store.job_input, job_id)
    try:
        requeued = data is not None and await asyncio.to_thread(
            store.requeue, job_id, actor(caller), max_active=limits.max_active_jobs
        )
    except ActiveLimitReached as exc:
        raise too_many_active(limits, runner, exc.active) from None
    if not requeued:
        job = await asyncio.to_thread(store.job, job_id)
        state = job.status.value if job is not None else "unknown"
        raise HTTPException(status_code=409, detail=f"job '{job_id}' is {state}; it cannot be resubmitted")
    runner.queued()
    job = await asyncio.to_thread(store.job, job_id)
    assert job is not None
    return job_out(job)


@router.get("/{job_id}/audit", response_model=list[AuditOut], responses={**_AUTH, **_NOT_FOUND})
async def audit_trail(job_id: JobId, caller: Caller, store: StoreDep) -> list[AuditOut]:
    """Who submitted, cancelled or resubmitted the job, when, and with which policy and options."""
    readable(await asyncio.to_thread(store.job, job_id), caller, job_id)
    rows = await asyncio.to_thread(store.audit_trail, job_id)
    return [AuditOut.model_validate(r) for r in rows]

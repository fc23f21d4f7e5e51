"""``/v1/plans``: submit a planning job, poll it, fetch its plan, cancel or resubmit it, list the history."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Response, status
from pydantic import ValidationError

from gpuplan.api.auth import Principal
from gpuplan.api.deps import Caller, RunnerDep, SettingsDep, StoreDep, Submitter
from gpuplan.api.errors import InputRejected, LimitExceeded
from gpuplan.api.runner import Runner
from gpuplan.api.schemas import AuditOut, JobOut, JobPage, JobResult, PlanRequest
from gpuplan.api.settings import Limits, Settings
from gpuplan.api.store import Actor, JobInput, JobRecord, JobStatus, Store, now
from gpuplan.api.views import PLAN, PLANS, job_out, readable, result_body
from gpuplan.models.problem import PlanningInput

router = APIRouter(prefix=PLANS, tags=["plans"])

Wait = Annotated[float, Query(ge=0, le=300, description="seconds to wait for the result")]
JobId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="job id")]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "no such job"}}
_AUTH: dict[int | str, dict[str, Any]] = {
    401: {"description": "no valid API key"},
    403: {"description": "outside the caller's role"},
}


def check_size(limits: Limits, nodes: int, workloads: int) -> None:
    """413 when the request has more nodes or workloads than allowed."""
    if nodes > limits.max_nodes:
        raise LimitExceeded(
            413, "max_nodes", limits.max_nodes, f"{nodes} nodes; at most {limits.max_nodes} per request"
        )
    if workloads > limits.max_workloads:
        raise LimitExceeded(
            413,
            "max_workloads",
            limits.max_workloads,
            f"{workloads} workloads; at most {limits.max_workloads} per request",
        )


def _time_limit(settings: Settings, asked: float | None) -> float:
    cap = settings.limits.max_time_limit_s
    if asked is None:
        return min(settings.default_time_limit_s, cap)
    if asked > cap:
        raise LimitExceeded(
            413, "max_time_limit_s", cap, f"time_limit_s {asked:g} exceeds the cap of {cap:g} s"
        )
    return asked


def _planning_input(body: PlanRequest) -> PlanningInput:
    try:
        return PlanningInput.model_validate(
            {"cluster": body.cluster, "workloads": body.workloads, "policy": body.policy}
        )
    except ValidationError as exc:
        msg = str(exc.errors(include_url=False)[0]["msg"]).removeprefix("Value error, ")
        raise InputRejected(("body", "workloads"), msg) from None


def _team(body: PlanRequest) -> str | None:
    if body.team is not None:
        return body.team
    teams = {w.team for w in body.workloads}
    return teams.pop() if len(teams) == 1 else None


def _actor(caller: Principal) -> Actor:
    return Actor(caller.key_id, caller.role_text)


async def _result_or_job(store: Store, runner: Runner, job_id: str, response: Response) -> Any:
    job = await asyncio.to_thread(store.job, job_id)
    assert job is not None
    if job.status is JobStatus.DONE:
        plan = await asyncio.to_thread(store.result, job_id)
        if plan is not None:
            return Response(result_body(job_out(job), plan), media_type="application/json")
    response.status_code = status.HTTP_202_ACCEPTED
    response.headers["Location"] = f"{PLANS}/{job_id}"
    return job_out(job, runner.progress(job_id))


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses={
        200: {"model": JobResult, "description": "finished within ?wait: the job and its plan"},
        413: {"description": "body, nodes, workloads or time limit beyond a limit"},
        429: {"description": "too many jobs queued or running"},
        **_AUTH,
    },
)
async def submit(
    body: PlanRequest,
    caller: Submitter,
    settings: SettingsDep,
    store: StoreDep,
    runner: RunnerDep,
    response: Response,
    wait: Wait = 0,
) -> Any:
    """Queue a planning job; with ``?wait=`` answer 200 with the plan if it finishes in time, else 202."""
    return await enqueue(PLAN, body, {}, caller, settings, store, runner, response, wait)


async def enqueue(
    kind: str,
    body: PlanRequest,
    extra: dict[str, Any],
    caller: Principal,
    settings: Settings,
    store: Store,
    runner: Runner,
    response: Response,
    wait: float,
) -> Any:
    """Check the limits, store a queued job of ``kind`` with its input and audit record, and queue it."""
    limits = settings.limits
    check_size(limits, len(body.cluster.nodes), len(body.workloads))
    time_limit = _time_limit(settings, body.options.time_limit_s)
    if runner.active >= limits.max_active_jobs:
        raise LimitExceeded(
            429,
            "max_active_jobs",
            limits.max_active_jobs,
            f"{runner.active} jobs are queued or running; at most {limits.max_active_jobs}",
        )
    inp = _planning_input(body)
    input_json = inp.model_dump_json()
    options = {
        "kind": kind,
        "solver": body.options.solver,
        "time_limit_s": time_limit,
        "seed": body.options.seed,
        "now": body.options.now.isoformat() if body.options.now else None,
        "deterministic": body.options.deterministic,
        "num_workers": settings.solver_threads,
        **extra,
    }
    job = JobRecord(
        id=uuid.uuid4().hex,
        status=JobStatus.QUEUED,
        kind=kind,
        team=_team(body),
        solver=body.options.solver,
        time_limit_s=time_limit,
        nodes=len(body.cluster.nodes),
        workloads=len(body.workloads),
        submitted_by=caller.key_id,
        created_at=now(),
        started_at=None,
        finished_at=None,
        attempts=1,
        plan_status=None,
        outcome=None,
        error=None,
    )
    digest = hashlib.sha256(input_json.encode()).hexdigest()
    policy = body.policy.model_dump(mode="json")
    detail = {
        "kind": kind,
        "inputs_sha256": digest,
        "policy_sha256": hashlib.sha256(json.dumps(policy, sort_keys=True).encode()).hexdigest(),
        "policy": policy,
        "options": {k: v for k, v in options.items() if k != "node_types"},
        "team": job.team,
    }
    stored = JobInput(digest, input_json, options)
    await asyncio.to_thread(store.create_job, job, stored, _actor(caller), detail)
    runner.submit(job.id, input_json, options)
    runner.metrics.jobs_submitted.inc()
    if wait > 0:
        await runner.wait(job.id, wait)
        return await _result_or_job(store, runner, job.id, response)
    response.headers["Location"] = f"{PLANS}/{job.id}"
    return job_out(job)


@router.get("", response_model=JobPage, responses=_AUTH)
async def history(
    caller: Caller,
    store: StoreDep,
    team: Annotated[str | None, Query(max_length=200)] = None,
    status_: Annotated[JobStatus | None, Query(alias="status")] = None,
    since: Annotated[datetime | None, Query(description="created at or after (ISO-8601)")] = None,
    until: Annotated[datetime | None, Query(description="created before (ISO-8601)")] = None,
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
    return job_out(job, runner.progress(job_id))


@router.get(
    "/{job_id}/result",
    response_model=JobResult,
    responses={**_AUTH, **_NOT_FOUND, 409: {"description": "the job has no plan (yet)"}},
)
async def get_result(job_id: JobId, caller: Caller, store: StoreDep) -> Response:
    """The plan of a finished job (409 while it is queued or running, or when it failed)."""
    job = readable(await asyncio.to_thread(store.job, job_id), caller, job_id)
    plan = await asyncio.to_thread(store.result, job_id) if job.status is JobStatus.DONE else None
    if plan is None:
        reason = f": {job.error}" if job.error else ""
        raise HTTPException(status_code=409, detail=f"job '{job_id}' is {job.status.value}{reason}")
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
    await asyncio.to_thread(store.record, _actor(caller), "cancel", job_id, {})
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
    """Queue an interrupted, failed or cancelled job again with its stored input."""
    readable(await asyncio.to_thread(store.job, job_id), caller, job_id)
    limits = settings.limits
    if runner.active >= limits.max_active_jobs:
        raise LimitExceeded(
            429,
            "max_active_jobs",
            limits.max_active_jobs,
            f"{runner.active} jobs are queued or running; at most {limits.max_active_jobs}",
        )
    data = await asyncio.to_thread(store.job_input, job_id)
    if data is None or not await asyncio.to_thread(store.requeue, job_id, _actor(caller)):
        job = await asyncio.to_thread(store.job, job_id)
        state = job.status.value if job is not None else "unknown"
        raise HTTPException(status_code=409, detail=f"job '{job_id}' is {state}; it cannot be resubmitted")
    runner.submit(job_id, data.input_json, data.options)
    job = await asyncio.to_thread(store.job, job_id)
    assert job is not None
    return job_out(job)


@router.get("/{job_id}/audit", response_model=list[AuditOut], responses={**_AUTH, **_NOT_FOUND})
async def audit_trail(job_id: JobId, caller: Caller, store: StoreDep) -> list[AuditOut]:
    """Who submitted, cancelled or resubmitted the job, when, and with which policy and options."""
    readable(await asyncio.to_thread(store.job, job_id), caller, job_id)
    rows = await asyncio.to_thread(store.audit_trail, job_id)
    return [AuditOut.model_validate(r) for r in rows]

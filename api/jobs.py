"""Jobs as the routers submit and read them: the request limits, storing a queued job with its input and
audit record, queueing it, and reading a finished plan job back.

The plan, capacity-gap, explain and policy-review routers share this module rather than importing one
another.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import HTTPException, Path, Query, Response, status

from gpuplan.api.auth import Principal
from gpuplan.api.errors import InputRejected, LimitExceeded
from gpuplan.api.runner import Runner
from gpuplan.api.schemas import PlanRequest
from gpuplan.api.settings import Limits, Settings
from gpuplan.api.store import ActiveLimitReached, Actor, Store
from gpuplan.api.store.records import RESUBMITTABLE
from gpuplan.api.views import PLAN, PLANS, job_out, readable, result_body
from gpuplan.models.cluster import Cluster
from gpuplan.models.workload import Workload
from gpuplan.planner.store.records import JobInput, JobRecord, JobStatus, now
from gpuplan.planner.validation.inputs import BadInput, checked_input

Wait = Annotated[float, Query(ge=0, le=300, description="seconds to wait for the result")]
JobId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="job id")]

#: The answers of a route that queues a job, besides its own 202 and 200.
SUBMIT_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "no valid API key"},
    403: {"description": "viewers may not submit"},
    413: {"description": "body, nodes, workloads, GPUs per node, replicas or time limit beyond a limit"},
    422: {"description": "bad input: the detail names the field"},
    429: {"description": "too many jobs queued or running, or the queue cannot meet ?wait="},
}

#: What a queued job has not got yet.
_NOT_STARTED: dict[str, Any] = dict.fromkeys(("started_at", "finished_at", "plan_status", "outcome", "error"))


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


def check_demand(limits: Limits, cluster: Cluster, workloads: Sequence[Workload]) -> None:
    """413 naming the field when a node has more GPUs or a workload more replicas than allowed, or the
    workloads more replicas in total (a few bytes of body can ask for a billion replicas)."""
    for i, node in enumerate(cluster.nodes):
        if len(node.gpus) > limits.max_gpus_per_node:
            cap = limits.max_gpus_per_node
            raise LimitExceeded(
                413,
                "max_gpus_per_node",
                cap,
                f"node '{node.name}' has {len(node.gpus)} GPUs; at most {cap} per node",
                ("body", "cluster", "nodes", i, "gpus"),
            )
    total = 0
    for i, w in enumerate(workloads):
        if w.replicas > limits.max_replicas:
            cap = limits.max_replicas
            raise LimitExceeded(
                413,
                "max_replicas",
                cap,
                f"workload '{w.id}' asks for {w.replicas} replicas; at most {cap} per workload",
                ("body", "workloads", i, "replicas"),
            )
        total += w.replicas
    if total > limits.max_total_replicas:
        cap = limits.max_total_replicas
        raise LimitExceeded(
            413,
            "max_total_replicas",
            cap,
            f"{total} replicas in all; at most {cap} per request",
            ("body", "workloads"),
        )


def check_time_limit(limits: Limits, asked: float) -> float:
    """``asked``, or 413 when it is beyond ``max_time_limit_s``."""
    cap = limits.max_time_limit_s
    if asked > cap:
        raise LimitExceeded(
            413, "max_time_limit_s", cap, f"time_limit_s {asked:g} exceeds the cap of {cap:g} s"
        )
    return asked


def check_pace(limits: Limits, replicas: int, time_limit: float) -> None:
    """413 naming ``options.time_limit_s`` when ``replicas`` cannot be planned within ``time_limit``:
    reading, compiling, checking and reporting a plan take time in proportion to the replicas, whatever
    the solver, and a time limit below that would be overrun (``max_replicas_per_second``)."""
    rate = limits.max_replicas_per_second
    if replicas <= rate * time_limit:
        return
    need = math.ceil(replicas / rate)
    cap = limits.max_time_limit_s
    fits = f"set time_limit_s to at least {need} s" if need <= cap else f"split it (at most {cap:g} s)"
    raise LimitExceeded(
        413,
        "max_replicas_per_second",
        rate,
        f"{replicas} replicas cannot be planned in {time_limit:g} s (at most {rate} replicas a second of "
        f"the time limit): {fits}",
        ("body", "options", "time_limit_s"),
    )


def too_many_active(limits: Limits, runner: Runner, active: int) -> LimitExceeded:
    """The 429 of ``max_active_jobs`` with ``active`` jobs queued or running; its ``Retry-After`` is
    when one is expected to end (the recent mean solve time, over this server's solver processes)."""
    return LimitExceeded(
        429,
        "max_active_jobs",
        limits.max_active_jobs,
        f"{active} jobs are queued or running; at most {limits.max_active_jobs}",
        retry_after=runner.retry_after(active),
    )


async def check_active(limits: Limits, runner: Runner) -> int:
    """How many jobs are queued or running on every server, or 429 when ``max_active_jobs`` are (a
    quick refusal before the body is checked; the store admits the job under a lock)."""
    active = await runner.active()
    if active >= limits.max_active_jobs:
        raise too_many_active(limits, runner, active)
    return active


def check_reads(limits: Limits, runner: Runner) -> None:
    """429 when ``max_read_jobs`` explanations are already queued or running, with ``Retry-After`` when
    the first of them is bound to end."""
    if runner.reading >= limits.max_read_jobs:
        raise LimitExceeded(
            429,
            "max_read_jobs",
            limits.max_read_jobs,
            f"{runner.reading} explanations are queued or running; at most {limits.max_read_jobs}",
            retry_after=runner.read_retry_after(),
        )


def check_wait(runner: Runner, active: int, wait: float) -> None:
    """429 with ``Retry-After`` when the queue cannot meet ``wait``: with ``active`` jobs ahead, every
    solver process busy and the jobs taking the recent mean solve time, this one would end after
    ``wait`` seconds. Better answered at once than after the wait (a client then retries later or
    submits without waiting). The estimate counts this server's processes only (the others' are not
    known here): with several servers it errs on the side of refusing."""
    mean = runner.mean_solve_s()
    if wait <= 0 or mean is None or not runner.slots:
        return
    rounds_ahead = active // len(runner.slots)
    if rounds_ahead == 0:
        return  # a solver process is free: the job starts now, and ?wait= only bounds the wait for it
    expected = (rounds_ahead + 1) * mean
    if expected <= wait:
        return
    runner.metrics.rejected.labels(limit="wait").inc()
    raise HTTPException(
        status_code=status.HTTP_429_TOO_MANY_REQUESTS,
        detail=(
            f"{active} jobs are queued or running: this one would end in about {expected:.1f} s, "
            f"after wait={wait:g} s; retry later or submit without wait"
        ),
        headers={"Retry-After": str(max(1, math.ceil(expected - wait)))},
    )


def actor(caller: Principal) -> Actor:
    """The caller as the audit trail names it."""
    return Actor(caller.key_id, caller.role_text)


def _time_limit(settings: Settings, asked: float | None) -> float:
    if asked is None:
        return min(settings.default_time_limit_s, settings.limits.max_time_limit_s)
    return check_time_limit(settings.limits, asked)


def _planning_input(limits: Limits, body: PlanRequest, time_limit: float) -> tuple[str, str]:
    """The checked planning input as stored (JSON) and its SHA-256: beyond a limit 413, and 422 for
    cross-reference errors and running work that over-commits a GPU or node. Linear in the size of the
    body, and run in a worker thread."""
    check_demand(limits, body.cluster, body.workloads)
    check_pace(limits, sum(w.replicas for w in body.workloads), time_limit)
    try:
        inp = checked_input(body.cluster, body.workloads, body.policy)
    except BadInput as exc:
        raise InputRejected(("body", *exc.loc), str(exc)) from None
    input_json = inp.model_dump_json()
    return input_json, hashlib.sha256(input_json.encode()).hexdigest()


def _team(body: PlanRequest) -> str | None:
    if body.team is not None:
        return body.team
    teams = {w.team for w in body.workloads}
    return teams.pop() if len(teams) == 1 else None


def new_job(
    kind: str, team: str | None, solver: str, time_limit: float, caller: Principal, size: tuple[int, int]
) -> JobRecord:
    """A queued job of ``kind`` submitted by ``caller`` now; ``size``: its nodes and workloads."""
    return JobRecord(
        id=uuid.uuid4().hex,
        status=JobStatus.QUEUED,
        kind=kind,
        team=team,
        solver=solver,
        time_limit_s=time_limit,
        nodes=size[0],
        workloads=size[1],
        submitted_by=caller.key_id,
        created_at=now(),
        attempts=1,
        **_NOT_STARTED,
    )


@dataclass(frozen=True)
class Jobs:
    """What submitting and reading jobs needs: the settings (with the limits), the store and the runner."""

    settings: Settings
    store: Store
    runner: Runner

    def time_limit(self, asked: float | None) -> float:
        """The time limit of a job that asked for ``asked`` seconds (the server's default when ``None``);
        413 beyond ``max_time_limit_s``."""
        return _time_limit(self.settings, asked)

    async def admit(self, wait: float) -> None:
        """The quick refusals before a body is checked: 429 when ``max_active_jobs`` are queued or
        running, or when the queue cannot meet ``wait``."""
        active = await check_active(self.settings.limits, self.runner)
        check_wait(self.runner, active, wait)

    async def enqueue(
        self,
        kind: str,
        body: PlanRequest,
        extra: dict[str, Any],
        caller: Principal,
        response: Response,
        wait: float,
        *,
        pace_s: float | None = None,
    ) -> Any:
        """Check the limits, store a queued job of ``kind`` with its input and audit record, and queue
        it; with ``wait`` answer the result if the job ends in time (else the job, 202). ``pace_s``: the
        seconds each solve of the job gets (``max_replicas_per_second``), by default its time limit."""
        limits = self.settings.limits
        check_size(limits, len(body.cluster.nodes), len(body.workloads))
        time_limit = self.time_limit(body.options.time_limit_s)
        await self.admit(wait)
        pace = time_limit if pace_s is None else pace_s
        input_json, digest = await asyncio.to_thread(_planning_input, limits, body, pace)
        options = {
            "kind": kind,
            "solver": body.options.solver,
            "time_limit_s": time_limit,
            "seed": body.options.seed,
            "now": body.options.now.isoformat() if body.options.now else None,
            "deterministic": body.options.deterministic,
            "num_workers": self.settings.solver_threads,
            **extra,
        }
        size = (len(body.cluster.nodes), len(body.workloads))
        job = new_job(kind, _team(body), body.options.solver, time_limit, caller, size)
        stored = JobInput(digest, input_json, options)
        return await self.submit(job, stored, body.policy.model_dump(mode="json"), caller, response, wait)

    async def submit(
        self,
        job: JobRecord,
        stored: JobInput,
        policy: dict[str, Any],
        caller: Principal,
        response: Response,
        wait: float,
    ) -> Any:
        """Store queued ``job`` with its input ``stored`` and its audit record (naming ``policy``, the
        policy as JSON data), and queue it; with ``wait`` answer the result if the job ends in time
        (else the job, 202)."""
        limits = self.settings.limits
        detail = {
            "kind": job.kind,
            "inputs_sha256": stored.inputs_sha256,
            "policy_sha256": hashlib.sha256(json.dumps(policy, sort_keys=True).encode()).hexdigest(),
            "policy": policy,
            "options": {k: v for k, v in stored.options.items() if k != "node_types"},
            "team": job.team,
        }
        try:
            await asyncio.to_thread(
                self.store.create_job, job, stored, actor(caller), detail, max_active=limits.max_active_jobs
            )
        except ActiveLimitReached as exc:
            raise too_many_active(limits, self.runner, exc.active) from None
        self.runner.queued()
        self.runner.metrics.jobs_submitted.inc()
        if wait > 0:
            await self.runner.wait(job.id, wait)
            return await self.result_or_job(job.id, response)
        response.headers["Location"] = f"{PLANS}/{job.id}"
        return job_out(job)

    async def result_or_job(self, job_id: str, response: Response) -> Any:
        """The job with its result when it is done, the job alone (200, with its error) when it ended
        without one (failed, cancelled, interrupted), else the job with its progress (202)."""
        job = await asyncio.to_thread(self.store.job, job_id)
        assert job is not None
        if job.status is JobStatus.DONE:
            plan = await asyncio.to_thread(self.store.result, job_id)
            if plan is not None:
                return Response(result_body(job_out(job), plan), media_type="application/json")
        if job.status in RESUBMITTABLE:
            ended = b'{"job":' + job_out(job).model_dump_json(by_alias=True).encode() + b"}"
            return Response(ended, media_type="application/json")
        response.status_code = status.HTTP_202_ACCEPTED
        response.headers["Location"] = f"{PLANS}/{job_id}"
        return job_out(job, await self.runner.progress(job))


async def finished_plan(store: Store, caller: Principal, job_id: str, purpose: str) -> tuple[str, JobInput]:
    """The plan JSON and the stored input of a plan job the caller may read (404, 403 otherwise); 409
    ("no plan to ``purpose``") while the job has no plan."""
    job = readable(await asyncio.to_thread(store.job, job_id), caller, job_id)
    plan = await asyncio.to_thread(store.result, job_id) if job.status is JobStatus.DONE else None
    data = await asyncio.to_thread(store.job_input, job_id)
    if plan is None or data is None or job.kind != PLAN:
        raise HTTPException(
            status_code=409, detail=f"job '{job_id}' is {job.status.value}; no plan to {purpose}"
        )
    return plan, data

"""``POST /v1/policy-cost``, ``POST /v1/replay`` and ``POST /v1/frontier``: policy reviews as jobs
(``api.reviews``), polled and read like a plan (``/v1/plans/{id}``, ``/result``).

Every review route follows one pattern: the time limit (413 beyond ``max_time_limit_s``), the quick
refusals (429), then the body's own checks, which fix how many plans the review makes and the seconds
each gets (``planner.policy.budget``: 422 at ``options.time_limit_s`` when that is under a second), and
the job, queued with ``seconds_each`` in its options and the whole time limit as its budget. Only admins
and planners submit or read reviews: they compare plans of the whole fleet.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, HTTPException, Response, status
from fastapi.types import DecoratedCallable
from pydantic import BaseModel

from gpuplan.api.bodies import FrontierBody, PolicyCostBody, ReplayBody, documented
from gpuplan.api.deps import JobsDep, Submitter
from gpuplan.api.errors import InputRejected
from gpuplan.api.jobs import SUBMIT_RESPONSES, Wait, new_job
from gpuplan.api.reviews import FRONTIER, POLICY_COST, PROPOSED, REPLAY
from gpuplan.api.schemas import FrontierRequest, JobOut, JobResult, PolicyCostRequest, ReplayRequest
from gpuplan.api.store import Store
from gpuplan.models.base import InputError
from gpuplan.models.catalog import default_catalog
from gpuplan.models.policy import Policy
from gpuplan.models.workload import Workload
from gpuplan.planner.policy.budget import seconds_each
from gpuplan.planner.policy.frontier import solves_needed
from gpuplan.planner.policy.relax import input_relaxations
from gpuplan.planner.policy.replay import check_policy, last_plans, replayable_data
from gpuplan.planner.store.history import PlanHistory
from gpuplan.planner.store.records import JobInput

router = APIRouter(prefix="/v1", tags=["policy"])

#: Where a review's time limit is in its body.
_TIME_LIMIT = ("body", "options", "time_limit_s")
#: The solver a replay job names: each plan's own, as stored.
_AS_STORED = "as stored"


def _route(
    path: str, request: type[BaseModel], result: str, extra: dict[int | str, dict[str, Any]] | None = None
) -> Callable[[DecoratedCallable], DecoratedCallable]:
    """The decorator of a review route at ``path`` taking ``request``, whose result is ``result``."""
    return router.post(
        path,
        status_code=status.HTTP_202_ACCEPTED,
        response_model=JobOut,
        responses={
            200: {"model": JobResult, "description": f"finished within ?wait: the job and its {result}"},
            **SUBMIT_RESPONSES,
            **(extra or {}),
        },
        openapi_extra=documented(request),
    )


def _seconds_each(time_limit: float, runs: int, *, deterministic: bool) -> float:
    """The seconds each of a review's ``runs`` plans gets; 422 at ``options.time_limit_s`` when under a
    second."""
    try:
        return seconds_each(time_limit, runs, deterministic=deterministic, option="time_limit_s")
    except InputError as exc:
        raise InputRejected(_TIME_LIMIT, str(exc)) from None


def _review_options(kind: str, time_limit: float, each: float) -> dict[str, Any]:
    """The options every review job has: the whole time limit is its budget, split into ``each``."""
    return {"kind": kind, "time_limit_s": time_limit, "seconds_each": round(each, 3), "budget_s": time_limit}


def _policy_cost_plans(policy: Policy, workloads: tuple[Workload, ...]) -> int:
    """The plans a policy-cost job makes: the policy as given and one per rule relaxed; 422 at ``policy``
    when it has no rule to relax."""
    rules, skipped = input_relaxations(policy, workloads)
    if not rules:
        raise InputRejected(("body", "policy"), "the policy has no rule to relax: " + "; ".join(skipped))
    return 1 + len(rules)


@_route("/policy-cost", PolicyCostRequest, "rules by cost (policy_cost)")
async def submit_policy_cost(
    caller: Submitter, body: PolicyCostBody, jobs: JobsDep, response: Response, wait: Wait = 0
) -> Any:
    """Queue a policy-cost job: a plan with each rule of the policy relaxed in turn against the plan with
    the policy as given, all deterministic and within ``time_limit_s`` (split evenly among the plans);
    its result, ``policy_cost``, lists the rules most costly first."""
    time_limit = jobs.time_limit(body.options.time_limit_s)
    runs = _policy_cost_plans(body.policy, body.workloads)
    each = _seconds_each(time_limit, runs, deterministic=True)
    extra = {**_review_options(POLICY_COST, time_limit, each), "deterministic": True}
    if body.node_types is not None:
        extra["node_types"] = body.node_types.model_dump(mode="json")
    return await jobs.enqueue(POLICY_COST, body, extra, caller, response, wait, pace_s=each)


@_route("/frontier", FrontierRequest, "points (frontier)")
async def submit_frontier(
    caller: Submitter, body: FrontierBody, jobs: JobsDep, response: Response, wait: Wait = 0
) -> Any:
    """Queue a frontier job: the best plan at each fairness floor (``levels``, or from the efficient
    plan's fairness up to the highest a plan reaches, ``points`` in all), within ``time_limit_s`` (split
    evenly among the plans); its result, ``frontier``, lists the points, each with its bound, gap, the
    teams' allocations and the price of fairness against the efficient plan."""
    time_limit = jobs.time_limit(body.options.time_limit_s)
    current = body.policy.fair_floor is not None
    runs = solves_needed(body.points, body.probes, body.levels, current_floor=current)
    deterministic = bool(body.options.deterministic)
    each = _seconds_each(time_limit, runs, deterministic=deterministic)
    extra = {
        **_review_options(FRONTIER, time_limit, each),
        "points": body.points,
        "probes": body.probes,
        **({} if body.levels is None else {"levels": list(body.levels)}),
    }
    if body.node_types is not None:
        extra["node_types"] = body.node_types.model_dump(mode="json")
    return await jobs.enqueue(FRONTIER, body, extra, caller, response, wait, pace_s=each)


def _replay_input(store: Store, body: ReplayRequest, time_limit: float) -> tuple[JobInput, tuple[int, int]]:
    """The stored input of a replay job (the proposed policy and the last ``body.last`` stored plans, so
    that the job replays the plans it was asked about whenever it runs) and its size (the most nodes and
    workloads of a plan). Reads the store: call it off the event loop. 409 when no plan is stored; 422 at
    ``policy`` when it does not fit a plan's inputs, at ``options.time_limit_s`` when under a second each."""
    items = last_plans(PlanHistory(engine=store.engine), body.last)
    if not items:
        raise HTTPException(status_code=409, detail="no plans stored yet: there is nothing to replay")
    each = _seconds_each(time_limit, len(items), deterministic=False)
    try:
        check_policy(items, body.policy, PROPOSED, default_catalog())
    except InputError as exc:
        raise InputRejected(("body", "policy"), str(exc)) from None
    policy = json.loads(body.policy.model_dump_json())
    text = json.dumps({"policy": policy, "plans": [replayable_data(i) for i in items]})
    options = {**_review_options(REPLAY, time_limit, each), "solver": _AS_STORED}
    options["plans"] = [i.stored.id for i in items]
    size = (
        max(len(i.stored.inputs.cluster.nodes) for i in items),
        max(len(i.stored.inputs.workloads) for i in items),
    )
    return JobInput(hashlib.sha256(text.encode()).hexdigest(), text, options), size


@_route("/replay", ReplayRequest, "comparison (replay)", {409: {"description": "no plans stored yet"}})
async def submit_replay(
    caller: Submitter, body: ReplayBody, jobs: JobsDep, response: Response, wait: Wait = 0
) -> Any:
    """Queue a replay job: the last ``last`` stored plans (of the API and of ``gpuplan replan``) made
    again from their inputs under the proposed ``policy``, each with its stored solver, seed, planning
    time and rounds, within ``time_limit_s`` (split evenly among the plans); its result, ``replay``,
    compares them per tier, per team and in total. The policy in force gives back the stored objectives
    within their gaps."""
    time_limit = jobs.time_limit(body.options.time_limit_s)
    await jobs.admit(wait)
    stored, size = await asyncio.to_thread(_replay_input, jobs.store, body, time_limit)
    stored.options["num_workers"] = jobs.settings.solver_threads
    job = new_job(REPLAY, None, _AS_STORED, time_limit, caller, size)
    policy = json.loads(body.policy.model_dump_json())
    return await jobs.submit(job, stored, policy, caller, response, wait)

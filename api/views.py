"""Job records as API bodies, and what of a job's result a caller may see."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import HTTPException

from gpuplan.api.auth import Principal
from gpuplan.api.reviews import KINDS
from gpuplan.api.schemas import JobLinks, JobOut
from gpuplan.api.store import Store
from gpuplan.models.capacity import CapacityGap
from gpuplan.models.plan import Plan
from gpuplan.planner.explain.team_view import team_gap, team_plan
from gpuplan.planner.store.records import JobRecord

PLANS = "/v1/plans"
#: Job kinds: a placement plan, or a capacity gap (what to re-partition and buy).
PLAN, CAPACITY_GAP = "plan", "capacity-gap"
#: The key of a job's result beside the job, by kind (``plan`` for the kinds not named).
RESULT_KEYS = {CAPACITY_GAP: "capacity_gap", **{k: r.result_key for k, r in KINDS.items()}}


def job_out(job: JobRecord, progress: dict[str, Any] | None = None) -> JobOut:
    """The API view of a job (with live progress while it runs)."""
    links = JobLinks(self_=f"{PLANS}/{job.id}", result=f"{PLANS}/{job.id}/result")
    return JobOut(**dict(job), progress=progress, links=links)


def readable(job: JobRecord | None, caller: Principal, job_id: str) -> JobRecord:
    """The job if the caller may read it: 404 when unknown, 403 when it belongs to another team."""
    if job is None:
        raise HTTPException(status_code=404, detail=f"no plan job '{job_id}'")
    if not caller.can_read(job.team):
        raise HTTPException(
            status_code=403,
            detail=f"role '{caller.role_text}' may not read plans of team '{job.team or '(none)'}'",
        )
    return job


def result_body(job: JobOut, result_json: str) -> bytes:
    """``{"job": …, "plan": …}`` (or ``"capacity_gap"``, or a review's key: :data:`RESULT_KEYS`) with
    the stored JSON spliced in as it is."""
    key = RESULT_KEYS.get(job.kind, "plan").encode()
    head = b'{"job":' + job.model_dump_json(by_alias=True).encode()
    return head + b',"' + key + b'":' + result_json.encode() + b"}"


def visible_workloads(caller: Principal, input_json: str) -> frozenset[str] | None:
    """The workloads of a job's input the caller may see: ``None`` (all of them) for admins and
    planners, the ids of its team's workloads for a viewer. Parses the input: call it off the loop."""
    split = team_split(caller, input_json)
    return None if split is None else split[0]


def team_split(caller: Principal, input_json: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """``None`` for admins and planners; for a viewer the ids of its team's workloads in a job's input
    and those of every other team's. Parses the input: call it off the loop."""
    if caller.can_submit:
        return None
    workloads = json.loads(input_json).get("workloads", ())
    mine = frozenset(w["id"] for w in workloads if w.get("team") == caller.team)
    return mine, frozenset(w["id"] for w in workloads) - mine


def _team_result(caller: Principal, kind: str, result_json: str, input_json: str) -> str:
    split = team_split(caller, input_json)
    assert split is not None
    mine, others = split
    if kind == CAPACITY_GAP:
        gap = CapacityGap.model_validate_json(result_json)
        view = team_gap(gap, str(caller.team), mine, others)
        return view.model_dump_json(by_alias=True, exclude_none=True)
    plan = Plan.model_validate_json(result_json)
    return team_plan(plan, mine, others).model_dump_json(by_alias=True, exclude_none=True)


async def visible_result(store: Store, caller: Principal, job: JobRecord, result_json: str) -> str:
    """A job's stored result as the caller may see it: whole for admins and planners, a viewer's
    team's view otherwise (``planner.explain.team_view``: its own workloads and the fleet as a whole);
    a policy review (``api.reviews``) is for admins and planners only (403)."""
    if caller.can_submit:
        return result_json
    if job.kind in KINDS:
        # A review compares plans of the whole fleet under policies that name other teams.
        raise HTTPException(
            status_code=403, detail=f"role '{caller.role_text}' may not read policy reviews ({job.kind})"
        )
    data = await asyncio.to_thread(store.job_input, job.id)
    input_json = data.input_json if data is not None else "{}"
    return await asyncio.to_thread(_team_result, caller, job.kind, result_json, input_json)

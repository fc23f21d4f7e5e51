"""Job records as API bodies, and what of a job's result a caller may see."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import HTTPException

from gpuplan.api.auth import Principal
from gpuplan.api.schemas import JobLinks, JobOut
from gpuplan.api.store import JobRecord, Store
from gpuplan.models.capacity import CapacityGap
from gpuplan.models.plan import Plan
from gpuplan.planner.explain.team_view import team_gap, team_plan

PLANS = "/v1/plans"
#: Job kinds: a placement plan, or a capacity gap (what to re-partition and buy).
PLAN, CAPACITY_GAP = "plan", "capacity-gap"


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
    """``{"job": …, "plan": …}`` (or ``"capacity_gap"``) with the stored JSON spliced in as it is."""
    key = b"capacity_gap" if job.kind == CAPACITY_GAP else b"plan"
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
    team's view otherwise (``planner.explain.team_view``: its own workloads and the fleet as a whole)."""
    if caller.can_submit:
        return result_json
    data = await asyncio.to_thread(store.job_input, job.id)
    input_json = data.input_json if data is not None else "{}"
    return await asyncio.to_thread(_team_result, caller, job.kind, result_json, input_json)

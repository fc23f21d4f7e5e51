"""Job records as API bodies."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import HTTPException

from gpuplan.api.auth import Principal
from gpuplan.api.schemas import JobLinks, JobOut
from gpuplan.api.store import JobRecord

PLANS = "/v1/plans"
#: Job kinds: a placement plan, or a capacity gap (what to re-partition and buy).
PLAN, CAPACITY_GAP = "plan", "capacity-gap"


def job_out(job: JobRecord, progress: dict[str, Any] | None = None) -> JobOut:
    """The API view of a job: the stored record's fields, with live progress while it runs."""
    return JobOut.model_validate(
        {
            **asdict(job),
            "status": job.status.value,
            "progress": progress,
            "links": JobLinks(self_=f"{PLANS}/{job.id}", result=f"{PLANS}/{job.id}/result"),
        }
    )


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

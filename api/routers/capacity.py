"""``POST /v1/capacity-gap``: a job that finds what to re-partition and buy to serve the waiting demand."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response, status

from gpuplan.api.bodies import CapacityGapBody, documented
from gpuplan.api.deps import JobsDep, Submitter
from gpuplan.api.jobs import SUBMIT_RESPONSES, Wait
from gpuplan.api.schemas import CapacityGapRequest, JobOut, JobResult
from gpuplan.api.views import CAPACITY_GAP

router = APIRouter(prefix="/v1", tags=["capacity"])


@router.post(
    "/capacity-gap",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses={
        200: {"model": JobResult, "description": "finished within ?wait: the job and its capacity gap"},
        **SUBMIT_RESPONSES,
    },
    openapi_extra=documented(CapacityGapRequest),
)
async def submit_gap(
    caller: Submitter, body: CapacityGapBody, jobs: JobsDep, response: Response, wait: Wait = 0
) -> Any:
    """Queue a capacity-gap job (plan, re-partition MIG, then the cheapest purchase); poll it like a plan.

    The solves may take several times ``time_limit_s``: the fleet plan, a re-partition plan, the purchase
    MILP and the placement checks of the bought nodes.
    """
    extra: dict[str, Any] = {}
    if body.node_types is not None:
        extra["node_types"] = body.node_types.model_dump(mode="json")
    time_limit = body.options.time_limit_s or jobs.settings.default_time_limit_s
    extra["budget_s"] = 6 * min(time_limit, jobs.settings.limits.max_time_limit_s)
    return await jobs.enqueue(CAPACITY_GAP, body, extra, caller, response, wait)

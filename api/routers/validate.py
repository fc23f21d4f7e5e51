"""``POST /v1/validate``: check a plan against a cluster with the independent validator."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from pydantic import ValidationError

from gpuplan.api.deps import SettingsDep, Submitter
from gpuplan.api.errors import InputRejected
from gpuplan.api.routers.plans import check_size
from gpuplan.api.schemas import ValidateRequest, ValidateResponse, ViolationOut
from gpuplan.models.catalog import default_catalog
from gpuplan.models.problem import PlanningInput
from gpuplan.planner.cli import implied_workloads
from gpuplan.planner.validate import validate_plan

router = APIRouter(prefix="/v1", tags=["validate"])


def _check(body: ValidateRequest) -> ValidateResponse:
    workloads = body.workloads if body.workloads is not None else implied_workloads(body.plan)
    try:
        inp = PlanningInput.model_validate(
            {"cluster": body.cluster, "workloads": workloads, "policy": body.policy}
        )
    except ValidationError as exc:
        msg = str(exc.errors(include_url=False)[0]["msg"]).removeprefix("Value error, ")
        raise InputRejected(("body", "workloads" if body.workloads is not None else "plan"), msg) from None
    violations = validate_plan(body.plan, inp, default_catalog())
    return ValidateResponse(
        valid=not violations,
        violations=[ViolationOut(rule=v.rule, subject=v.subject, message=v.message) for v in violations],
    )


@router.post(
    "/validate",
    response_model=ValidateResponse,
    responses={401: {"description": "no valid API key"}, 403: {"description": "viewers may not validate"}},
)
async def validate(body: ValidateRequest, caller: Submitter, settings: SettingsDep) -> ValidateResponse:
    """Every rule the plan breaks (an empty list: the plan is valid)."""
    workloads = len(body.workloads) if body.workloads is not None else len(body.plan.assignments)
    check_size(settings.limits, len(body.cluster.nodes), workloads)
    return await asyncio.to_thread(_check, body)

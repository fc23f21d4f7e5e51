"""``POST /v1/validate``: check a plan against a cluster with the independent validator."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from pydantic import ValidationError

from gpuplan.api.bodies import ValidateBody, documented
from gpuplan.api.deps import SettingsDep, Submitter
from gpuplan.api.errors import InputRejected
from gpuplan.api.jobs import check_demand, check_size
from gpuplan.api.schemas import SkippedOut, ValidateRequest, ValidateResponse, ViolationOut
from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.planner.validation.validate import ImpliedWorkloadError, check_plan, implied_workloads

router = APIRouter(prefix="/v1", tags=["validate"])


def _check(body: ValidateRequest) -> ValidateResponse:
    implied = body.workloads is None
    try:
        workloads = implied_workloads(body.plan, body.policy) if body.workloads is None else body.workloads
    except ImpliedWorkloadError as exc:
        raise InputRejected(("body", "plan", *exc.loc), exc.reason) from None
    try:
        inp = PlanningInput.model_validate(
            {"cluster": body.cluster, "workloads": workloads, "policy": body.policy}
        )
    except ValidationError as exc:
        msg = str(exc.errors(include_url=False)[0]["msg"]).removeprefix("Value error, ")
        raise InputRejected(("body", "plan" if implied else "workloads"), msg) from None
    report = check_plan(body.plan, inp, default_catalog(), workloads_implied=implied)
    return ValidateResponse(
        valid=report.valid,
        violations=[
            ViolationOut(rule=v.rule, subject=v.subject, message=v.message) for v in report.violations
        ],
        skipped=[SkippedOut(family=s.family, reason=s.reason) for s in report.skipped] or None,
    )


@router.post(
    "/validate",
    response_model=ValidateResponse,
    response_model_exclude_none=True,
    responses={
        401: {"description": "no valid API key"},
        403: {"description": "viewers may not validate"},
        413: {"description": "nodes, workloads, GPUs per node or replicas beyond a limit"},
        422: {"description": "bad input: the detail names the field"},
    },
    openapi_extra=documented(ValidateRequest),
)
async def validate(caller: Submitter, body: ValidateBody, settings: SettingsDep) -> ValidateResponse:
    """Every rule the plan breaks (an empty list: the plan is valid), and the rule families that could not
    be checked (``skipped``, e.g. shapes and running work when the workloads are not given)."""
    workloads = len(body.workloads) if body.workloads is not None else len(body.plan.assignments)
    check_size(settings.limits, len(body.cluster.nodes), workloads)
    check_demand(settings.limits, body.cluster, body.workloads or ())
    return await asyncio.to_thread(_check, body)

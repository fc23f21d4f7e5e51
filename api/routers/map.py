"""``GET /v1/plans/{id}/map``: a finished plan drawn as a cluster map (self-contained HTML or SVG).

A viewer's map names only its team's workloads; other teams' work is drawn as anonymous occupancy.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query, Response

from gpuplan.api.auth import Principal
from gpuplan.api.deps import Caller, StoreDep
from gpuplan.api.jobs import JobId, finished_plan
from gpuplan.api.views import PLANS, visible_workloads
from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.planner.io.exporters.map import Colour, render_html, render_svg

router = APIRouter(prefix=PLANS, tags=["map"])

_MEDIA = {"html": "text/html; charset=utf-8", "svg": "image/svg+xml"}


def _render(caller: Principal, job_id: str, plan_json: str, input_json: str, fmt: str, colour: Colour) -> str:
    catalog = default_catalog()
    plan = Plan.model_validate_json(plan_json)
    inp = PlanningInput.model_validate_json(input_json, context={"catalog": catalog})
    mine = visible_workloads(caller, input_json)
    if fmt == "svg":
        return render_svg(plan, inp, catalog, colour=colour, visible=mine)
    return render_html(
        plan, inp, catalog, title=f"gpuplan cluster map: plan {job_id}", colour=colour, visible=mine
    )


@router.get(
    "/{job_id}/map",
    response_class=Response,
    responses={
        200: {"content": {m: {} for m in _MEDIA.values()}, "description": "the cluster map"},
        401: {"description": "no valid API key"},
        403: {"description": "outside the caller's role"},
        404: {"description": "no such job"},
        409: {"description": "the job has no plan (yet)"},
        422: {"description": "bad query: the detail names the parameter"},
    },
)
async def plan_map(
    job_id: JobId,
    caller: Caller,
    store: StoreDep,
    format: Annotated[
        str, Query(pattern="^(html|svg)$", description="html (with a colour switch) or svg")
    ] = "html",
    colour: Annotated[Colour, Query(description="colour work by tier or team")] = "tier",
) -> Response:
    """The plan as a cluster map: nodes by pool, GPUs, MIG instances, fractions, NVLink cliques, stranded
    free capacity and the waiting queue with reason codes."""
    plan, data = await finished_plan(store, caller, job_id, "draw")
    text = await asyncio.to_thread(_render, caller, job_id, plan, data.input_json, format, colour)
    return Response(text, media_type=_MEDIA[format])

"""``GET /v1/plans/{id}/export.xlsx`` and ``.csv``: a finished plan as a workbook or one sheet as CSV.

A viewer's export holds its team's workloads (placements, waits, showback) and the fleet sheets whole.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from gpuplan.api.auth import Principal
from gpuplan.api.deps import Caller, StoreDep
from gpuplan.api.jobs import JobId, finished_plan
from gpuplan.api.views import PLANS, visible_workloads
from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.planner.capacity.node_types import load_node_types
from gpuplan.planner.io.exporters.workbook import SHEETS, About, build_tables, csv_text, write_xlsx

router = APIRouter(prefix=PLANS, tags=["exports"])

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"

SHEET_PATTERN = f"^({'|'.join(SHEETS)})$"

_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "no valid API key"},
    403: {"description": "outside the caller's role"},
    404: {"description": "no such job"},
    409: {"description": "the job has no plan (yet)"},
}


def _tables(caller: Principal, plan_json: str, input_json: str) -> dict[str, Any]:
    catalog = default_catalog()
    plan = Plan.model_validate_json(plan_json)
    inp = PlanningInput.model_validate_json(input_json, context={"catalog": catalog})
    mine = visible_workloads(caller, input_json)
    return build_tables(plan, catalog, inp, None, load_node_types(None, catalog), workloads=mine)


def _xlsx(caller: Principal, plan_json: str, input_json: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.xlsx"
        asked = "a plan job of the gpuplan REST API, exported as a workbook"
        write_xlsx(_tables(caller, plan_json, input_json), path, About(asked=asked))
        return path.read_bytes()


def _csv(caller: Principal, plan_json: str, input_json: str, sheet: str) -> str:
    return csv_text(_tables(caller, plan_json, input_json)[sheet])


@router.get(
    "/{job_id}/export.xlsx",
    response_class=Response,
    responses={200: {"content": {XLSX: {}}, "description": "the plan workbook"}, **_RESPONSES},
)
async def export_xlsx(job_id: JobId, caller: Caller, store: StoreDep) -> Response:
    """The plan workbook: cover, summary, placements, waits, nodes, pools, fragmentation, teams, details."""
    plan, data = await finished_plan(store, caller, job_id, "export")
    content = await asyncio.to_thread(_xlsx, caller, plan, data.input_json)
    disposition = f'attachment; filename="plan-{job_id}.xlsx"'
    return Response(content, media_type=XLSX, headers={"Content-Disposition": disposition})


@router.get(
    "/{job_id}/export.csv",
    response_class=Response,
    responses={200: {"content": {"text/csv": {}}, "description": "one sheet as CSV"}, **_RESPONSES},
)
async def export_csv(
    job_id: JobId,
    caller: Caller,
    store: StoreDep,
    sheet: Annotated[str, Query(pattern=SHEET_PATTERN, description="a sheet of the workbook")] = "Placements",
) -> Response:
    """One sheet of the plan workbook as CSV (the placements unless ``?sheet=`` names another)."""
    plan, data = await finished_plan(store, caller, job_id, "export")
    text = await asyncio.to_thread(_csv, caller, plan, data.input_json, sheet)
    disposition = f'attachment; filename="plan-{job_id}-{sheet}.csv"'
    return Response(text, media_type="text/csv", headers={"Content-Disposition": disposition})

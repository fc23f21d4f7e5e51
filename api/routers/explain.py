"""``GET /v1/plans/{id}/explain/{workload}``: why a workload waits or runs on a worse alternative (a
workload id may hold ``/``).

Explanations re-solve to verify their counterfactuals, so they run in a solver process like a job (but
are not stored): the request waits for the answer. They are read-only work with their own limit,
``max_read_jobs``, so that viewers asking for explanations never use up the planners' ``max_active_jobs``.
A viewer may explain only its team's workloads, and sees no counterfactual naming another team's.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query

from gpuplan.api.deps import Caller, RunnerDep, SettingsDep, StoreDep
from gpuplan.api.jobs import JobId, check_reads, check_time_limit, finished_plan
from gpuplan.api.views import PLANS, team_split
from gpuplan.models.plan import Explanation
from gpuplan.planner.explain.team_view import team_explanations
from gpuplan.solvers.base import solver_names

router = APIRouter(prefix=PLANS, tags=["explain"])

_SOLVERS = f"^({'|'.join(solver_names())})$"


@router.get(
    "/{job_id}/explain/{workload:path}",
    response_model=list[Explanation],
    responses={
        401: {"description": "no valid API key"},
        403: {"description": "outside the caller's role"},
        404: {"description": "no such job, or no such workload in its input"},
        409: {"description": "the job has no plan (yet)"},
        413: {"description": "time limit beyond max_time_limit_s"},
        429: {"description": "too many explanations queued or running"},
        503: {"description": "the explanation could not be computed"},
    },
)
async def explain(
    job_id: JobId,
    workload: Annotated[str, Path(min_length=1, max_length=200)],
    caller: Caller,
    settings: SettingsDep,
    store: StoreDep,
    runner: RunnerDep,
    counterfactuals: Annotated[int, Query(ge=0, le=10, description="changes to verify by re-solving")] = 3,
    time_limit_s: Annotated[float, Query(gt=0, description="seconds per verifying re-solve")] = 2.0,
    solver: Annotated[str, Query(pattern=_SOLVERS)] = "cpsat",
) -> Any:
    """Each waiting or degraded replica of ``workload``: a reason code, the blocking resources, and
    counterfactual changes verified by re-solving (an empty list: every replica runs on its first choice)."""
    plan, data = await finished_plan(store, caller, job_id, "explain")
    check_time_limit(settings.limits, time_limit_s)
    ids = {w.get("id") for w in json.loads(data.input_json).get("workloads", ())}
    if workload not in ids:
        raise HTTPException(status_code=404, detail=f"job '{job_id}' has no workload '{workload}'")
    split = await asyncio.to_thread(team_split, caller, data.input_json)
    if split is not None and workload not in split[0]:
        raise HTTPException(
            status_code=403,
            detail=f"role '{caller.role_text}' may not explain workload '{workload}' of another team",
        )
    check_reads(settings.limits, runner)
    options = {
        "kind": "explain",
        "plan": plan,
        "workload": workload,
        "counterfactuals": counterfactuals,
        "solver": solver,
        "time_limit_s": time_limit_s,
        "num_workers": settings.solver_threads,
    }
    reply = await runner.call(options, data.input_json, (counterfactuals + 2) * time_limit_s)
    if reply[0] != "done":
        raise HTTPException(status_code=503, detail=f"no explanation: {reply[1]}: {reply[2]}")
    if split is None:
        return json.loads(reply[1])
    found = [Explanation.model_validate(e) for e in json.loads(reply[1])]
    return team_explanations(found, *split)

"""Run a solver on a planning input and turn its result into a validated, reproducible Plan."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from datetime import UTC, datetime
from functools import cache
from importlib import metadata
from typing import Any

from gpuplan.models.catalog import default_catalog
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.plan import NodeSharing, Plan, SolverReport
from gpuplan.models.problem import PlanningInput
from gpuplan.planner.actions import plan_actions
from gpuplan.planner.compile import compile_problem
from gpuplan.planner.deadline import MIN_SOLVE_S, Deadline, Stopwatch
from gpuplan.planner.errors import InvalidPlanError
from gpuplan.planner.explain import explain_all, with_explanations
from gpuplan.planner.layouts import cluster_with_sharing
from gpuplan.planner.metrics import fragmentation, plan_metrics
from gpuplan.planner.repair import without_idle_moves
from gpuplan.planner.sharing import choose_sharing, used_changes
from gpuplan.planner.timeline import previous_reservations, with_reservations
from gpuplan.planner.validate import validate_plan
from gpuplan.solvers.base import SolveResult, get_solver
from gpuplan.solvers.evaluate import reported
from gpuplan.solvers.problem import PlacementProblem

log = logging.getLogger(__name__)

#: Share of ``make_plan``'s time limit kept for the passes after the solve (predicted starts, repair,
#: actions, metrics, validation).
POST_SOLVE_SHARE = 0.1
#: Largest share of the time limit the sharing-mode pre-pass may take (its trials stop after it).
SHARING_SHARE = 0.1
#: Largest share of the time limit the explanations of waiting replicas may take.
EXPLAIN_SHARE = 0.25


@cache
def _version(dist: str) -> str:
    """The installed version of ``dist`` (read once per process: reading package metadata is slow)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


def inputs_digest(inp: PlanningInput) -> str:
    """SHA-256 of the canonical JSON of the planning input."""
    blob = json.dumps(inp.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _planned_at(provenance: dict[str, Any]) -> datetime | None:
    stamp = provenance.get("now")
    return datetime.fromisoformat(stamp) if isinstance(stamp, str) else None


def build_plan(
    inp: PlanningInput,
    problem: PlacementProblem,
    result: SolveResult,
    catalog: HardwareCatalog,
    provenance: dict[str, Any],
    sharing: tuple[NodeSharing, ...] = (),
) -> Plan:
    """Assemble a Plan from a solver result (and the sharing modes it gives nodes) and check it with the
    independent validator."""
    plan = Plan(
        status=result.status,
        solver=SolverReport(
            name=result.solver,
            objective=result.objective,
            best_bound=result.best_bound,
            bound_source=result.bound_source,
            gap=result.gap,
            wall_s=round(result.wall_s, 4),
            terms=result.terms,
            model_size=result.model_size,
        ),
        assignments=result.assignments,
        unplaced=result.unplaced,
        mig_layouts=result.mig_layouts,
        sharing=sharing,
        actions=plan_actions(
            inp, result.assignments, result.mig_layouts, catalog, _planned_at(provenance), sharing=sharing
        ),
        metrics={
            **plan_metrics(inp, result.assignments, catalog),
            **({"sharing_changes": float(len(sharing))} if sharing else {}),
            **fragmentation(problem, result.assignments, result.mig_layouts),
        },
        provenance=provenance,
    )
    violations = validate_plan(plan, inp, catalog)
    if violations:
        raise InvalidPlanError(result.solver, violations)
    return plan


def make_plan(
    inp: PlanningInput,
    *,
    solver: str = "cpsat",
    catalog: HardwareCatalog | None = None,
    now: datetime | None = None,
    time_limit_s: float = 30.0,
    seed: int = 0,
    num_workers: int = 2,
    deterministic: bool = False,
    explain: bool = False,
    explain_budget_s: float = 3.0,
    previous: Plan | None = None,
    ray: str | None = None,
) -> Plan:
    """Plan ``inp`` with the named solver; the result is validated before it is returned.

    ``time_limit_s`` bounds the whole call: the solve gets it less a share kept for the passes after it
    and for the explanations (a share fixed by the limit alone, so deterministic solves repeat).
    Each waiting replica's reason is the explainer's (the one ``gpuplan explain`` gives), and replicas on
    worse alternatives get theirs too; ``explain`` adds counterfactuals (verified by greedy re-solves),
    which stop after ``explain_budget_s`` seconds (at most a quarter of the time limit). ``ray`` runs the
    solver's independent pieces on that Ray cluster (``local``: a Ray instance here) instead of local
    processes; the plan is the same.
    """
    deadline = Deadline.after(time_limit_s)
    watch = Stopwatch()
    explain_s = min(explain_budget_s, EXPLAIN_SHARE * time_limit_s) if explain else 0.0
    solve_s = max(MIN_SOLVE_S, time_limit_s * (1 - POST_SOLVE_SHARE) - explain_s)
    catalog = catalog or default_catalog()
    now = now or datetime.now(UTC)
    # Drained nodes whose mode blocks waiting demand change mode first; the solvers see the new modes.
    started = time.perf_counter()
    changes = choose_sharing(inp, catalog, now, None if deterministic else SHARING_SHARE * time_limit_s)
    watch.lap("sharing")
    if not deterministic:
        # A deterministic solve keeps the share fixed by the limit alone; others give up what the pass took.
        solve_s = max(MIN_SOLVE_S, solve_s - (time.perf_counter() - started))
    planned = (
        inp.model_copy(update={"cluster": cluster_with_sharing(inp.cluster, changes)}) if changes else inp
    )
    problem = compile_problem(
        planned,
        catalog,
        now,
        time_limit_s=solve_s,
        seed=seed,
        num_workers=num_workers,
        deterministic=deterministic,
        ray=ray,
    )
    watch.lap("compile")
    log.info("planning %d replicas on %d nodes with %s", len(problem.requests), len(problem.nodes), solver)
    result = get_solver(solver).solve(problem)
    watch.lap("solve")
    # Predicted starts and reservations; ``previous`` keeps the last plan's reservations that still fit.
    reserved = previous_reservations(previous, inp) if previous is not None else None
    # The predicted-start pass gets what the solve left of the time kept for the passes after it.
    post = deadline.reserve(explain_s + POST_SOLVE_SHARE * time_limit_s / 2)
    result = with_reservations(planned, problem, result, catalog, now, reserved, post)
    watch.lap("timeline")
    result = without_idle_moves(planned, problem, result, catalog)
    watch.lap("idle_moves")
    # The report describes the plan returned, after every pass that changed it.
    result = reported(problem, result)
    provenance = {
        "inputs_sha256": inputs_digest(inp),
        "gpuplan_version": _version("gpuplan"),
        "ortools_version": _version("ortools"),
        "pydantic_version": _version("pydantic"),
        "solver": solver,
        "seed": seed,
        "time_limit_s": time_limit_s,
        "solve_time_limit_s": round(solve_s, 3),
        "num_workers": num_workers,
        "deterministic": deterministic,
        "now": now.isoformat(),
    }
    kept = used_changes(changes, inp, result.assignments, result.unplaced)
    plan = build_plan(inp, problem, result, catalog, provenance, kept)
    watch.lap("build")
    # Every waiting replica gets its reason from the explainer, as ``gpuplan explain`` would give it.
    found = explain_all(
        inp,
        plan,
        catalog=catalog,
        now=now,
        counterfactuals=3 if explain else 0,
        solver="greedy-fgd",
        budget_s=min(explain_s, deadline.remaining()),
    )
    plan = with_explanations(plan, found)
    watch.lap("reasons")
    log.info("plan phases: %s", watch.line())
    return plan

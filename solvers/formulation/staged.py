"""Lexicographic solving shared by the exact back-ends, and turning a solution into a SolveResult.

A back-end solves one stage at a time; after each stage the stage's objective is bounded by the value
found, and the next term is minimised. The result is ``OPTIMAL`` only if every stage was proved optimal.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Protocol

from gpuplan.models.cluster import MigInstance
from gpuplan.models.plan import Assignment, GpuUse, MigLayout, PlanStatus, Unplaced
from gpuplan.models.policy import ObjectiveMode
from gpuplan.solvers.base import NO_EXACT_SOLUTION, SolveResult
from gpuplan.solvers.formulation.builder import Expr, Var
from gpuplan.solvers.formulation.objective import Terms, floor_weight
from gpuplan.solvers.formulation.variables import Candidate, Variables
from gpuplan.solvers.placement.never import never_fitting
from gpuplan.solvers.placement.options import describe
from gpuplan.solvers.problem import PlacementProblem
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)

#: Share of the time limit given to each lexicographic stage (unused time rolls over).
STAGE_SHARES = {
    "floor": 0.3,
    "queue": 0.6,
    "fragmentation": 0.25,
    "disruption+topology": 0.15,
    "weighted": 1.0,
}
#: Weight of disruption over topology inside the last stage (disruption is strictly preferred).
DISRUPTION_OVER_TOPOLOGY = 1000

#: Solution values of the variables: var -> value.
Values = Callable[[Var], int]


@dataclass(frozen=True)
class StageResult:
    """What one solve of one stage established."""

    name: str
    optimal: bool
    objective: float | None
    bound: float | None
    wall_s: float
    stage: str = ""


class StageSolver(Protocol):
    """A back-end able to minimise one expression at a time on the model it built."""

    def minimise(self, expr: Expr, time_limit_s: float) -> tuple[StageResult, Values | None]:
        """Minimise ``expr``: the stage report and the solution (None when none was found)."""
        ...

    def bound(self, expr: Expr, value: int, values: Values) -> None:
        """Keep ``expr <= value`` for later stages, starting them from ``values``."""
        ...


def stages(problem: PlacementProblem, v: Variables, t: Terms) -> list[tuple[str, Expr]]:
    """The objective stages the policy asks for; logged with their names and, for one weighted stage,
    its weights (the progress lines label each stage's values: ``planner.presentation.progress``)."""
    m = v.model
    weights = None
    if problem.policy.objective is ObjectiveMode.WEIGHTED:
        w = weights = problem.policy.weights
        weighted = m.sum(
            [
                w.queue * t.queue,
                w.fragmentation * t.fragmentation,
                w.disruption * t.disruption,
                w.topology * t.topology,
            ]
        )
        todo = [("weighted", weighted)]
    else:
        # Under a fairness floor, what the teams lack of it first (the queue term counts each whole
        # GPU-equivalent short above all waiting replicas: the same order, on a small scale).
        todo = [("floor", t.floor)] if t.floor is not None else []
        todo += [
            ("queue", t.queue),
            ("fragmentation", t.fragmentation),
            ("disruption+topology", m.sum([DISRUPTION_OVER_TOPOLOGY * t.disruption, t.topology])),
        ]
    names = tuple(name for name, _ in todo)
    log.debug("objective stages: %s", ", ".join(names), extra={"stages": names, "weights": weights})
    return todo


def run_stages(
    problem: PlacementProblem,
    options: RunOptions,
    v: Variables,
    terms: Terms,
    backend: StageSolver,
    start: float,
) -> tuple[list[StageResult], Values | None, int]:
    """Solve the stages within the options' time limit counted from ``start``.

    Returns the stage reports, the last solution and the number of stages the policy asked for.
    """
    todo = stages(problem, v, terms)
    deadline = start + options.time_limit_s
    results: list[StageResult] = []
    solution: Values | None = None
    total = sum(STAGE_SHARES[n] for n, _ in todo)
    for i, (name, expr) in enumerate(todo):
        remaining = (
            options.time_limit_s * sum(STAGE_SHARES[n] for n, _ in todo[i:]) / total
            if options.deterministic
            else deadline - time.perf_counter()
        )
        share = sum(STAGE_SHARES[n] for n, _ in todo[i:])
        limit = remaining * STAGE_SHARES[name] / share
        if limit <= 0.01 and solution is not None:
            break
        report, found = backend.minimise(expr, max(0.001, limit))
        report = replace(report, stage=name)
        results.append(report)
        if found is None:
            break
        solution = found
        backend.bound(expr, round(report.objective or 0), found)
    return results, solution, len(todo)


def _queue_bound(problem: PlacementProblem, reports: list[StageResult]) -> int | None:
    """A bound of the queue term from the stages of a full model (the term is an integer: CP-SAT's
    float bounds round up). Under a fairness floor, the queue stage's bound holds only once the floor
    stage proved the least lack; else every plan lacks at least the floor stage's bound, each whole
    GPU-equivalent at :func:`~gpuplan.solvers.formulation.objective.floor_weight`."""
    by_stage = {s.stage: s for s in reports}
    floor, queue = by_stage.get("floor"), by_stage.get("queue")
    if floor is not None and not (floor.optimal and queue is not None and queue.bound is not None):
        lack = 0 if floor.bound is None else math.ceil(floor.bound - 1e-6)
        return floor_weight(problem) * lack
    if queue is None or queue.bound is None:
        return None
    return math.ceil(queue.bound - 1e-6)


def result(
    name: str,
    problem: PlacementProblem,
    v: Variables,
    reports: list[StageResult],
    solution: Values,
    n_stages: int,
    wall: float,
    size: dict[str, int],
    *,
    never: Collection[int],
    full: bool,
) -> SolveResult:
    """The SolveResult of a solution: assignments, MIG layouts, unplaced reasons and the report.

    ``never`` holds the requests no node could host even empty (checked on the whole fleet). ``full``
    says whether the model was the full problem (every node a candidate, all running work the policy
    lets move free to move): only then is a proof ``OPTIMAL`` and the first stage's bound a bound of the
    problem; otherwise the plan is at most ``FEASIBLE`` and carries no bound here.
    """

    def val(var: Var | int) -> int:
        return var if isinstance(var, int) else solution(var)

    assignments: list[Assignment] = []
    for r in v.fixed:
        run = problem.requests[r].running
        assert run is not None
        assignments.append(problem.requests[r].assignment(run))
    placed: set[int] = set(v.fixed)
    for cand in v.cands.values():
        if val(cand.x):
            assignments.append(_assignment(problem, cand, val))
            placed.add(cand.req)
    layouts = []
    for (n, p), mg in sorted(v.mig_gpus.items()):
        node = problem.nodes[n]
        insts = sorted((s, prof) for (prof, s), i in mg.inst.items() if val(i))
        layouts.append(
            MigLayout(
                node=node.name,
                gpu=node.gpus[p].index,
                instances=tuple(MigInstance(profile=prof, start=s) for s, prof in insts),
            )
        )
    unplaced = [_unplaced(problem, v, r, r in never) for r in range(len(problem.requests)) if r not in placed]
    proven = full and len(reports) == n_stages and all(s.optimal for s in reports)
    bound = None
    if full and problem.policy.objective is ObjectiveMode.LEXICOGRAPHIC:
        bound = _queue_bound(problem, reports)
    terms: dict[str, float] = {}
    for s in reports:
        terms[f"stage_{s.stage}_wall_s"] = round(s.wall_s, 3)
        terms[f"stage_{s.stage}_optimal"] = 1.0 if s.optimal else 0.0
        if s.objective is not None:
            terms[f"stage_{s.stage}_objective"] = float(round(s.objective))
        if s.bound is not None:
            terms[f"stage_{s.stage}_bound"] = s.bound
    return SolveResult(
        status=PlanStatus.OPTIMAL if proven else PlanStatus.FEASIBLE,
        solver=name,
        assignments=tuple(sorted(assignments, key=lambda a: (a.workload, a.replica))),
        unplaced=tuple(unplaced),
        mig_layouts=tuple(layouts),
        best_bound=None if bound is None else float(bound),
        bound_source=f"{name} (full model)" if bound is not None else None,
        wall_s=wall,
        terms=terms,
        model_size=size,
    )


def fallback(
    name: str,
    greedy: SolveResult,
    reports: list[StageResult],
    wall: float,
    size: dict[str, int],
    *,
    improved: bool = False,
) -> SolveResult:
    """The best plan before the exact solve, when the exact back-end found nothing in time: labelled
    ``FALLBACK`` when it is the greedy start, ``FEASIBLE`` when a search before the exact solve
    (``improved``) beat that start."""
    return SolveResult(
        status=PlanStatus.FEASIBLE if improved else PlanStatus.FALLBACK,
        solver=name,
        assignments=greedy.assignments,
        unplaced=greedy.unplaced,
        mig_layouts=greedy.mig_layouts,
        wall_s=wall,
        terms={
            (NO_EXACT_SOLUTION if improved else "fallback"): 1.0,
            **{f"stage_{r.stage}_wall_s": round(r.wall_s, 3) for r in reports},
        },
        model_size=size,
    )


def _assignment(problem: PlacementProblem, cand: Candidate, get: Callable[[Var], int]) -> Assignment:
    """The plan entry of a chosen candidate, from the solution values of its GPU variables."""
    req = problem.requests[cand.req]
    shape = req.shapes[cand.alt]
    node = problem.nodes[cand.node]
    gpus: list[GpuUse] = []
    for p, var in sorted(cand.whole.items()):
        if get(var):
            gpus.append(GpuUse(index=node.gpus[p].index))
    for p, var in sorted(cand.frac.items()):
        if get(var):
            gpus.append(GpuUse(index=node.gpus[p].index, milli=shape.milli))
    for (p, (prof, s)), var in sorted(cand.mig.items()):
        if get(var):
            gpus.append(GpuUse(index=node.gpus[p].index, mig_profile=prof, mig_start=s))
    return Assignment(
        workload=req.workload,
        replica=req.replica,
        node=node.name,
        gpus=tuple(gpus),
        cpu_milli=shape.cpu_milli,
        memory_mib=shape.memory_mib,
        gpu_memory_mib=shape.gpu_memory_mib,
        alternative=cand.alt,
    )


def _unplaced(problem: PlacementProblem, v: Variables, r: int, never: bool) -> Unplaced:
    req = problem.requests[r]
    what = " or ".join(describe(s) for s in req.shapes)
    if never:
        code, why = "NEVER_FITS", f"no node of the cluster could host {what}, even if empty"
        if req.gang is not None:  # perhaps its gang as a whole (worked out once per model)
            if v.never_fitting is None:
                v.never_fitting = never_fitting(problem)
            why = v.never_fitting.get(req.key, why)
    elif req.gang is not None:
        code, why = "GANG", f"gang '{req.gang}' cannot be placed entirely ({what})"
    else:
        code, why = "NO_CAPACITY", f"no free capacity for {what} that the plan could give it"
    return Unplaced(workload=req.workload, replica=req.replica, code=code, reason=why)

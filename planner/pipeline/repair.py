"""Undo moves and preemptions that buy nothing, after any solve.

A solver stopped by its time limit in a late stage (disruption) can return a plan that migrates a
running replica to an identical empty node, or between GPUs of one node, or preempts work whose GPUs
nobody takes. Each such change disturbs running work for nothing. Here every move and preemption of a
plan is tried in reverse on the plan's final state: when the replica's old place is still free and
putting it back leaves the queue term and FGD's fragmentation of the nodes concerned as good, the
change is dropped. The repaired plan is checked by the independent validator as a whole.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import replace

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.plan import Assignment, MigLayout, Plan, PlanStatus, SolverReport
from gpuplan.models.problem import PlanningInput
from gpuplan.planner.pipeline.layouts import cluster_with_layouts
from gpuplan.planner.pipeline.occupancy import Holding, Key, Occupancy, holding
from gpuplan.planner.validation.validate import validate_plan
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.evaluate import NodeFragmentation
from gpuplan.solvers.problem import PlacementProblem, Request

log = logging.getLogger(__name__)


def _origin(req: Request) -> Holding:
    run = req.running
    assert run is not None
    shape = req.shapes[run.alternative]
    return Holding(
        run.node, run.gpus, shape.cpu_milli, shape.memory_mib, run.alternative, shape.gpu_memory_mib
    )


def _idle_created(
    problem: PlacementProblem, layouts: tuple[MigLayout, ...], assignments: tuple[Assignment, ...]
) -> tuple[MigLayout, ...]:
    """The layouts without new MIG instances that no replica uses any more."""
    current = {(n.name, g.index): set(g.mig) for n in problem.nodes for g in n.gpus if g.mig is not None}
    used = {
        (a.node, g.index, g.mig_profile, g.mig_start)
        for a in assignments
        for g in a.gpus
        if g.mig_profile is not None
    }
    out = []
    for lay in layouts:
        old = current.get((lay.node, lay.gpu), set())
        kept = tuple(
            i
            for i in lay.instances
            if (i.profile, i.start) in old or (lay.node, lay.gpu, i.profile, i.start) in used
        )
        out.append(lay.model_copy(update={"instances": kept}) if kept != lay.instances else lay)
    return tuple(out)


def without_idle_moves(
    inp: PlanningInput, problem: PlacementProblem, result: SolveResult, catalog: HardwareCatalog
) -> SolveResult:
    """``result`` with every move or preemption undone whose undoing loses nothing (see module doc)."""
    placed = {(a.workload, a.replica): a for a in result.assignments}
    disturbed = [
        q
        for q in problem.requests
        if q.running is not None
        and (
            q.key not in placed
            or placed[q.key].node != q.running.node
            or set(placed[q.key].gpus) != set(q.running.gpus)
            or placed[q.key].alternative != q.running.alternative
        )
    ]
    if not disturbed:
        return result
    occ = Occupancy.empty(cluster_with_layouts(inp.cluster, result.mig_layouts), catalog)
    on_node: dict[str, dict[Key, Assignment]] = defaultdict(dict)
    for a in result.assignments:
        occ.start((a.workload, a.replica), holding(a), force=True)
        on_node[a.node][(a.workload, a.replica)] = a
    meter = NodeFragmentation(problem, result.mig_layouts)
    undone: list[Request] = []
    for q in sorted(disturbed, key=lambda q: q.key):
        now = placed.get(q.key)
        back = _origin(q)
        if now is not None:
            occ.stop(q.key)
        if occ.problem(q.key, back) is not None:
            if now is not None:
                occ.start(q.key, holding(now), force=True)
            continue
        assert q.running is not None
        home = q.assignment(q.running)
        if now is not None:
            nodes = {now.node, back.node}
            before = sum(meter.of(n, on_node[n].values()) for n in nodes)
            trial = {n: {k: a for k, a in on_node[n].items() if k != q.key} for n in nodes}
            trial[back.node][q.key] = home
            after = sum(meter.of(n, trial[n].values()) for n in nodes)
            if after > before:
                occ.start(q.key, holding(now), force=True)
                continue
            del on_node[now.node][q.key]
        occ.start(q.key, back)
        on_node[back.node][q.key] = home
        placed[q.key] = home
        undone.append(q)
    if not undone:
        return result
    assignments = tuple(sorted(placed.values(), key=lambda a: (a.workload, a.replica)))
    layouts = _idle_created(problem, result.mig_layouts, assignments)
    keys = {q.key for q in undone}
    repaired = replace(
        result,
        status=PlanStatus.FEASIBLE if result.status is PlanStatus.OPTIMAL else result.status,
        assignments=assignments,
        unplaced=tuple(u for u in result.unplaced if (u.workload, u.replica) not in keys),
        mig_layouts=layouts,
        terms={**result.terms, "idle_moves_undone": float(len(undone))},
    )
    trial_plan = Plan(
        status=repaired.status,
        solver=SolverReport(name=repaired.solver),
        assignments=repaired.assignments,
        unplaced=repaired.unplaced,
        mig_layouts=repaired.mig_layouts,
    )
    violations = [
        v
        for v in validate_plan(trial_plan, inp, catalog, actions_derived=False)
        if not v.rule.startswith("disruption")
    ]
    if violations:
        log.info("undoing idle moves breaks %s; keeping the solver's plan", violations[0].message)
        return result
    log.info("undid %d move(s) or preemption(s) that bought nothing", len(undone))
    return repaired

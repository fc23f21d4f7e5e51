"""The demand a capacity gap serves: the waiting replicas the fleet plan leaves past their tier's
target, kept to their GPU class (like-for-like), and the replicas no node type can ever host. What
is asked for, apart from how it is served.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan, Unplaced
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.capacity.purchase import TypeSpec, shape_fits
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.deadline import Deadline
from gpuplan.planner.pipeline.layouts import cluster_with_mig_modes, cluster_with_sharing
from gpuplan.planner.pipeline.timeline import roll_forward
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.problem import PlacementProblem, Request, ShapeSpec, gangs_in_part

Key = tuple[str, int]

#: The pass of a plan that gives waiting replicas their predicted start, as ``cut_short`` names it.
PREDICTED_STARTS = "predicted starts"


def planning_now(plan: Plan, given: datetime | None) -> datetime | None:
    """``given``, else the planning time the plan records (``None`` when it records none)."""
    if given is not None:
        return given
    text = plan.provenance.get("now")
    return datetime.fromisoformat(text) if isinstance(text, str) else None


def gap_demand(plan: Plan, inp: PlanningInput, now: datetime | None = None) -> list[Unplaced]:
    """Waiting replicas without a predicted start, or predicted to start after their tier's target
    (counted from ``now``, by default the plan's own planning time)."""
    now = planning_now(plan, now)
    out = []
    for u in plan.unplaced:
        target = inp.policy.tier(inp.workload_by_id[u.workload].tier).target_wait_s
        if u.predicted_start is not None and now is not None and target is not None:
            start = datetime.fromisoformat(u.predicted_start)
            if (start - now).total_seconds() <= target:
                continue
        out.append(u)
    return out


def with_predictions(
    plan: Plan, inp: PlanningInput, catalog: HardwareCatalog, now: datetime | None, deadline: Deadline
) -> tuple[Plan, bool]:
    """``plan`` with a predicted start for the waiting replicas its predicted-start pass did not reach
    (the time limit cut it), and whether that finished within ``deadline``.

    Without it the gap demand would count those replicas although they may start within their target,
    and so depend on how far the pass got rather than on the inputs: two runs of the same fleet, or a
    scenario and the baseline, would not be comparable. The plan itself is not changed otherwise.
    """
    cut = plan.provenance.get("cut_short")
    if now is None or not isinstance(cut, list | tuple) or PREDICTED_STARTS not in cut:
        return plan, True
    cluster = cluster_with_sharing(cluster_with_mig_modes(inp.cluster, plan.mig_modes), plan.sharing)
    planned = inp.model_copy(update={"cluster": cluster})
    problem = compile_problem(planned, catalog, now)
    result = SolveResult(
        status=plan.status, solver=plan.solver.name, assignments=plan.assignments,
        unplaced=plan.unplaced, mig_layouts=plan.mig_layouts,
    )  # fmt: skip
    timeline = roll_forward(planned, problem, result, catalog, now, {}, deadline)
    unplaced = []
    for u in plan.unplaced:
        key = (u.workload, u.replica)
        r = timeline.reservations.get(key)
        # A replica the roll would start now fits now: its predicted start is now.
        start = r.start_s if r is not None else 0.0 if key in timeline.starts else None
        if u.predicted_start is None and start is not None:
            u = u.model_copy(update={"predicted_start": (now + timedelta(seconds=start)).isoformat()})
        unplaced.append(u)
    return plan.model_copy(update={"unplaced": tuple(unplaced)}), not timeline.cut


def home_models(inp: PlanningInput, shape: ShapeSpec, workload: str) -> frozenset[str]:
    """The GPU class a shape without a named GPU model keeps: the models the workload's replicas run
    on, else the models of the fleet's GPUs, each narrowed to what the shape allows (its GPU memory
    ask); the shape's own models when neither leaves any."""
    running = {
        inp.cluster.node_by_name[p.node].gpu_by_index[g.index].model
        for p in inp.workload_by_id[workload].running_on
        for g in p.gpus
        if p.node in inp.cluster.node_by_name
    }
    fleet = {g.model for n in inp.cluster.nodes for g in n.gpus}
    for models in (running, fleet):
        fit = frozenset(m for m in models if not shape.models or m in shape.models)
        if fit:
            return fit
    return shape.models


def names_models(shape: ShapeSpec) -> bool:
    """Whether the workload names the GPU models of ``shape``: the compiled shape keeps them in
    ``named_models`` when a GPU memory ask narrowed them, else in ``models`` (which the memory ask alone
    fills otherwise)."""
    return bool(shape.named_models) or bool(shape.models and not shape.gpu_memory_mib)


def like_for_like(inp: PlanningInput, requests: list[Request], opts: GapOptions) -> list[Request]:
    """``requests`` with each shape that names no GPU model kept to its class (:func:`home_models`),
    except for workloads the options let buy other models."""
    out = []
    for r in requests:
        if opts.other_models(r.workload):
            out.append(r)
            continue
        shapes = tuple(
            s if names_models(s) or s.kind == "cpu" else replace(s, models=home_models(inp, s, r.workload))
            for s in r.shapes
        )
        out.append(replace(r, shapes=shapes))
    return out


def unservable_reasons(requests: list[Request], types: list[TypeSpec]) -> dict[Key, str]:
    """Replicas no node type can ever host (whole gangs when one member cannot), with the reason."""
    out: dict[Key, str] = {}
    for r in requests:
        if any(shape_fits(s, t) is None for s in r.shapes for t in types):
            continue
        why = "; ".join(
            f"alternative {k} on {t.name}: {shape_fits(s, t)}" for k, s in enumerate(r.shapes) for t in types
        )
        out[r.key] = (
            f"workload '{r.workload}' replica {r.replica}: no node type of the catalog can ever host it "
            f"({why})"
        )
    gangs = {r.gang for r in requests if r.gang is not None and r.key in out}
    for r in requests:
        if r.gang in gangs and r.key not in out:
            out[r.key] = (
                f"workload '{r.workload}' replica {r.replica}: its gang '{r.gang}' has a member that no "
                "node type can host"
            )
    return out


def joined_in_domain(problem: PlacementProblem, requests: list[Request]) -> dict[Key, str]:
    """The waiting members of a gang that runs in part and has a domain label, with the reason no
    purchase serves them: they may only join its running members inside their value of that label
    (:func:`~gpuplan.solvers.problem.gangs_in_part`), and bought nodes carry a value of their own."""
    in_part = gangs_in_part(problem.requests)
    domains = {q.gang for q in problem.requests if q.gang in in_part and q.gang_domain}
    return {
        r.key: (
            f"workload '{r.workload}' replica {r.replica}: its gang '{r.gang}' runs in part and has a "
            "domain label: its waiting replicas may only join the running ones inside their value, and "
            "bought nodes carry a value of their own"
        )
        for r in requests
        if r.gang in domains
    }


def kept_models(requests: list[Request], by_key: dict[Key, Request]) -> dict[str, tuple[str, ...]]:
    """The GPU models each workload whose shapes :func:`like_for_like` narrowed is kept to."""
    keep: dict[str, set[str]] = defaultdict(set)
    for r in requests:
        for s, before in zip(r.shapes, by_key[r.key].shapes, strict=True):
            if s.models != before.models and s.models:
                keep[r.workload] |= s.models
    return {w: tuple(sorted(m)) for w, m in keep.items()}

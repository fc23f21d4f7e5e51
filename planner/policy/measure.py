"""The figures both policy reviews compare plans by: per team, tier or in total, replicas placed and
waiting, the queue term, queue hours to the predicted starts (plain and tier-weighted), preemptions and
GPU-equivalents allocated; and a plan's solve (status, objective, bound, gap).

The queue term and the weighted figures are measured with one policy's tier weights (the *measure*),
whatever policy a plan was made under, so that two plans are compared on one scale.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import PREEMPT, Plan
from gpuplan.models.review import SolveFigures, Tally
from gpuplan.models.workload import Workload
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.metrics import gpu_equivalents
from gpuplan.planner.pipeline.timeline import predicted_waits
from gpuplan.solvers.formulation.objective import queue_penalty

#: A replica: workload id and replica number.
Key = tuple[str, int]
#: The group a workload's figures add to (its team, its tier, or one total).
Grouping = Callable[[Workload], str]

HOUR_S = 3600.0


class Measure:
    """The scale plans of one input are compared on: each replica's queue penalty and tier weight under
    ``inp``'s policy at ``now`` (the penalties the objective charges a waiting replica)."""

    def __init__(self, inp: PlanningInput, catalog: HardwareCatalog, now: datetime) -> None:
        problem = compile_problem(inp, catalog, now)
        self.inp, self.catalog, self.now = inp, catalog, now
        self.penalty: dict[Key, int] = {r.key: queue_penalty(r, problem) for r in problem.requests}
        self.weight = {t.name: t.weight for t in inp.policy.tiers}

    def queue_term(self, plan: Plan) -> float:
        """The queue term of ``plan`` on this scale: the penalties of the replicas it leaves waiting."""
        return float(sum(self.penalty[(u.workload, u.replica)] for u in plan.unplaced))

    def tallies(self, plan: Plan, group: Grouping) -> dict[str, Tally]:
        """What ``plan`` gives each group of workloads (by ``group``), sorted by group."""
        workloads = self.inp.workload_by_id
        nodes = self.inp.cluster.node_by_name
        sums: dict[str, Counter[str]] = defaultdict(Counter)
        gpus: dict[str, float] = defaultdict(float)
        for a in plan.assignments:
            key = group(workloads[a.workload])
            sums[key]["placed"] += 1
            node = nodes[a.node]
            gpus[key] += sum(
                gpu_equivalents(g, node.gpu_by_index[g.index].model, self.catalog) for g in a.gpus
            )
        hours: dict[str, float] = defaultdict(float)
        weighted: dict[str, float] = defaultdict(float)
        waits = predicted_waits(plan, self.now)
        for u in plan.unplaced:
            w = workloads[u.workload]
            key = group(w)
            sums[key]["waiting"] += 1
            sums[key]["queue_term"] += self.penalty[(u.workload, u.replica)]
            wait = waits[(u.workload, u.replica)]
            if wait is None:
                sums[key]["waiting_without_start"] += 1
            else:
                hours[key] += wait / HOUR_S
                weighted[key] += self.weight[w.tier] * wait / HOUR_S
        for action in plan.actions:
            if action.kind == PREEMPT and action.workload in workloads:
                sums[group(workloads[action.workload])]["preemptions"] += 1
        return {
            key: Tally(
                placed=sums[key]["placed"],
                waiting=sums[key]["waiting"],
                queue_term=float(sums[key]["queue_term"]),
                queue_hours=round(hours[key], 4),
                weighted_queue_hours=round(weighted[key], 4),
                waiting_without_start=sums[key]["waiting_without_start"],
                preemptions=sums[key]["preemptions"],
                gpus_allocated=round(gpus[key], 4),
            )
            for key in sorted(set(sums) | set(gpus))
        }

    def total(self, plan: Plan) -> Tally:
        """What ``plan`` gives all replicas."""
        return self.tallies(plan, lambda _: "total").get("total", Tally())

    def allocated_by_model(self, plan: Plan) -> dict[str, float]:
        """GPU-equivalents ``plan`` allocates per GPU model."""
        nodes = self.inp.cluster.node_by_name
        out: dict[str, float] = defaultdict(float)
        for a in plan.assignments:
            node = nodes[a.node]
            for g in a.gpus:
                model = node.gpu_by_index[g.index].model
                out[model] += gpu_equivalents(g, model, self.catalog)
        return dict(out)


def solve_figures(plan: Plan, time_limit_s: float) -> SolveFigures:
    """``plan``'s status and solver report, with its gap in objective units."""
    s = plan.solver
    units = None if s.objective is None or s.best_bound is None else max(0.0, s.objective - s.best_bound)
    return SolveFigures(
        status=plan.status.value,
        objective=s.objective,
        best_bound=s.best_bound,
        gap=s.gap,
        gap_units=units,
        time_limit_s=round(time_limit_s, 3),
        cut_short=tuple(str(p) for p in plan.provenance.get("cut_short", ())),
    )


def within_gaps(difference: float, one: SolveFigures, other: SolveFigures) -> bool:
    """Whether an objective ``difference`` between two plans is no larger than their two gaps (in
    objective units) added: then neither plan is proved better (no bound: never proved)."""
    if one.gap_units is None or other.gap_units is None:
        return True
    return abs(difference) <= one.gap_units + other.gap_units

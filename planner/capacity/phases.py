"""The time budget of a capacity-gap run: its phases and their weights, the placement solve each makes
within its share (and the fleet plan that starts a run), and the labels of phases the time limit cut
short. One place for the run's clock, so every phase keeps within the deadline alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from gpuplan.models.catalog import default_catalog
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan, PlanStatus
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.capacity.repartition import repartitions_to_try
from gpuplan.planner.pipeline.deadline import Deadline, Phases
from gpuplan.planner.planning import make_plan
from gpuplan.solvers.base import EXACT_SOLVERS

#: The phases of one capacity-gap run.
FLEET, REPARTITION, BOUND, PURCHASE, CHECK, REPAIR = (
    "fleet plan", "re-partition re-plan", "lower bound", "purchase MILP", "placement check", "repair",
)  # fmt: skip
#: Their weights (see :class:`Phases`): placement solves weigh more than MILPs (the lower bound's and
#: the purchase's); the repair rounds (a MILP and a check each, only when the check leaves replicas
#: waiting) share the last part.
PHASE_WEIGHTS: dict[str, float] = {
    FLEET: 4.0, REPARTITION: 3.0, BOUND: 1.0, PURCHASE: 1.0, CHECK: 2.0, REPAIR: 1.5,
}  # fmt: skip
#: With less time than this an optional phase (the re-partition re-plan, a repair round) is skipped and
#: a required one (a placement solve, a MILP) gets this much: the deadline has as good as passed.
MIN_PHASE_S = 0.1


def stopped_early(plan: Plan) -> bool:
    """Whether an exact solver stopped at its time limit (a plan it did not prove optimal)."""
    return plan.status in (PlanStatus.FEASIBLE, PlanStatus.FALLBACK) and plan.solver.name in EXACT_SOLVERS


def run_phases(inp: PlanningInput, deadline: Deadline, *, fleet: bool) -> Phases:
    """The phases of a run on ``inp`` (the re-partition re-plan only when the policy forbids
    re-partitions and the fleet has MIG GPUs)."""
    weights = dict(PHASE_WEIGHTS)
    if not fleet:
        del weights[FLEET]
    if not repartitions_to_try(inp):
        del weights[REPARTITION]
    return Phases(deadline, weights)


def placement(
    inp: PlanningInput, opts: GapOptions, catalog: HardwareCatalog, now: datetime | None, seconds: float
) -> Plan:
    """A placement solve of a phase within ``seconds`` (at least :data:`MIN_PHASE_S`)."""
    return make_plan(
        inp, solver=opts.solver, catalog=catalog, now=now, time_limit_s=max(MIN_PHASE_S, seconds),
        seed=opts.seed, num_workers=opts.num_workers, ray=opts.ray,
    )  # fmt: skip


def plan_fleet(
    inp: PlanningInput, opts: GapOptions, deadline: Deadline, catalog: HardwareCatalog | None = None
) -> Plan:
    """The fleet plan that starts a capacity-gap run with ``deadline``, within that phase's share (a
    caller that needs the plan itself passes it on as the ``baseline`` of
    :func:`~gpuplan.planner.capacity.gap.capacity_gap`)."""
    seconds = run_phases(inp, deadline, fleet=True).share(FLEET)
    return placement(inp, opts, catalog or default_catalog(), opts.now, seconds)


@dataclass
class Labels:
    """Notes of a run and the phases the time limit cut short."""

    notes: list[str] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)

    def cut_short(self, phase: str, note: str) -> None:
        """Record that ``phase`` stopped at (or was skipped for) the time limit, and what that means."""
        if phase not in self.cut:
            self.cut.append(phase)
        self.notes.append(f"time limit: {note}")

    def plan(self, phase: str, plan: Plan, consequence: str) -> None:
        """Label a placement solve that stopped at its time limit."""
        if stopped_early(plan):
            limit = plan.provenance.get("time_limit_s")
            share = f"its {limit:.1f} s share" if isinstance(limit, float | int) else "its share"
            self.cut_short(phase, f"the {phase} stopped at {share} ({plan.status}); {consequence}")

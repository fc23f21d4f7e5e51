"""The throughput-vs-fairness frontier (``gpuplan frontier``): the least queue term at each fairness
floor, by the epsilon-constraint method.

Each point is a plan of the input with the policy's fairness floor (``fair_floor``) set to a level:
every team holds at least that share of its max-min fair entitlement of the fleet
(:mod:`gpuplan.models.rules.fairness`). Every plan is made by
:func:`~gpuplan.planner.planning.make_plan` (so validated) with one :class:`~gpuplan.planner.policy.cost.Run`.
Without levels given, the sweep starts at the efficient plan (no floor), whose own fairness is the
lowest level worth asking for; it asks for every team's whole entitlement, then halves the interval
below it ``probes`` times to find the highest level a plan reaches, and fills the interval with
evenly spaced levels. A plan found at one floor meets every lower one, so each point reports the best
plan found that meets its floor: the frontier is monotone by construction, and each point keeps the
bound of the solve at its own floor (valid for its question).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan, PlanStatus
from gpuplan.models.policy import ObjectiveMode
from gpuplan.models.review import Frontier, FrontierPoint, SolveFigures, TeamShare
from gpuplan.models.rules.fairness import (
    fairness_level,
    floors_at,
    input_entitlements,
    input_served,
    jain_index,
    shortfall_steps,
)
from gpuplan.models.rules.quota import quota_unit
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.policy.cost import Prices, Run
from gpuplan.planner.policy.measure import Measure, solve_figures
from gpuplan.solvers.formulation.objective import floor_weight

log = logging.getLogger(__name__)

#: Points of a frontier without levels given, and bisection steps towards the highest level reached.
DEFAULT_POINTS = 6
DEFAULT_PROBES = 3
#: Levels are asked for to this many decimals (a floor is a policy's decimal).
LEVEL_DIGITS = 3


def solves_needed(points: int, probes: int, levels: Sequence[float] | None, *, current_floor: bool) -> int:
    """How many plans a frontier makes, to split its time among them: the efficient plan, the policy's
    own floor when it has one, and either the levels given or the whole-entitlement probe, the
    bisection probes and the levels filled in between."""
    asked = len(levels) if levels is not None else 1 + probes + max(0, points - 2)
    return 1 + int(current_floor) + asked


@dataclass(frozen=True)
class Solved:
    """One plan at one floor (``None``: none) and what it gives each team."""

    level: float | None
    plan: Plan
    fairness: float | None
    reached: bool
    served: dict[str, int]
    #: The plan's objective without what it lacks of its own floor (its objective under any floor it
    #: meets, and without a floor).
    objective: float


class Sweep:
    """The plans of one frontier: each made once per level, measured on the input's entitlements."""

    def __init__(self, inp: PlanningInput, run: Run, progress: Callable[[str], None] | None) -> None:
        self.inp, self.run, self.progress = inp, run, progress
        self.unit = quota_unit(run.catalog)
        self.entitled = input_entitlements(inp, run.catalog, self.unit)
        plain = inp.model_copy(update={"policy": inp.policy.model_copy(update={"fair_floor": None})})
        self.plain = plain
        self.weight = floor_weight(compile_problem(plain, run.catalog, run.now))
        #: What the queue term counts for in the objective (its weight in weighted mode).
        self.scale = plain.policy.weights.queue if plain.policy.objective is ObjectiveMode.WEIGHTED else 1
        self.solved: dict[float | None, Solved] = {}

    def at(self, level: float | None) -> Solved:
        """The plan at floor ``level`` (made on first use)."""
        if level in self.solved:
            return self.solved[level]
        policy = self.plain.policy.model_copy(update={"fair_floor": level})
        inp = self.plain.model_copy(update={"policy": policy})
        if self.progress is not None:
            self.progress(
                f"plan {len(self.solved) + 1}: " + ("no floor" if level is None else f"floor {level:g}")
            )
        plan = self.run.plan(inp)
        served = input_served(inp, self.run.catalog, plan.assignments, self.unit)
        floors = self.floors(level)
        reached = all(served.get(t, 0) >= f for t, f in floors.items())
        lack = sum(shortfall_steps(f, served.get(t, 0), self.unit) for t, f in floors.items())
        objective = (plan.solver.objective or 0.0) - self.scale * self.weight * lack
        out = Solved(level, plan, fairness_level(served, self.entitled), reached, served, objective)
        log.info("floor %s: %s, fairness %s", level, "reached" if reached else "not reached", out.fairness)
        self.solved[level] = out
        return out

    def floors(self, level: float | None) -> dict[str, int]:
        """The units each team must hold at floor ``level``, on the entitlements computed once."""
        return floors_at(level, self.entitled)

    def unreachable(self, s: Solved) -> bool:
        """Whether the solve at ``s``'s floor proved that no plan reaches it: its bound is at least what
        one GPU-equivalent short of the floor costs."""
        bound = s.plan.solver.best_bound
        return not s.reached and bound is not None and bound >= self.scale * self.weight

    def levels(self, efficient: Solved, points: int, probes: int) -> list[float]:
        """Levels from the efficient plan's fairness up to the highest a plan reaches (whole entitlement
        first, then bisection), ``points`` in all with the efficient plan."""
        low = efficient.fairness
        if low is None or low >= 1:
            return []
        low = round(low, LEVEL_DIGITS)
        if self.at(1.0).reached:
            high = 1.0
        else:
            high, top = low, 1.0
            for _ in range(probes):
                middle = round((high + top) / 2, LEVEL_DIGITS)
                if middle in (high, top):
                    break
                if self.at(middle).reached:
                    high = middle
                else:
                    top = middle
        if high <= low:
            return []
        inner = max(0, points - 2)
        step = (high - low) / (inner + 1)
        fill = [round(low + step * k, LEVEL_DIGITS) for k in range(1, inner + 1)]
        return sorted({*fill, high})


def _figures(s: Solved, bound: float | None, seconds: float) -> SolveFigures:
    """``s``'s plan's figures against ``bound`` (the question of the point it is reported at): OPTIMAL
    only when that bound meets the plan's objective (a plan proved at a higher floor is not proved at a
    lower one), a FEASIBLE plan whose objective the bound meets is proved there."""
    own = solve_figures(s.plan, seconds)
    units = None if bound is None else max(0.0, s.objective - bound)
    gap = None if units is None else units / max(1.0, s.objective)
    status = own.status
    if status in (PlanStatus.OPTIMAL.value, PlanStatus.FEASIBLE.value):
        status = PlanStatus.OPTIMAL.value if units == 0 else PlanStatus.FEASIBLE.value
    return own.model_copy(
        update={
            "status": status,
            "objective": s.objective,
            "best_bound": bound,
            "gap_units": units,
            "gap": gap,
        }
    )


def _best_meeting(sweep: Sweep, level: float | None) -> Solved | None:
    """The plan that waits least (lowest objective) among those found that meet floor ``level`` (no
    floor: the efficient plan)."""
    if level is None:
        return sweep.solved[None]
    meeting = [s for s in sweep.solved.values() if _meets(sweep, s, level)]
    return min(meeting, key=lambda s: (s.objective, -(s.fairness or 0.0)), default=None)


def _meets(sweep: Sweep, s: Solved, level: float) -> bool:
    """Whether ``s``'s plan holds every team's floor at ``level`` (in the rule's whole units)."""
    return all(s.served.get(t, 0) >= f for t, f in sweep.floors(level).items())


def frontier(
    inp: PlanningInput,
    run: Run,
    prices: Prices | None,
    *,
    points: int = DEFAULT_POINTS,
    probes: int = DEFAULT_PROBES,
    levels: Sequence[float] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Frontier:
    """The frontier of ``inp``: the efficient plan, then one point per level (``levels``, or found as
    the module says), each with its plan's figures, its teams and its price against the efficient plan;
    the policy's own floor (when it has one) marked as the current point."""
    sweep = Sweep(inp, run, progress)
    efficient = sweep.at(None)
    current = inp.policy.fair_floor
    asked = list(levels) if levels is not None else sweep.levels(efficient, points, probes)
    wanted = sorted({round(x, LEVEL_DIGITS) for x in asked} | ({current} if current is not None else set()))
    for floor in wanted:
        if efficient.fairness is None or floor > efficient.fairness:
            sweep.at(floor)
    # The probes the sweep made on its way are points too (those no plan reached, said so), and so is
    # the highest fairness a plan reached, when above every floor asked and reached (a plan asked for
    # more may reach less than it was asked, and more than the highest floor reached).
    top = max((x.fairness for x in sweep.solved.values() if x.fairness is not None), default=None)
    asked_top = max((x for x, v in sweep.solved.items() if x is not None and v.reached), default=0.0)
    beyond = set()
    if top is not None and top > asked_top and (efficient.fairness is None or top > efficient.fairness):
        beyond.add(math.floor(top * 10**LEVEL_DIGITS) / 10**LEVEL_DIGITS)
    # Asked: the levels given or chosen, and every floor a plan was made with (the probes).
    asked_levels = {*wanted, *sweep.solved}
    wanted = sorted({*wanted, *beyond, *(x for x in sweep.solved if x is not None)})
    measure = Measure(sweep.plain, run.catalog, run.now)
    base_tally = measure.total(efficient.plan)
    base_objective = efficient.objective
    base_alloc = measure.allocated_by_model(efficient.plan)
    out: list[FrontierPoint] = []
    previous: FrontierPoint | None = None
    steps: list[float | None] = [None, *wanted]
    bound: float | None = None
    for level in steps:
        own = sweep.solved.get(level, efficient)
        best = _best_meeting(sweep, level)
        shown = best if best is not None else own
        # A higher floor only narrows the question: a bound proved at a lower floor holds here too.
        found = own.plan.solver.best_bound
        bound = found if bound is None else (bound if found is None else max(bound, found))
        # A floor no plan reached shows the plan its solve found, as it was solved (its lack included).
        each = run.seconds_each
        figures = _figures(shown, bound, each) if best is not None else solve_figures(own.plan, each)
        tally = measure.total(shown.plan)
        alloc = measure.allocated_by_model(shown.plan)
        change = {m: alloc.get(m, 0.0) - base_alloc.get(m, 0.0) for m in {*alloc, *base_alloc}}
        money, note = (
            (None, "no node-type catalog") if prices is None else prices.per_hour(change, run.catalog)
        )
        objective = shown.objective
        point = FrontierPoint(
            level=0.0 if level is None else level,
            reached=best is not None,
            fairness=shown.fairness,
            jain=jain_index(shown.served, sweep.entitled),
            plan_level=shown.level,
            solve=figures,
            tally=tally,
            teams=tuple(
                TeamShare(
                    team=t,
                    entitlement=round(float(e / sweep.unit), 4),
                    allocated=round(shown.served.get(t, 0) / sweep.unit, 4),
                    ratio=None if e == 0 else round(float(shown.served.get(t, 0) / e), 4),
                )
                for t, e in sorted(sweep.entitled.items())
            ),
            price_queue_term=round(objective - base_objective, 4),
            price_queue_share=None
            if base_objective <= 0
            else round((objective - base_objective) / base_objective, 6),
            price_gpus_allocated=round(tally.gpus_allocated - base_tally.gpus_allocated, 4),
            price_queue_hours=round(tally.queue_hours - base_tally.queue_hours, 4),
            price_weighted_queue_hours=round(tally.weighted_queue_hours - base_tally.weighted_queue_hours, 4),
            money_per_hour=money,
            money_note=note,
            proved=_proved(previous, figures, objective) if best is not None else None,
            unreachable_proved=best is None and sweep.unreachable(own),
            current=level == current,
            asked=level is None or level in asked_levels,
        )
        out.append(point)
        if best is not None:
            previous = point
    return Frontier(
        points=tuple(out),
        currency="" if prices is None else prices.currency,
        example_prices=prices is not None and prices.example,
        seconds_each=round(run.seconds_each, 3),
    )


def _proved(previous: FrontierPoint | None, figures: SolveFigures, objective: float) -> bool | None:
    """Whether the step from ``previous`` to a point of ``objective`` is larger than both points' gaps
    (``None`` for the first point, or without bounds)."""
    if previous is None or previous.solve.objective is None:
        return None
    if previous.solve.gap_units is None or figures.gap_units is None:
        return False
    step = objective - previous.solve.objective
    return abs(step) > previous.solve.gap_units + figures.gap_units

"""The price of each rule of a policy: the plan with the rule relaxed (``relax``) against the plan with
the policy as given, both made by :func:`~gpuplan.planner.planning.make_plan` (so both validated) with
the same solver, time limit, seed and planning time.

The cost is how much lower the objective is with the rule relaxed. For a tier weight, whose relaxation
changes the objective itself, the given plan is measured with the lowered weight too (the price of a
priority is what the queue would gain without it). A difference no larger than the two plans' gaps
added (in objective units) is not significant: neither plan is proved better.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from gpuplan.models.capacity import NodeTypeCatalog
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.models.policy import ObjectiveMode
from gpuplan.models.review import PlanFigures, RuleCost
from gpuplan.planner.io.exporters.workbook import gpu_hour_rates
from gpuplan.planner.planning import make_plan
from gpuplan.planner.policy.measure import Measure, solve_figures, within_gaps
from gpuplan.planner.policy.relax import Relaxation

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Run:
    """How every plan of one review is made: the same for each, so that only the rule differs."""

    solver: str
    seed: int
    num_workers: int
    deterministic: bool
    now: datetime
    catalog: HardwareCatalog
    seconds_each: float
    ray: str | None = None

    def plan(self, inp: PlanningInput) -> Plan:
        """A validated plan of ``inp`` within :attr:`seconds_each`."""
        return make_plan(
            inp,
            solver=self.solver,
            catalog=self.catalog,
            now=self.now,
            time_limit_s=self.seconds_each,
            seed=self.seed,
            num_workers=self.num_workers,
            deterministic=self.deterministic,
            ray=self.ray,
        )


@dataclass(frozen=True)
class Prices:
    """Amortised price of one GPU-hour per GPU model, from a node-type catalog."""

    rates: dict[str, float]
    currency: str
    example: bool

    @classmethod
    def of(cls, types: NodeTypeCatalog, catalog: HardwareCatalog) -> Prices:
        """The cheapest node type's price per GPU-hour for each GPU model the catalog offers."""
        return cls(gpu_hour_rates(types, catalog), types.currency, types.example_prices)

    def per_hour(self, change: dict[str, float], catalog: HardwareCatalog) -> tuple[float | None, str]:
        """What a change of GPU-equivalents allocated per GPU model is worth per hour, or ``None`` and
        why when a GPU model it changes has no price."""
        changed = {m: v for m, v in change.items() if abs(v) > 1e-9}
        unpriced = sorted(m for m in changed if catalog.canonical(m) not in self.rates)
        if unpriced:
            return None, f"no node type offers {', '.join(unpriced)}: no price per GPU-hour"
        money = sum(v * self.rates[catalog.canonical(m)] for m, v in changed.items())
        return round(money, 2), "EXAMPLE prices" if self.example else ""


def _objective_under(plan: Plan, given: Measure, relaxed: Measure, inp: PlanningInput) -> float:
    """``plan``'s objective (made under ``given``'s weights) measured with ``relaxed``'s tier weights:
    only its queue term changes (times the queue weight in weighted mode)."""
    objective = plan.solver.objective or 0.0
    scale = inp.policy.weights.queue if inp.policy.objective is ObjectiveMode.WEIGHTED else 1
    return objective + scale * (relaxed.queue_term(plan) - given.queue_term(plan))


def rule_cost(
    rule: Relaxation,
    inp: PlanningInput,
    given: tuple[Plan, Measure],
    run: Run,
    prices: Prices | None,
) -> RuleCost:
    """The price of ``rule``: a plan of ``inp`` with it relaxed against ``given`` (the plan of ``inp``
    as it is, and its measure)."""
    base, measure = given
    relaxed_inp = inp.model_copy(update={"policy": rule.policy})
    plan = run.plan(relaxed_inp)
    if [t.weight for t in rule.policy.tiers] != [t.weight for t in inp.policy.tiers]:
        relaxed_measure = Measure(relaxed_inp, run.catalog, run.now)
        before = _objective_under(base, measure, relaxed_measure, inp)
    else:
        before = base.solver.objective or 0.0
    cost = before - (plan.solver.objective or 0.0)
    one, other = solve_figures(base, run.seconds_each), solve_figures(plan, run.seconds_each)
    noise = None if one.gap_units is None or other.gap_units is None else one.gap_units + other.gap_units
    t0, t1 = measure.total(base), measure.total(plan)
    alloc0, alloc1 = measure.allocated_by_model(base), measure.allocated_by_model(plan)
    change = {m: alloc1.get(m, 0.0) - alloc0.get(m, 0.0) for m in {*alloc0, *alloc1}}
    money, note = (None, "no node-type catalog") if prices is None else prices.per_hour(change, run.catalog)
    return RuleCost(
        rule=rule.rule,
        relaxed=rule.words,
        cost=round(cost, 4),
        significant=not within_gaps(cost, one, other),
        noise=None if noise is None else round(noise, 4),
        gpus_allocated_change=round(t1.gpus_allocated - t0.gpus_allocated, 4),
        replicas_placed_change=t1.placed - t0.placed,
        queue_term_change=t1.queue_term - t0.queue_term,
        queue_hours_change=round(t1.queue_hours - t0.queue_hours, 4),
        weighted_queue_hours_change=round(t1.weighted_queue_hours - t0.weighted_queue_hours, 4),
        waiting_without_start_change=t1.waiting_without_start - t0.waiting_without_start,
        money_per_hour=money,
        currency="" if prices is None else prices.currency,
        example_prices=prices is not None and prices.example,
        money_note=note,
        given=PlanFigures(solve=one, tally=t0),
        with_rule_relaxed=PlanFigures(solve=other, tally=t1),
    )


def policy_cost(
    inp: PlanningInput,
    rules: list[Relaxation],
    run: Run,
    prices: Prices | None,
    progress: Callable[[str], None] | None = None,
) -> list[RuleCost]:
    """The price of each of ``rules`` on ``inp``, most costly first (then by rule): the plan of ``inp``
    as given first, then one plan per rule, each within ``run.seconds_each``."""
    base = run.plan(inp)
    measure = Measure(inp, run.catalog, run.now)
    out = []
    for i, rule in enumerate(rules, start=1):
        if progress is not None:
            progress(f"rule {i} of {len(rules)}: {rule.words}")
        log.info("pricing %s: %s", rule.rule, rule.words)
        out.append(rule_cost(rule, inp, (base, measure), run, prices))
    return sorted(out, key=lambda c: (-c.cost, c.rule))

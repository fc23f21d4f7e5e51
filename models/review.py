"""Policy review: the price of each rule (``gpuplan policy-cost``) and a policy change replayed on the
plan history (``gpuplan replay``), as written to JSON."""

from __future__ import annotations

from pydantic import Field

from gpuplan.models.base import Strict


class Tally(Strict):
    """What a plan gives a group of replicas (a team, a tier, or all of them).

    ``queue_term`` is the planner's tier-weighted queue time of the group's waiting replicas (the
    objective's queue term); ``queue_hours`` the hours from the plan's time to the predicted start of
    each waiting replica that has one, summed, and ``weighted_queue_hours`` the same times each
    replica's tier weight; ``waiting_without_start`` counts the waiting replicas with no predicted start
    (their wait has no known end, so it is in no queue-hours figure).
    """

    placed: int = Field(default=0, ge=0)
    waiting: int = Field(default=0, ge=0)
    queue_term: float = Field(default=0.0, ge=0)
    queue_hours: float = Field(default=0.0, ge=0)
    weighted_queue_hours: float = Field(default=0.0, ge=0)
    waiting_without_start: int = Field(default=0, ge=0)
    preemptions: int = Field(default=0, ge=0)
    gpus_allocated: float = Field(default=0.0, ge=0)


class SolveFigures(Strict):
    """A plan's status and what its solver proved: ``gap_units`` is ``objective - best_bound`` in
    objective units (``None`` without a bound); ``cut_short`` the passes of the plan its time limit cut
    short (its provenance's: with ``predicted starts``, fewer waiting replicas have a predicted start)."""

    status: str
    objective: float | None = None
    best_bound: float | None = None
    gap: float | None = None
    gap_units: float | None = None
    time_limit_s: float = Field(default=0.0, ge=0)
    cut_short: tuple[str, ...] = ()


class PlanFigures(Strict):
    """One plan of a comparison: its solve and what it gives all replicas."""

    solve: SolveFigures
    tally: Tally


class RuleCost(Strict):
    """The price of one rule: the plan with the rule relaxed against the plan with the policy as given.

    ``cost`` is how much lower the objective is with the rule relaxed (objective units; for a tier
    weight, both plans measured with the lowered weight); it is ``significant`` only when larger than
    ``noise``, the two plans' gaps in objective units added. The ``*_change`` fields are relaxed minus
    given. ``money_per_hour`` is the GPU-equivalents allocated more (or freed, negative) per GPU model
    at the node-type catalog's amortised price per GPU-hour (``None`` when a model has no price:
    ``money_note`` says why).
    """

    rule: str
    relaxed: str
    cost: float
    significant: bool
    noise: float | None = None
    gpus_allocated_change: float = 0.0
    replicas_placed_change: int = 0
    queue_term_change: float = 0.0
    queue_hours_change: float = 0.0
    weighted_queue_hours_change: float = 0.0
    waiting_without_start_change: int = 0
    money_per_hour: float | None = None
    currency: str = ""
    example_prices: bool = False
    money_note: str = ""
    given: PlanFigures
    with_rule_relaxed: PlanFigures


class ReplayLine(Strict):
    """One team's, tier's or the total's figures: as stored and as replayed under the proposed policy."""

    key: str
    stored: Tally
    replayed: Tally


class ReplayedPlan(Strict):
    """One stored plan re-planned under the proposed policy, with the stored plan's solver, seed, time
    and rounds. ``within_gaps``: the objectives differ by no more than the two gaps (in objective units)
    added, so the difference is not significant."""

    plan: int = Field(ge=1)
    created_at: str
    solver: str
    seed: int
    stored: SolveFigures
    replayed: SolveFigures
    within_gaps: bool
    by_tier: tuple[ReplayLine, ...] = ()
    by_team: tuple[ReplayLine, ...] = ()
    total: ReplayLine


class ReplayReport(Strict):
    """A proposed policy replayed on the last stored plans: each plan, and the figures per tier, per
    team and in total summed over them. Queue terms and weighted queue hours use the tier weights of
    each stored plan's own policy, for the stored and the replayed plan alike."""

    policy: str
    seconds_each: float = Field(ge=0)
    plans: tuple[ReplayedPlan, ...] = ()
    by_tier: tuple[ReplayLine, ...] = ()
    by_team: tuple[ReplayLine, ...] = ()
    total: ReplayLine


class TeamShare(Strict):
    """One team at a point of the frontier: its max-min fair entitlement and what the plan allocates
    (GPU-equivalents), and their ratio."""

    team: str
    entitlement: float = Field(ge=0)
    allocated: float = Field(ge=0)
    ratio: float | None = None


class FrontierPoint(Strict):
    """One point of the throughput-vs-fairness frontier: the best plan found whose every team holds at
    least ``level`` of its entitlement (0: no floor, the efficient plan). ``asked`` says a plan was made
    with this floor; a level that was not asked is the fairness a plan made at another floor reached.

    ``fairness`` is the level the plan reaches (its lowest allocation-to-entitlement ratio), ``jain``
    Jain's index of those ratios. ``solve`` is the solve at this floor (its bound holds for the question
    "the least queue term with every team at ``level`` or more"); ``plan_level`` the floor of the solve
    whose plan is reported (a plan found at a higher floor meets a lower one, and is reported there when
    it waits less). ``price_*`` are this point minus the efficient plan: the price of fairness.
    ``proved`` says the step from the previous point is larger than both points' gaps (a proved
    trade-off); ``current`` marks the policy as given.
    """

    level: float = Field(ge=0, le=1)
    reached: bool
    asked: bool = True
    fairness: float | None = None
    jain: float | None = None
    plan_level: float | None = None
    solve: SolveFigures
    tally: Tally
    teams: tuple[TeamShare, ...] = ()
    price_queue_term: float = 0.0
    price_queue_share: float | None = None
    price_gpus_allocated: float = 0.0
    price_queue_hours: float = 0.0
    price_weighted_queue_hours: float = 0.0
    money_per_hour: float | None = None
    money_note: str = ""
    proved: bool | None = None
    unreachable_proved: bool = False
    current: bool = False


class Frontier(Strict):
    """The throughput-vs-fairness frontier of one input (``gpuplan frontier``): points by floor, the
    efficient plan first, and the point of the policy as given."""

    measure: str = "lowest allocation-to-entitlement ratio over teams (max-min fair entitlements)"
    points: tuple[FrontierPoint, ...]
    currency: str = ""
    example_prices: bool = False
    seconds_each: float = Field(ge=0)

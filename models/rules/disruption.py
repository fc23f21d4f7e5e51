"""Disruption: which running replicas may be preempted or moved, the higher-tier rule, and what counts
against the budget (``disruption.max_moves_per_round``, ``max_preemptions_per_round``,
``max_moves_per_team``)."""

from __future__ import annotations

from gpuplan.models.plan import MIGRATE, PREEMPT
from gpuplan.models.policy import DisruptionBudget, Tier
from gpuplan.models.rules.runtime import ran_long_enough


def stop_kind(placed: bool, stays: bool) -> str | None:
    """What a plan does to a running replica, as it counts against the budget: ``PREEMPT`` when it is not
    placed, ``MIGRATE`` (a move) when it is placed anywhere but exactly where it runs, ``None`` when it
    stays."""
    if not placed:
        return PREEMPT
    return None if stays else MIGRATE


def moves_allowed(budget: DisruptionBudget, rounds: int = 1) -> int:
    """Moves of running replicas the budget allows over ``rounds`` rounds."""
    return budget.max_moves_per_round * rounds


def preemptions_allowed(budget: DisruptionBudget, rounds: int = 1) -> int:
    """Preemptions the budget allows over ``rounds`` rounds."""
    return budget.max_preemptions_per_round * rounds


def team_moves_allowed(budget: DisruptionBudget) -> int | None:
    """Moves of one team's running replicas the budget allows in one round (``None``: no such limit)."""
    return budget.max_moves_per_team


def tier_may_be_preempted(tier: Tier, budget: DisruptionBudget) -> bool:
    """Whether work of ``tier`` may be preempted: its tier allows it, or the budget opens every tier
    (``preempt_latency_sensitive``)."""
    return tier.may_be_preempted or budget.preempt_latency_sensitive


def may_be_preempted(preemptible: bool, tier: Tier, budget: DisruptionBudget) -> bool:
    """Whether a replica may ever be preempted: it is ``preemptible`` and its tier may be preempted."""
    return preemptible and tier_may_be_preempted(tier, budget)


def outranks(newcomer_rank: int, rank: int) -> bool:
    """Whether a replica of tier rank ``newcomer_rank`` is of a strictly higher tier than one of ``rank``
    (rank 0 is the most important tier)."""
    return newcomer_rank < rank


def displaced(
    budget: DisruptionBudget, best_newcomer_rank: int | None, rank: int, *, fairly: bool = False
) -> bool:
    """Whether the higher-tier rule lets a running replica of tier rank ``rank`` be preempted when the
    best tier rank among the replicas the plan starts on its node is ``best_newcomer_rank`` (``None``:
    none starts there): always when ``preempt_only_for_higher_tier`` is off, else only for a newcomer
    that :func:`outranks` it, or when ``fairly`` (a newcomer there may displace it by fair share:
    :func:`gpuplan.models.rules.fairness.fair_displaces`)."""
    if not budget.preempt_only_for_higher_tier:
        return True
    return fairly or (best_newcomer_rank is not None and outranks(best_newcomer_rank, rank))


def may_move(budget: DisruptionBudget, ran_s: float | None, disruptible: bool = True) -> bool:
    """Whether the budget lets a running replica that has run ``ran_s`` seconds (``None``: unknown) move
    at all: it may be disrupted (``Workload.disruptible``: no PodDisruptionBudget forbids it), the budget
    allows moves and the replica ran its minimum runtime."""
    return disruptible and moves_allowed(budget) > 0 and ran_long_enough(ran_s, budget.min_runtime_s)


def may_preempt(
    budget: DisruptionBudget, preemptible: bool, tier: Tier, ran_s: float | None, disruptible: bool = True
) -> bool:
    """Whether the policy lets a running replica be preempted at all: it may be disrupted, it
    :func:`may_be_preempted`, the budget allows preemptions and it ran its minimum runtime."""
    return (
        disruptible
        and may_be_preempted(preemptible, tier, budget)
        and preemptions_allowed(budget) > 0
        and ran_long_enough(ran_s, budget.min_runtime_s)
    )

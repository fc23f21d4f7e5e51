"""What one team may see of a plan: its own workloads, and the fleet as a whole.

A plan labelled with one team can hold other teams' workloads. A team's view keeps its own workloads'
assignments, waits, actions and explanations, the MIG actions (no workload named), and the fleet-level
parts: status, solver report, MIG layouts, metrics (fleet totals) and provenance. A counterfactual that
names another team's workload (migrate, preempt or wait for it) is left out, since its summary names
that workload. Every read of a plan for a team goes through :func:`team_plan` (or, for explanations
computed on demand, :func:`team_explanations`); a capacity gap through :func:`team_gap` (its team line
and its own unservable workloads; the purchase, which serves the fleet, stays whole).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from gpuplan.models.capacity import CapacityGap
    from gpuplan.models.plan import Counterfactual, Explanation, Plan


def _open(counterfactual: Counterfactual, mine: AbstractSet[str]) -> bool:
    """Whether a counterfactual names no workload outside ``mine``."""
    return all(c.workload is None or c.workload in mine for c in counterfactual.changes)


def _without_others(
    counterfactuals: tuple[Counterfactual, ...], mine: AbstractSet[str]
) -> tuple[Counterfactual, ...]:
    return tuple(c for c in counterfactuals if _open(c, mine))


def team_explanations(explanations: Iterable[Explanation], mine: AbstractSet[str]) -> list[Explanation]:
    """The explanations of workloads in ``mine``, without counterfactuals naming any other workload."""
    return [
        e.model_copy(update={"counterfactuals": _without_others(e.counterfactuals, mine)})
        for e in explanations
        if e.workload in mine
    ]


def team_plan(plan: Plan, mine: AbstractSet[str]) -> Plan:
    """``plan`` as seen by the team whose workloads are ``mine`` (see the module's docstring)."""
    return plan.model_copy(
        update={
            "assignments": tuple(a for a in plan.assignments if a.workload in mine),
            "unplaced": tuple(
                u.model_copy(update={"counterfactuals": _without_others(u.counterfactuals, mine)})
                for u in plan.unplaced
                if u.workload in mine
            ),
            "actions": tuple(a for a in plan.actions if a.workload is None or a.workload in mine),
            "explanations": tuple(team_explanations(plan.explanations, mine)),
            "stays_broken": (),  # their messages name other teams' work and usage
        }
    )


def team_gap(gap: CapacityGap, team: str, mine: AbstractSet[str]) -> CapacityGap:
    """``gap`` as seen by ``team`` (whose workloads are ``mine``)."""
    return gap.model_copy(
        update={
            "by_team": tuple(line for line in gap.by_team if line.key == team),
            "unservable": tuple(u for u in gap.unservable if u.workload in mine),
        }
    )

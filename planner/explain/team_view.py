"""What one team may see of a plan: its own workloads, and the fleet as a whole.

A plan labelled with one team can hold other teams' workloads. A team's view keeps its own workloads'
assignments, waits, actions and explanations, the MIG actions (no workload named), and the fleet-level
parts: status, solver report, MIG layouts, metrics (fleet totals) and provenance. A counterfactual that
names another team's workload (migrate, preempt or wait for it) is left out, since its summary names
that workload. The sentences a team keeps (reasons, their details and resources, action details,
counterfactual summaries, a capacity gap's notes) speak of other teams' work without naming it: each
run of other teams' replicas named there becomes a count ("2 replicas of other teams"). The other
teams' workload ids are the plan's own (every workload it assigns, leaves waiting, moves or explains)
and, where the caller knows them, the input's.

Every read of a plan for a team goes through :func:`team_plan` (or, for explanations computed on demand,
:func:`team_explanations`); a capacity gap through :func:`team_gap` (its team line and its own
unservable workloads; the purchase, which serves the fleet, stays whole).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from gpuplan.models.capacity import CapacityGap, Served
    from gpuplan.models.plan import Counterfactual, Explanation, Plan, ReasonDetail, Unplaced

#: Characters that continue a name: an id found inside a longer word is not that id.
_WORD = r"[\w.\-]"


def _open(counterfactual: Counterfactual, mine: AbstractSet[str]) -> bool:
    """Whether a counterfactual names no workload outside ``mine``."""
    return all(c.workload is None or c.workload in mine for c in counterfactual.changes)


def _count(replicas: int) -> str:
    return "1 replica of another team" if replicas == 1 else f"{replicas} replicas of other teams"


class Unnamed:
    """Rewrites sentences so that they name none of ``others`` (workload ids): each run of their replica
    names (``w`` or ``w#r``, listed with ``", "`` and ``" and "``) becomes a count of replicas."""

    def __init__(self, others: AbstractSet[str]) -> None:
        self.pattern: re.Pattern[str] | None = None
        if others:
            ids = "|".join(re.escape(w) for w in sorted(others, key=lambda w: (-len(w), w)))
            name = rf"(?<!{_WORD})(?:{ids})(?:#\d+)?(?!{_WORD})"
            self.pattern = re.compile(rf"{name}(?:(?:, | and ){name})*")
            self.name = re.compile(name)

    def __call__(self, text: str) -> str:
        """``text`` with the runs of other teams' replica names replaced by their count."""
        if self.pattern is None:
            return text
        return self.pattern.sub(lambda m: _count(len(self.name.findall(m.group(0)))), text)

    def resources(self, names: Iterable[str]) -> tuple[str, ...]:
        """Named resources with other teams' replicas folded into one count, after the others."""
        kept: list[str] = []
        hidden = 0
        for name in names:
            if self.pattern is not None and self.name.fullmatch(name):
                hidden += 1
            else:
                kept.append(self(name))
        return tuple(dict.fromkeys([*kept, *([_count(hidden)] if hidden else [])]))

    def details(self, details: tuple[ReasonDetail, ...]) -> tuple[ReasonDetail, ...]:
        """Each alternative's reason, rewritten."""
        return tuple(d.model_copy(update={"reason": self(d.reason)}) for d in details)

    def counterfactuals(
        self, counterfactuals: tuple[Counterfactual, ...], mine: AbstractSet[str]
    ) -> tuple[Counterfactual, ...]:
        """The counterfactuals naming no other workload in their changes, their summaries rewritten."""
        return tuple(
            c.model_copy(update={"summary": self(c.summary)}) for c in counterfactuals if _open(c, mine)
        )

    def waiting(self, u: Unplaced, mine: AbstractSet[str]) -> Unplaced:
        """A waiting replica of the team, its sentences rewritten."""
        return u.model_copy(
            update={
                "reason": self(u.reason),
                "resources": self.resources(u.resources),
                "details": self.details(u.details),
                "counterfactuals": self.counterfactuals(u.counterfactuals, mine),
            }
        )

    def explanation(self, e: Explanation, mine: AbstractSet[str]) -> Explanation:
        """An explanation of the team's replica, its sentences rewritten."""
        return e.model_copy(
            update={
                "reason": self(e.reason),
                "resources": self.resources(e.resources),
                "details": self.details(e.details),
                "counterfactuals": self.counterfactuals(e.counterfactuals, mine),
            }
        )


def _plan_workloads(plan: Plan) -> set[str]:
    """Every workload id a plan holds: assigned, waiting, acted on, explained or changed by a
    counterfactual."""
    ids = {a.workload for a in plan.assignments} | {u.workload for u in plan.unplaced}
    ids |= {a.workload for a in plan.actions if a.workload is not None}
    ids |= {e.workload for e in plan.explanations}
    for cfs in [u.counterfactuals for u in plan.unplaced] + [e.counterfactuals for e in plan.explanations]:
        ids |= {c.workload for cf in cfs for c in cf.changes if c.workload is not None}
    return ids


def team_explanations(
    explanations: Iterable[Explanation], mine: AbstractSet[str], others: AbstractSet[str]
) -> list[Explanation]:
    """The explanations of workloads in ``mine``, without counterfactuals naming any other workload, their
    sentences naming none of ``others`` (the other teams' workload ids)."""
    unnamed = Unnamed(set(others) - set(mine))
    return [unnamed.explanation(e, mine) for e in explanations if e.workload in mine]


def team_plan(plan: Plan, mine: AbstractSet[str], others: AbstractSet[str] = frozenset()) -> Plan:
    """``plan`` as seen by the team whose workloads are ``mine`` (see the module's docstring); ``others``
    adds workload ids the plan may not hold (the input's)."""
    unnamed = Unnamed((_plan_workloads(plan) | set(others)) - set(mine))
    return plan.model_copy(
        update={
            "assignments": tuple(a for a in plan.assignments if a.workload in mine),
            "unplaced": tuple(unnamed.waiting(u, mine) for u in plan.unplaced if u.workload in mine),
            "actions": tuple(
                a.model_copy(update={"detail": unnamed(a.detail) if a.detail else a.detail})
                for a in plan.actions
                if a.workload is None or a.workload in mine
            ),
            "explanations": tuple(
                unnamed.explanation(e, mine) for e in plan.explanations if e.workload in mine
            ),
            "stays_broken": (),  # their messages name other teams' work and usage
        }
    )


#: The name under which a purchase or re-partition counts what it serves of other teams.
OTHER_TEAMS = "other teams"


def _served(served: Iterable[Served], mine: AbstractSet[str]) -> tuple[Served, ...]:
    """What a purchase or re-partition serves, as one team sees it: its own workloads by name, the other
    teams' work summed into one unnamed entry (so the totals still add up)."""
    own = [s for s in served if s.workload in mine]
    rest = [s for s in served if s.workload not in mine]
    if not rest:
        return tuple(own)
    tiers = {s.tier for s in rest}
    folded = rest[0].model_copy(
        update={
            "workload": OTHER_TEAMS,
            "team": OTHER_TEAMS,
            "tier": tiers.pop() if len(tiers) == 1 else "various",
            "replicas": sum(s.replicas for s in rest),
            "gpu_equivalents": round(sum(s.gpu_equivalents for s in rest), 4),
            "gpu_hours": round(sum(s.gpu_hours for s in rest), 2),
        }
    )
    return (*own, folded)


def team_gap(gap: CapacityGap, team: str, mine: AbstractSet[str], others: AbstractSet[str]) -> CapacityGap:
    """``gap`` as seen by ``team`` (whose workloads are ``mine``; ``others`` are the other teams'): other
    teams' work is counted, never named, in every sentence and list."""
    unnamed: Callable[[str], str] = Unnamed(set(others) - set(mine))
    return gap.model_copy(
        update={
            "by_team": tuple(line for line in gap.by_team if line.key == team),
            "unservable": tuple(
                u.model_copy(update={"message": unnamed(u.message)})
                for u in gap.unservable
                if u.workload in mine
            ),
            "repartition_actions": tuple(unnamed(a) for a in gap.repartition_actions),
            "notes": tuple(unnamed(n) for n in gap.notes),
            "purchases": tuple(
                p.model_copy(update={"serves": _served(p.serves, mine)}) for p in gap.purchases
            ),
            "repartitions": tuple(
                r.model_copy(
                    update={
                        "serves": _served(r.serves, mine),
                        "actions": tuple(unnamed(a) for a in r.actions),
                    }
                )
                for r in gap.repartitions
            ),
            "allow_other_models": tuple(w for w in gap.allow_other_models if w in mine),
            "class_moves": tuple(m for m in gap.class_moves if m.workload in mine),
        }
    )

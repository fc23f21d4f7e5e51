"""Rule 13: the running replicas a plan stops (moves, preemptions, drains), whom it may stop, the
disruption budget per round and for the whole plan, and the minimum runtime before a stop.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gpuplan.models.plan import DRAIN, MIGRATE, PREEMPT, Assignment, Plan
from gpuplan.models.policy import Policy
from gpuplan.models.rules.disruption import (
    displaced,
    moves_allowed,
    preemptions_allowed,
    stop_kind,
    team_moves_allowed,
    tier_may_be_preempted,
)
from gpuplan.models.rules.fairness import Standing, fair_displaces, input_standings
from gpuplan.models.rules.runtime import ran_long_enough, runtime_s
from gpuplan.models.workload import Placement, Workload, where
from gpuplan.planner.validation.context import CheckContext
from gpuplan.planner.validation.report import MISSING_NAMED, Skipped, replica_subject

#: Provenance key of the rounds a plan was made for (``gpuplan replan --rounds``): the plan as a whole
#: may move and preempt that many rounds' worth of the budget.
ROUNDS_KEY = "replan_rounds"


@dataclass(frozen=True)
class Stopped:
    """A running replica that the plan stops: moved, preempted, or drained in place (``how``: the
    kind of action it needs, ``MIGRATE``, ``PREEMPT`` or ``DRAIN``)."""

    workload: Workload
    replica: int
    place: Placement
    target: Assignment | None
    how: str
    scheduled: bool

    @property
    def subject(self) -> str:
        return replica_subject(self.workload.id, self.replica)

    @property
    def what(self) -> str:
        """``replica 0 of workload 'llm-a'``."""
        return f"replica {self.replica} of workload '{self.workload.id}'"

    @property
    def verb(self) -> str:
        """What the plan does to it: ``moves``, ``preempts`` or ``drains``."""
        return {MIGRATE: "moves", PREEMPT: "preempts"}.get(self.how, "drains")


def stopped_replicas(ctx: CheckContext) -> list[Stopped]:
    """Running replicas (``running_on``) that the plan stops, in input order: moved (assigned to
    another node or other GPU entries), preempted (not assigned) or drained in place for a MIG
    re-partition (a ``migrate`` action marked ``DRAIN``); each with whether its action exists."""
    target: dict[tuple[str, int], Assignment] = {}
    for assignment in ctx.plan.assignments:
        target.setdefault((assignment.workload, assignment.replica), assignment)
    actions: set[tuple[str, str, int]] = set()
    for act in ctx.plan.actions:
        if act.workload is not None and act.replica is not None:
            kind = DRAIN if act.kind == MIGRATE and act.detail == DRAIN else act.kind
            actions.add((kind, act.workload, act.replica))
    stopped: list[Stopped] = []
    for w in ctx.inp.workloads:
        for r, place in enumerate(w.running_on):
            a = target.get((w.id, r))
            how = stop_kind(placed=a is not None, stays=a is not None and w.stays(r, a.node, a.gpus))
            if how is None and (DRAIN, w.id, r) in actions:
                how = DRAIN  # stays, but is stopped for a MIG re-partition of its GPU
            if how is None:
                continue
            stopped.append(Stopped(w, r, place, a, how, (how, w.id, r) in actions))
    return stopped


def _newcomers(ctx: CheckContext) -> dict[str, list[tuple[str, int]]]:
    """The team and tier rank of each replica the plan starts on each node (replicas that do not run
    yet): the work a preemption there may make room for."""
    out: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for p in ctx.placed:
        if p.assignment.replica < len(p.workload.running_on):
            continue
        out[p.node.name].append((p.workload.team, ctx.inp.policy.tier_rank(p.workload.tier)))
    return out


def _standings(ctx: CheckContext) -> dict[str, Standing]:
    """Each team's fair-share standing at the plan's time, when fair-sharing preemption may apply (else,
    or without the plan's time, none: no preemption is then allowed by fair share)."""
    fair = ctx.inp.policy.fair_share
    now = _plan_time(ctx.plan)
    if fair is None or not fair.preempt_borrowed or now is None:
        return {}
    return input_standings(ctx.inp, ctx.catalog, now)


def _displaced(
    policy: Policy, here: list[tuple[str, int]], standing: dict[str, Standing], w: Workload
) -> bool:
    """Whether the newcomers ``here`` (team, tier rank) on a node let running ``w`` be preempted there."""
    rank = policy.tier_rank(w.tier)
    fairly = bool(standing) and any(
        fair_displaces(policy, standing, new, (w.team, rank, w.preemptible)) for new in here
    )
    best = min((r for _, r in here), default=None)
    return displaced(policy.disruption, best, rank, fairly=fairly)


def check_disruption(ctx: CheckContext, stopped: Sequence[Stopped], actions: bool) -> None:
    """Rule 13: only preemptible work in a tier that may be preempted is stopped, under
    ``disruption.preempt_only_for_higher_tier`` only for a replica of a strictly higher tier that the
    plan starts on its node (or one its fair share lets displace it: ``fair_share.preempt_borrowed``),
    and (``actions``: the plan carries its actions) every move and preemption that the assignments imply
    has its action (a drain is known by its action)."""
    policy = ctx.inp.policy
    newcomers = _newcomers(ctx) if policy.disruption.preempt_only_for_higher_tier else {}
    standing = _standings(ctx) if newcomers else {}
    for s in stopped:
        w = s.workload
        running = where(s.place.node, s.place.gpus, "sentence")
        if s.how == PREEMPT:
            if not w.preemptible:
                ctx.add(
                    "preempt-forbidden",
                    s.subject,
                    f"The plan stops {s.what}, which runs on {running}, but the workload is not preemptible.",
                )
            elif not tier_may_be_preempted(policy.tier(w.tier), policy.disruption):
                ctx.add(
                    "preempt-forbidden",
                    s.subject,
                    f"The plan stops {s.what}, which runs on {running}, but its tier '{w.tier}' may not "
                    "be preempted (and disruption.preempt_latency_sensitive is false).",
                )
            elif not _displaced(policy, newcomers.get(s.place.node, []), standing, w):
                fairly = " or, by fair share, of its tier for a team below its share" if standing else ""
                ctx.add(
                    "preempt-higher-tier",
                    s.subject,
                    f"The plan preempts {s.what}, which runs on {running}, but starts no replica of a "
                    f"tier above '{w.tier}'{fairly} on node '{s.place.node}' "
                    "(disruption.preempt_only_for_higher_tier is true).",
                )
        if s.scheduled or not actions:
            continue
        if s.target is None:
            message = f"The plan stops {s.what}, which runs on {running}, but has no preempt action for it."
        else:
            target = where(s.target.node, s.target.gpus, "sentence")
            message = f"The plan moves {s.what} from {running} to {target} but has no migrate action for it."
        ctx.add("disruption-unscheduled", s.subject, message)
    check_not_disruptible(ctx, stopped)


def check_not_disruptible(ctx: CheckContext, stopped: Sequence[Stopped]) -> None:
    """Rule 13: a running replica of a workload that may not be disrupted (``disruptible: false``: a
    PodDisruptionBudget allows no more evictions of its pod, ``gpuplan import kubernetes --pdbs``) is
    neither moved, nor preempted, nor drained (rule ``not-disruptible``)."""
    for s in stopped:
        if s.workload.disruptible:
            continue
        running = where(s.place.node, s.place.gpus, "sentence")
        ctx.add(
            "not-disruptible",
            s.subject,
            f"The plan {s.verb} {s.what}, which runs on {running}, but the workload may not be disrupted "
            "(disruptible: false, as a PodDisruptionBudget allows no more evictions of its pod).",
        )


def _rounds(ctx: CheckContext) -> int:
    """The rounds the plan was made for: its provenance's ``replan_rounds`` (a positive whole number),
    else one."""
    rounds = ctx.plan.provenance.get(ROUNDS_KEY)
    return rounds if isinstance(rounds, int) and not isinstance(rounds, bool) and rounds > 0 else 1


def check_disruption_total(ctx: CheckContext, stopped: Sequence[Stopped]) -> None:
    """Rule 13: over the whole plan, the migrations and preemptions its assignments imply (drains for
    a re-partition excluded: rounds space them out) stay within the per-round budget times the rounds
    the plan was made for (:data:`ROUNDS_KEY`), and each team's migrations within
    ``max_moves_per_team`` times those rounds; spreading actions over more rounds does not buy more
    of them."""
    budget = ctx.inp.policy.disruption
    rounds = _rounds(ctx)
    made_for = f"{rounds} round(s)" + (f" (provenance {ROUNDS_KEY})" if rounds > 1 else "")
    checks = (
        ("moves", MIGRATE, moves_allowed(budget, rounds), budget.max_moves_per_round, "max_moves_per_round"),
        (
            "preempts",
            PREEMPT,
            preemptions_allowed(budget, rounds),
            budget.max_preemptions_per_round,
            "max_preemptions_per_round",
        ),
    )
    for verb, how, allowed, limit, name in checks:
        group = [s for s in stopped if s.how == how]
        if len(group) <= allowed:
            continue
        names = ", ".join(f"{s.workload.id}#{s.replica}" for s in group[:MISSING_NAMED])
        names += ", ..." if len(group) > MISSING_NAMED else ""
        ctx.add(
            "disruption-budget",
            "plan",
            f"The plan {verb} {len(group)} running replica(s) ({names}), more than "
            f"disruption.{name} ({limit}) times the {made_for} it was made for.",
        )
    per_team = team_moves_allowed(budget)
    if per_team is None:
        return
    by_team: defaultdict[str, list[str]] = defaultdict(list)
    for s in stopped:
        if s.how == MIGRATE:
            by_team[s.workload.team].append(f"{s.workload.id}#{s.replica}")
    for team, moved in sorted(by_team.items()):
        if len(moved) <= per_team * rounds:
            continue
        names = ", ".join(moved[:MISSING_NAMED]) + (", ..." if len(moved) > MISSING_NAMED else "")
        ctx.add(
            "disruption-budget",
            f"team {team}",
            f"The plan moves {len(moved)} running replica(s) of team '{team}' ({names}), more than "
            f"disruption.max_moves_per_team ({per_team}) times the {made_for} it was made for.",
        )


def check_disruption_budget(ctx: CheckContext) -> None:
    """Rule 13: each round's ``migrate`` actions (drains included) and ``preempt`` actions stay
    within the disruption budget, in all and per team."""
    budget = ctx.inp.policy.disruption
    workloads = ctx.inp.workload_by_id
    moves: defaultdict[int, list[str]] = defaultdict(list)
    preempts: defaultdict[int, list[str]] = defaultdict(list)
    team_moves: defaultdict[int, defaultdict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for act in ctx.plan.actions:
        name = f"{act.workload}#{act.replica}"
        if act.kind == MIGRATE:
            moves[act.round].append(name)
            w = workloads.get(act.workload or "")
            if w is not None:
                team_moves[act.round][w.team].append(name)
        elif act.kind == PREEMPT:
            preempts[act.round].append(name)
    for rnd in sorted(moves.keys() | preempts.keys()):
        if len(moves[rnd]) > moves_allowed(budget):
            ctx.add(
                "disruption-budget",
                f"round {rnd}",
                f"Round {rnd} moves or drains {len(moves[rnd])} running replica(s) "
                f"({', '.join(moves[rnd])}), more than disruption.max_moves_per_round "
                f"({budget.max_moves_per_round}).",
            )
        if len(preempts[rnd]) > preemptions_allowed(budget):
            ctx.add(
                "disruption-budget",
                f"round {rnd}",
                f"Round {rnd} preempts {len(preempts[rnd])} running replica(s) "
                f"({', '.join(preempts[rnd])}), more than disruption.max_preemptions_per_round "
                f"({budget.max_preemptions_per_round}).",
            )
        limit = team_moves_allowed(budget)
        for team, names in sorted(team_moves[rnd].items()):
            if limit is not None and len(names) > limit:
                ctx.add(
                    "disruption-budget",
                    f"round {rnd} team {team}",
                    f"Round {rnd} moves {len(names)} running replica(s) of team '{team}' "
                    f"({', '.join(names)}), more than disruption.max_moves_per_team ({limit}).",
                )


def check_min_runtime(ctx: CheckContext, stopped: Sequence[Stopped]) -> None:
    """Rule 13: a replica is moved, preempted or drained only after running ``min_runtime_s`` at the
    plan's time (``provenance['now']``); not checkable, and recorded as skipped, for replicas
    without ``started_at`` or a plan without a time."""
    least = ctx.inp.policy.disruption.min_runtime_s
    if least <= 0 or not stopped:
        return
    now = _plan_time(ctx.plan)
    if now is None:
        ctx.skipped.append(Skipped("min-runtime", "without the plan's time (provenance 'now')"))
        return
    unknown = 0
    for s in stopped:
        started = s.workload.started_at
        ran = runtime_s(started, now)
        if started is None or ran is None:
            unknown += 1
            continue
        if not ran_long_enough(ran, least):
            ctx.add(
                "min-runtime",
                s.subject,
                f"The plan {s.verb} {s.what}, which started at {started.isoformat()} and has run "
                f"{ran:.10g} s at the plan's time {now.isoformat()}; disruption.min_runtime_s asks "
                f"for at least {least:.10g} s.",
            )
    if unknown:
        ctx.skipped.append(Skipped("min-runtime", f"for {unknown} stopped replica(s) without started_at"))


def _plan_time(plan: Plan) -> datetime | None:
    """The plan's time, ``provenance['now']`` (ISO-8601; UTC when it names no zone), or ``None``."""
    stamp = plan.provenance.get("now")
    if isinstance(stamp, str):
        try:
            stamp = datetime.fromisoformat(stamp)
        except ValueError:
            return None
    if not isinstance(stamp, datetime):
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)

"""Rules 10 and 11: the policy's isolation rules and team quotas (kept when only running replicas that
stay break them).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from fractions import Fraction

from gpuplan.models.cluster import Gpu
from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.plan import GpuUse
from gpuplan.models.policy import IsolationKind, IsolationRule, Quota
from gpuplan.planner.validation.context import CheckContext, Placed
from gpuplan.planner.validation.report import gpu_subject

#: Milli-GPU of one whole GPU.
FULL_MILLI = MILLI_PER_GPU


def check_isolation(ctx: CheckContext) -> None:
    """Rule 10: team-exclusive nodes, no GPU shared across teams or across isolated tiers (kept
    when only running replicas that stay break it, :meth:`CheckContext.only_kept`)."""
    for rule in ctx.inp.policy.isolation:
        if rule.kind is IsolationKind.TEAM_EXCLUSIVE:
            _team_exclusive(ctx, rule)
        else:
            _shared(ctx, rule)


def _team_exclusive(ctx: CheckContext, rule: IsolationRule) -> None:
    """Nodes listed by the rule (or in its pool) host only the rule's team."""
    reserved = set(rule.nodes) | {n.name for n in ctx.inp.cluster.nodes if rule.pool and n.pool == rule.pool}
    intruders: defaultdict[str, list[Placed]] = defaultdict(list)
    for p in ctx.placed:
        if p.node.name in reserved and p.workload.team != rule.team:
            intruders[p.node.name].append(p)
    for node in ctx.inp.cluster.nodes:
        if node.name in intruders:
            hosted = ", ".join(f"{p.subject} (team {p.workload.team})" for p in intruders[node.name])
            ctx.add(
                "isolation",
                f"node {node.name}",
                f"The node is reserved for team '{rule.team}' but hosts {hosted}.",
                kept=ctx.only_kept(intruders[node.name]),
            )


def _shared(ctx: CheckContext, rule: IsolationRule) -> None:
    """No GPU serves two teams (or two of the rule's tiers), whether by fractions or MIG instances."""
    by_team = rule.kind is IsolationKind.NO_SHARED_GPU_ACROSS_TEAMS
    what = "teams" if by_team else "isolated tiers"
    tiers = set(rule.tiers)
    for key, entries in ctx.loads.items():
        if by_team:
            groups = {p.workload.team for p, _ in entries}
        else:
            groups = {p.workload.tier for p, _ in entries} & tiers
        if len(groups) > 1:
            ctx.add(
                "isolation",
                gpu_subject(*key),
                f"The GPU is shared by {what} {', '.join(sorted(groups))}, which rule '{rule.kind}' forbids.",
                kept=ctx.only_kept(p for p, _ in entries),
            )


def check_quotas(ctx: CheckContext) -> None:
    """Rule 11: a team's GPU-equivalents stay within quota; only preemptible work may borrow. A team
    over its quota only by running replicas that stay keeps it (:meth:`CheckContext.only_kept`): no new
    placement or move counts against the quota while the team is over it."""
    if not ctx.inp.policy.quotas:
        return
    # Integer sums in a unit that divides every share exactly (milli-GPU and every MIG geometry).
    unit = FULL_MILLI * math.lcm(*(m.compute_slices for m in ctx.catalog.models))
    by_team: defaultdict[str, list[Placed]] = defaultdict(list)
    for p in ctx.placed:
        by_team[p.workload.team].append(p)
    for q in ctx.inp.policy.quotas:
        if math.isinf(q.gpus):
            continue
        used, firm_used = 0, 0
        users: list[Placed] = []  # the replicas whose use counts against the limit
        for p, use, gpu in _quota_uses(ctx, q, by_team[q.team]):
            eq = _equivalents(ctx, use, gpu, unit)
            used += eq
            if not p.workload.preemptible:
                firm_used += eq
            if eq and not (q.borrow and p.workload.preemptible):
                users.append(p)
        total, firm = Fraction(used, unit), Fraction(firm_used, unit)
        limit = _limit(q.gpus)
        subject = " ".join(
            [f"team {q.team}"]
            + ([f"model {q.gpu_model}"] if q.gpu_model else [])
            + ([f"pool {q.pool}"] if q.pool else [])
        )
        if not q.borrow and total > limit:
            ctx.add(
                "quota",
                subject,
                f"Team '{q.team}' uses {float(total):g} GPU-equivalents, over its quota of {q.gpus:g}.",
                kept=ctx.only_kept(users),
            )
        elif q.borrow and firm > limit:
            ctx.add(
                "quota",
                subject,
                f"Team '{q.team}' uses {float(firm):g} GPU-equivalents for non-preemptible work, "
                f"over its quota of {q.gpus:g}; only preemptible work may borrow beyond it.",
                kept=ctx.only_kept(users),
            )


def _equivalents(ctx: CheckContext, use: GpuUse, gpu: Gpu, unit: int) -> int:
    """GPU-equivalents of one entry in ``1/unit`` GPUs (whole 1, fraction milli/1000, MIG share)."""
    if use.mig_profile is not None:
        spec = ctx.spec(gpu)
        prof = spec.profile_map.get(use.mig_profile)
        return 0 if prof is None else prof.compute_slices * unit // spec.compute_slices
    if use.milli is not None:
        return use.milli * unit // FULL_MILLI
    return unit


def _quota_uses(
    ctx: CheckContext, q: Quota, placed: Iterable[Placed]
) -> Iterable[tuple[Placed, GpuUse, Gpu]]:
    """The GPU entries a quota counts: on its GPU model and in its pool, when it names them."""
    model = None if q.gpu_model is None else ctx.canonical(q.gpu_model)
    for p in placed:
        if q.pool is not None and p.node.pool != q.pool:
            continue
        for use, gpu in p.uses:
            if model is None or ctx.canonical(gpu.model) == model:
                yield p, use, gpu


def _limit(value: float) -> Fraction:
    """A quota as an exact fraction of its decimal form (0.3 means 3/10, not the nearest float)."""
    return Fraction(repr(value))

"""Rules 10 and 11: the policy's isolation rules and team quotas (kept when only running replicas that
stay break them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from fractions import Fraction

from gpuplan.models.cluster import Gpu
from gpuplan.models.plan import GpuUse
from gpuplan.models.policy import IsolationKind, IsolationRule, Quota
from gpuplan.models.rules.isolation import covers, sharing_groups
from gpuplan.models.rules.quota import (
    charges_gpu,
    charges_replica,
    limit_units,
    quota_model,
    quota_unit,
    use_units,
)
from gpuplan.planner.validation.context import CheckContext, Placed
from gpuplan.planner.validation.report import gpu_subject


def check_isolation(ctx: CheckContext) -> None:
    """Rule 10: team-exclusive nodes, no GPU shared across teams or across isolated tiers (kept
    when only running replicas that stay break it, :meth:`CheckContext.only_kept`)."""
    for rule in ctx.inp.policy.isolation:
        if rule.kind is IsolationKind.TEAM_EXCLUSIVE:
            _team_exclusive(ctx, rule)
        else:
            _shared(ctx, rule)


def _team_exclusive(ctx: CheckContext, rule: IsolationRule) -> None:
    """Nodes listed by the rule (or in its pool) host only the rule's team
    (:func:`~gpuplan.models.rules.isolation.covers`)."""
    intruders: defaultdict[str, list[Placed]] = defaultdict(list)
    for p in ctx.placed:
        if covers(rule, p.node.name, p.node.pool) and p.workload.team != rule.team:
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
    """No GPU serves two teams (or two of the rule's tiers), whether by fractions or MIG instances
    (:func:`~gpuplan.models.rules.isolation.sharing_groups`)."""
    what = "teams" if rule.kind is IsolationKind.NO_SHARED_GPU_ACROSS_TEAMS else "isolated tiers"
    for key, entries in ctx.loads.items():
        groups = sharing_groups(rule, ((p.workload.team, p.workload.tier) for p, _ in entries))
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
    placement or move counts against the quota while the team is over it. The charges and limits are
    :mod:`gpuplan.models.rules.quota`'s, in the catalog's exact quota unit."""
    if not ctx.inp.policy.quotas:
        return
    unit = quota_unit(ctx.catalog)
    by_team: defaultdict[str, list[Placed]] = defaultdict(list)
    for p in ctx.placed:
        by_team[p.workload.team].append(p)
    for q in ctx.inp.policy.quotas:
        limit = limit_units(q.gpus, unit)
        if limit is None:
            continue  # an infinite quota never binds
        used = 0
        users: list[Placed] = []  # the replicas whose use counts against the limit
        for p, use, gpu in _quota_uses(ctx, q, by_team[q.team]):
            units = _units(ctx, use, gpu, unit)
            used += units
            if units:
                users.append(p)
        if used <= limit:
            continue
        total = float(Fraction(used, unit))
        subject = " ".join(
            [f"team {q.team}"]
            + ([f"model {q.gpu_model}"] if q.gpu_model else [])
            + ([f"pool {q.pool}"] if q.pool else [])
        )
        if not q.borrow:
            message = f"Team '{q.team}' uses {total:g} GPU-equivalents, over its quota of {q.gpus:g}."
        else:
            message = (
                f"Team '{q.team}' uses {total:g} GPU-equivalents for non-preemptible work, "
                f"over its quota of {q.gpus:g}; only preemptible work may borrow beyond it."
            )
        ctx.add("quota", subject, message, kept=ctx.only_kept(users))


def _units(ctx: CheckContext, use: GpuUse, gpu: Gpu, unit: int) -> int:
    """Quota units (``unit`` per GPU) of one GPU entry (an unknown MIG profile, its own violation,
    charges none)."""
    spec = None if use.mig_profile is None else ctx.spec(gpu)
    if spec is not None and use.mig_profile not in spec.profile_map:
        return 0
    return use_units(use.kind, use.milli, use.mig_profile, spec, unit)


def _quota_uses(
    ctx: CheckContext, q: Quota, placed: Iterable[Placed]
) -> Iterable[tuple[Placed, GpuUse, Gpu]]:
    """The GPU entries a quota counts (:func:`~gpuplan.models.rules.quota.charges_replica` and
    :func:`~gpuplan.models.rules.quota.charges_gpu`): of its team's work that it charges, on its GPU
    model and in its pool, when it names them."""
    model = quota_model(q, ctx.catalog)
    for p in placed:
        if not charges_replica(q, p.workload.team, p.workload.preemptible):
            continue
        for use, gpu in p.uses:
            if charges_gpu(q, model, p.node.pool, ctx.canonical(gpu.model)):
                yield p, use, gpu

"""Fair share with usage history: a team's decayed usage, its standing against its share, and the factor
its waiting replicas' queue penalty is weighed by.

As Slurm's classic multifactor fair share: a team's normalised share ``S`` is its share weight over all
teams' weights, its usage ``U`` its decayed GPU-hours over all teams' (0 when nobody used anything), and
its standing the fair-share factor ``F = 2 ** (-U / S)``: 1 for a team that used nothing, 0.5 at exactly
its share, towards 0 above it. Usage decays continuously with the policy's half-life: a GPU-equivalent
held over an interval counts ``∫ 2 ** (-age / half_life) dt`` GPU-hours, ``age`` the hours from each
instant to the planning time (Slurm's ``PriorityDecayHalfLife``, without its periodic steps). The
queue penalty of a waiting replica is multiplied by ``min_factor + (max_factor - min_factor) * F``, kept
as an integer number of hundredths (:func:`~gpuplan.models.policy.fair_units`, beside the policy check
that no standing lifts a lower tier over a higher one), so every solver, bound and measure weighs it
alike; a policy without ``fair_share`` multiplies by 1.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Assignment
from gpuplan.models.policy import FairShare, Policy, fair_units
from gpuplan.models.rules.quota import gpu_equivalents, on_borrowed_capacity, use_units
from gpuplan.models.workload import Shape


def decayed_gpu_hours(
    gpus: float, start: datetime, end: datetime, now: datetime, half_life_h: float
) -> float:
    """GPU-hours of ``gpus`` GPU-equivalents held from ``start`` to ``end`` (cut at ``now``), each instant
    weighted ``2 ** (-hours before now / half_life_h)``: ``gpus * h / ln 2 * (2 ** (-b / h) - 2 ** (-a / h))``
    with ``a`` and ``b`` the hours from ``start`` and ``end`` to ``now``."""
    end = min(end, now)
    if gpus <= 0 or end <= start:
        return 0.0
    a = (now - start).total_seconds() / 3600
    b = (now - end).total_seconds() / 3600
    return gpus * half_life_h / math.log(2) * (math.exp2(-b / half_life_h) - math.exp2(-a / half_life_h))


def fair_share_factor(usage_share: float, share: float) -> float:
    """Slurm's fair-share factor ``2 ** (-usage_share / share)`` of a team with normalised ``share`` that
    had ``usage_share`` of the decayed usage."""
    return math.exp2(-usage_share / share)


@dataclass(frozen=True)
class Standing:
    """One team's fair share: its normalised share, decayed usage (GPU-hours) and share of everyone's,
    its fair-share factor (the standing) and the queue penalty's multiplier (hundredths)."""

    team: str
    share: float
    usage_gpu_hours: float
    usage_share: float
    factor: float
    units: int

    @property
    def over_share(self) -> bool:
        """Whether the team used more than its share (a standing below 0.5)."""
        return self.usage_share > self.share


def standings(fair: FairShare, teams: Iterable[str], usage: Mapping[str, float]) -> dict[str, Standing]:
    """Each team's standing under ``fair``: ``teams`` (the workloads' and the policy's), those with a
    share listed and those with usage, normalised over all of them."""
    known = sorted(set(teams) | set(fair.shares) | {t for t, u in usage.items() if u > 0})
    weights = {t: fair.share(t) for t in known}
    total_share = sum(weights.values())
    total_usage = sum(usage.get(t, 0.0) for t in known)
    out = {}
    for t in known:
        share = weights[t] / total_share
        used = usage.get(t, 0.0)
        part = used / total_usage if total_usage > 0 else 0.0
        factor = fair_share_factor(part, share)
        units = fair_units(fair.min_factor + (fair.max_factor - fair.min_factor) * factor)
        out[t] = Standing(t, share, used, part, factor, units)
    return out


def fair_displaces(
    policy: Policy,
    standing: Mapping[str, Standing],
    newcomer: tuple[str, int],
    running: tuple[str, int, bool],
) -> bool:
    """Whether fair-sharing preemption lets a newcomer (team, tier rank) the plan starts on a node displace
    a running replica there (team, tier rank, preemptible): the policy's ``fair_share.preempt_borrowed``
    is on, both are of one tier, the newcomer's team is below its share and the running replica is on
    borrowed capacity of a team above its share (Kueue's ``LessThanOrEqualToFinalShare`` in spirit: the
    preemption moves capacity from the team over its share to the one under it)."""
    fair = policy.fair_share
    if fair is None or not fair.preempt_borrowed or newcomer[1] != running[1]:
        return False
    new, old = standing.get(newcomer[0]), standing.get(running[0])
    if new is None or old is None or new.over_share or not old.over_share:
        return False
    return on_borrowed_capacity(policy.quotas, running[0], running[2])


def running_usage(
    inp: PlanningInput, catalog: HardwareCatalog, now: datetime, fair: FairShare
) -> dict[str, float]:
    """Decayed GPU-hours of the work running now, per team: each running replica's GPU-equivalents from
    its ``started_at`` (or ``fair.history_until``, when later: the history counts what ran before it) up
    to ``now``; a replica without ``started_at`` counts from ``history_until`` only, when there is one."""
    out: dict[str, float] = defaultdict(float)
    nodes = inp.cluster.node_by_name
    for w in inp.workloads:
        starts = [s for s in (w.started_at, fair.history_until) if s is not None]
        if not starts or not w.running_on:
            continue
        start = max(starts)
        for place in w.running_on:
            node = nodes[place.node]
            gpus = 0.0
            for g in place.gpus:
                spec = None if g.mig_profile is None else catalog.model(node.gpu_by_index[g.index].model)
                gpus += float(gpu_equivalents(g.kind, g.milli, g.mig_profile, spec))
            out[w.team] += decayed_gpu_hours(gpus, start, now, now, fair.half_life_h)
    return dict(out)


def input_standings(inp: PlanningInput, catalog: HardwareCatalog, now: datetime) -> dict[str, Standing]:
    """Each team's standing at ``now`` under the input's fair-share policy (none without one): usage given
    in the policy, read from the plan history, and of the work running now, added."""
    fair = inp.policy.fair_share
    if fair is None:
        return {}
    usage: dict[str, float] = defaultdict(float)
    for part in (fair.usage, fair.history_usage, running_usage(inp, catalog, now, fair)):
        for team, hours in part.items():
            usage[team] += hours
    return standings(fair, [*inp.policy.teams, *(w.team for w in inp.workloads)], usage)


# The fairness floor: every team is allocated at least a share of its max-min fair entitlement.
#
# Entitlements are max-min fair (water-filling) over the fleet's GPU-equivalents: each team's share
# weight (``fair_share.shares``, 1 each without a fair-share policy) of what is left, capped at what the
# team asks for (running and waiting replicas, each at its first alternative), the rest shared again
# among the others. GPU-equivalents are in quota units (:func:`~gpuplan.models.rules.quota.quota_unit`),
# so the solvers' integer sums and these are the same numbers. A plan's fairness level is the lowest
# ratio of a team's allocation to its entitlement; a floor ``level`` asks every team with an entitlement
# for at least ``ceil(level * entitlement)`` units (:func:`floor_units`).


def max_min_entitlements(
    capacity: int, demand: Mapping[str, int], weight: Mapping[str, Fraction]
) -> dict[str, Fraction]:
    """Each team's max-min fair entitlement of ``capacity`` units: shares in proportion to ``weight``,
    none above the team's ``demand``, what a capped team leaves shared again among the others."""
    out = {t: Fraction(0) for t in demand}
    active = {t for t, d in demand.items() if d > 0}
    left = Fraction(capacity)
    while active and left > 0:
        total = sum(weight[t] for t in active)
        capped = {t for t in active if demand[t] <= left * weight[t] / total}
        if not capped:
            for t in active:
                out[t] = left * weight[t] / total
            break
        for t in capped:
            out[t] = Fraction(demand[t])
            left -= demand[t]
        active -= capped
    return out


def floor_units(level: Fraction, entitlement: Fraction) -> int:
    """The fewest units a team with ``entitlement`` must hold under a floor of ``level``."""
    return math.ceil(level * entitlement)


def shortfall_steps(floor: int, served: int, unit: int) -> int:
    """Whole GPU-equivalents (of ``unit`` units) a team holding ``served`` units lacks to reach
    ``floor``: the fairness floor's term, which every solver and measure counts alike."""
    return max(0, -(-(floor - served) // unit))


def fairness_level(served: Mapping[str, int], entitled: Mapping[str, Fraction]) -> float | None:
    """The lowest ratio of allocation to entitlement over teams with an entitlement (``None``: none)."""
    ratios = [served.get(t, 0) / e for t, e in entitled.items() if e > 0]
    return float(min(ratios)) if ratios else None


def jain_index(served: Mapping[str, int], entitled: Mapping[str, Fraction]) -> float | None:
    """Jain's fairness index of the teams' allocations normalised by their entitlements:
    ``(sum x) ** 2 / (n * sum x ** 2)``, 1 when all get the same share of their entitlement."""
    xs = [served.get(t, 0) / e for t, e in entitled.items() if e > 0]
    square = sum(x * x for x in xs)
    return None if not xs or square == 0 else float(sum(xs) ** 2 / (len(xs) * square))


def replica_units(
    kind: str,
    gpus: int,
    milli: int | None,
    mig_profile: str | None,
    models: Collection[str],
    catalog: HardwareCatalog,
    unit: int,
) -> int:
    """Units one replica of a shape asks for: its whole GPUs, its fraction, or the smallest share of a
    GPU its MIG profile is on the (catalog-named) ``models`` it allows (empty: any)."""
    if kind == "whole":
        return gpus * unit
    if kind != "mig":
        return use_units(kind, milli, None, None, unit)
    assert mig_profile is not None
    sizes = [
        use_units("mig", None, mig_profile, m, unit)
        for m in catalog.models
        if mig_profile in m.profile_map and (not models or m.name in models)
    ]
    return min(sizes, default=unit)


def _replica_demand(shape: Shape, catalog: HardwareCatalog, unit: int) -> int:
    """:func:`replica_units` of a workload's shape."""
    models = {catalog.canonical(m) for m in shape.gpu_models}
    return replica_units(shape.kind, shape.gpus, shape.gpu_milli, shape.mig_profile, models, catalog, unit)


def team_weights(policy: Policy, teams: Iterable[str]) -> dict[str, Fraction]:
    """Each team's share weight for entitlements, exactly from its decimal form: the fair-share policy's
    ``shares`` (its ``default_share`` for others), 1 each without one."""
    fair = policy.fair_share
    return {t: Fraction(repr(1.0 if fair is None else fair.share(t))) for t in teams}


def input_entitlements(inp: PlanningInput, catalog: HardwareCatalog, unit: int) -> dict[str, Fraction]:
    """Each team's max-min fair entitlement (units) of the input's GPUs, for its replicas' demand."""
    capacity = sum(len(n.gpus) for n in inp.cluster.nodes) * unit
    demand: dict[str, int] = defaultdict(int)
    for w in inp.workloads:
        demand[w.team] += w.replicas * _replica_demand(w.shapes[0], catalog, unit)
    return max_min_entitlements(capacity, demand, team_weights(inp.policy, demand))


def floors_at(level: float | None, entitled: Mapping[str, Fraction]) -> dict[str, int]:
    """The units each team with an entitlement must hold at floor ``level`` (exactly from its decimal
    form; none without a floor)."""
    if level is None:
        return {}
    exact = Fraction(repr(level))
    return {t: floor_units(exact, e) for t, e in entitled.items() if e > 0}


def input_floors(inp: PlanningInput, catalog: HardwareCatalog, unit: int) -> dict[str, int]:
    """The units each team must hold under the policy's fairness floor (none without one)."""
    level = inp.policy.fair_floor
    return {} if level is None else floors_at(level, input_entitlements(inp, catalog, unit))


def served_units(
    assignments: Iterable[Assignment],
    team_of: Callable[[Assignment], str],
    gpu_model: Callable[[str, int], str],
    catalog: HardwareCatalog,
    unit: int,
) -> dict[str, int]:
    """Units each team holds in ``assignments`` (running work kept and new placements): ``team_of`` an
    assignment's team, ``gpu_model`` the model of a node's GPU (by node name and GPU index)."""
    out: dict[str, int] = defaultdict(int)
    for a in assignments:
        for g in a.gpus:
            spec = None if g.mig_profile is None else catalog.model(gpu_model(a.node, g.index))
            out[team_of(a)] += use_units(g.kind, g.milli, g.mig_profile, spec, unit)
    return dict(out)


def input_served(
    inp: PlanningInput, catalog: HardwareCatalog, assignments: Iterable[Assignment], unit: int
) -> dict[str, int]:
    """:func:`served_units` of a plan of ``inp``."""
    workloads, nodes = inp.workload_by_id, inp.cluster.node_by_name
    return served_units(
        assignments,
        lambda a: workloads[a.workload].team,
        lambda node, index: nodes[node].gpu_by_index[index].model,
        catalog,
        unit,
    )

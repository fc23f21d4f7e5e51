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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.policy import FairShare, fair_units
from gpuplan.models.rules.quota import gpu_equivalents


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

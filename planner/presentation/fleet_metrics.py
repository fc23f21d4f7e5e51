"""Fleet figures of one plan, for monitoring (the API's ``/metrics``) and ``gpuplan history show``.

The allocated GPU ratio and the fragmentation rate are the plan's own ``metrics``; this module adds the
figures per pool, per tier and per team: GPU use per pool, waiting replicas per tier and team, GPU use and
fleet-wide quota per team, and the 95th percentile of the predicted waits per tier.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime

from gpuplan.models.catalog import default_catalog
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.models.rules.quota import fleet_wide
from gpuplan.planner.pipeline.metrics import gpu_equivalents
from gpuplan.planner.pipeline.timeline import predicted_waits

#: The pool of nodes that name none.
NO_POOL = "(none)"


@dataclass(frozen=True)
class PoolUse:
    """One pool in a plan: its GPUs, the GPU-equivalents placed on them and the replicas placed there."""

    gpus: int
    used: float
    replicas: int

    @property
    def ratio(self) -> float:
        """Share of the pool's GPUs allocated (0 for a pool without GPUs)."""
        return self.used / self.gpus if self.gpus else 0.0


@dataclass(frozen=True)
class FleetMetrics:
    """The fleet figures of one plan.

    ``predicted_wait_p95_s`` is the nearest-rank 95th percentile of the waiting replicas' predicted
    waits per tier (seconds from the plan's time; 0 when none waits); a replica with no predicted start
    counts as an infinite wait, so the figure is ``inf`` when more than 5 % of a tier's waits are unknown.
    """

    allocated_gpu_ratio: float
    fragmentation_rate: float | None
    pools: dict[str, PoolUse]
    waiting: dict[tuple[str, str], int]
    team_gpus: dict[str, float]
    team_quota_gpus: dict[str, float]
    predicted_wait_p95_s: dict[str, float]


def p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile (0 for no values)."""
    if not values:
        return 0.0
    return sorted(values)[math.ceil(0.95 * len(values)) - 1]


def fleet_metrics(plan: Plan, inp: PlanningInput, catalog: HardwareCatalog | None = None) -> FleetMetrics:
    """The fleet figures of ``plan``, made from ``inp``."""
    catalog = catalog or default_catalog()
    nodes = inp.cluster.node_by_name
    workloads = inp.workload_by_id
    gpus: Counter[str] = Counter()
    for n in inp.cluster.nodes:
        gpus[n.pool or NO_POOL] += len(n.gpus)
    used: defaultdict[str, float] = defaultdict(float)
    replicas: Counter[str] = Counter()
    team_gpus: defaultdict[str, float] = defaultdict(float)
    for a in plan.assignments:
        node = nodes[a.node]
        share = sum(gpu_equivalents(g, node.gpu_by_index[g.index].model, catalog) for g in a.gpus)
        used[node.pool or NO_POOL] += share
        replicas[node.pool or NO_POOL] += 1
        team_gpus[workloads[a.workload].team] += share
    pools = {p: PoolUse(gpus[p], round(used[p], 4), replicas[p]) for p in sorted(gpus)}
    waiting = {(w.tier, w.team): 0 for w in inp.workloads}
    for u in plan.unplaced:
        w = workloads[u.workload]
        waiting[w.tier, w.team] += 1
    quotas: dict[str, float] = {}
    for q in inp.policy.quotas:
        if fleet_wide(q):
            quotas[q.team] = min(q.gpus, quotas.get(q.team, math.inf))
    waits: defaultdict[str, list[float]] = defaultdict(list)
    now = datetime.fromisoformat(str(plan.provenance["now"]))
    for (wid, _), wait in predicted_waits(plan, now).items():
        waits[workloads[wid].tier].append(math.inf if wait is None else wait)
    return FleetMetrics(
        allocated_gpu_ratio=plan.metrics.get("allocated_gpu_fraction", 0.0),
        fragmentation_rate=plan.metrics.get("fragmentation_rate"),
        pools=pools,
        waiting=dict(sorted(waiting.items())),
        team_gpus={t: round(team_gpus[t], 4) for t in sorted({w.team for w in inp.workloads})},
        team_quota_gpus=quotas,
        predicted_wait_p95_s={t.name: p95(waits[t.name]) for t in inp.policy.tiers},
    )

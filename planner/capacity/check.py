"""The placement check of a purchase: the purchased nodes as a fleet of their own, the waiting
replicas planned on it alone with the real placement solver (a validated plan), and what the purchase
phases found. Separate from the MILP so that a purchase is only reported once a real plan places it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuplan.models.capacity import NodeTypeCatalog
from gpuplan.models.cluster import Cluster, Node
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.models.policy import IsolationKind, Policy
from gpuplan.models.workload import Workload
from gpuplan.planner.capacity.demand import Key
from gpuplan.planner.capacity.node_types import node_for
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.capacity.phases import placement


def _sub_policy(policy: Policy, pools: set[str]) -> Policy:
    """The policy for the purchased nodes: no quotas, isolation that still applies, MIG creation on."""
    isolation = tuple(
        rule
        for rule in policy.isolation
        if rule.kind is not IsolationKind.TEAM_EXCLUSIVE or (not rule.nodes and rule.pool in pools)
    )
    mig = policy.mig.model_copy(update={"allow_create": True})
    return policy.model_copy(update={"quotas": (), "isolation": isolation, "mig": mig})


def _sub_workloads(
    inp: PlanningInput, keys: list[Key], keep: dict[str, tuple[str, ...]]
) -> tuple[tuple[Workload, ...], dict[Key, Key]]:
    """The waiting replicas as fresh workloads (same ids), those in ``keep`` limited to its GPU models
    (their class), and the map back to original replica keys."""
    by_workload: dict[str, list[int]] = defaultdict(list)
    for wid, rep in keys:
        by_workload[wid].append(rep)
    workloads = []
    back: dict[Key, Key] = {}
    for wid, reps in by_workload.items():
        w = inp.workload_by_id[wid]
        update: dict[str, Any] = {"replicas": len(reps), "running_on": ()}
        if wid in keep:
            update["gpu_models"] = keep[wid]
        workloads.append(w.model_copy(update=update))
        for i, rep in enumerate(sorted(reps)):
            back[(wid, i)] = (wid, rep)
    return tuple(workloads), back


@dataclass
class Fleet:
    """The purchased nodes (in buying order) and the labels every new node carries."""

    types: NodeTypeCatalog
    catalog: HardwareCatalog
    labels: dict[str, str]
    nodes: list[tuple[str, Node]] = field(default_factory=list)

    def buy(self, type_name: str, count: int, mig_gpus: int) -> None:
        """Add ``count`` nodes of a type, spreading ``mig_gpus`` MIG-mode GPUs from the last node."""
        t = self.types.node_type(type_name)
        left = mig_gpus
        batch = []
        for _ in range(count):
            take = min(left, t.gpus)
            left -= take
            batch.append(take)
        for take in reversed(batch):
            name = f"new-{t.name}-{sum(1 for k, _ in self.nodes if k == t.name) + 1:02d}"
            self.nodes.append((t.name, node_for(t, name, take, self.labels, self.catalog)))

    def cluster(self) -> Cluster:
        return Cluster(nodes=tuple(n for _, n in self.nodes))


def check_purchase(
    inp: PlanningInput,
    fleet: Fleet,
    keys: list[Key],
    opts: GapOptions,
    now: datetime | None,
    seconds: float,
    keep: dict[str, tuple[str, ...]],
) -> tuple[Plan, PlanningInput, dict[Key, Key]]:
    """Plan the replicas ``keys`` on the purchased nodes alone (the placement check), each workload in
    ``keep`` on its own GPU class."""
    workloads, back = _sub_workloads(inp, keys, keep)
    cluster = fleet.cluster()
    pools = {n.pool for n in cluster.nodes if n.pool}
    sub = PlanningInput.model_validate(
        {"cluster": cluster, "workloads": workloads, "policy": _sub_policy(inp.policy, pools)},
        context={"catalog": fleet.catalog},
    )
    return placement(sub, opts, fleet.catalog, now, seconds), sub, back


@dataclass
class Bought:
    """What the purchase phases found: the nodes bought, the last placement check on them and the
    MILP's bound and status."""

    fleet: Fleet
    check: Plan | None = None
    sub: PlanningInput | None = None
    back: dict[Key, Key] = field(default_factory=dict)
    waiting: list[Key] = field(default_factory=list)
    lower: float = 0.0
    solver: str = ""
    status: str = ""

"""Capacity-gap plans: what to re-partition, then what to buy, so that waiting demand is served.

1. Plan the fleet as it is. The gap demand is every waiting replica that has no predicted start or
   whose predicted start is later than its tier's target wait.
2. No purchase first: when the policy forbids MIG re-partitions or sharing-mode changes, plan again
   with the plan held, allowing them; the gap replicas that this plan places are served by
   re-partitioning (its MIG and ``set-sharing`` actions say how).
3. Replicas that no node type of the catalog can ever host are reported, naming the workload.
4. The rest goes to the purchase MILP (:mod:`planner.capacity.purchase`), whose optimum is a lower bound.
5. The purchase is checked by planning the remaining demand on the purchased nodes alone with the real
   placement solver (validated plan); if anything is left over, the cheapest node type that hosts
   it is added and the check repeats.
6. Each purchased node's GPUs and cost are shared among the replicas placed on it (by
   GPU-equivalents), giving GPUs, nodes and cost per tier and per team.

The purchased nodes serve only the gap demand: free capacity left in the existing fleet is not
counted, so the answer never relies on capacity the plan could not use.

Like-for-like: a GPU *class* is a GPU model of the hardware catalog. A replica whose workload names
no GPU model is bought for in its own class (:func:`home_models`) unless the options allow other
models for it; then the gap lists the workloads that would move class.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuplan.models.base import InputError
from gpuplan.models.capacity import (
    CapacityGap,
    ClassMove,
    GapLine,
    NodeType,
    NodeTypeCatalog,
    Purchase,
    Repartition,
    Served,
    Unservable,
)
from gpuplan.models.catalog import data_dir, default_catalog
from gpuplan.models.cluster import Cluster, Node
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import SET_SHARING, Plan, PlanStatus, Unplaced
from gpuplan.models.policy import DisruptionBudget, IsolationKind, Policy
from gpuplan.models.workload import GpuRef, Placement, Workload
from gpuplan.planner.capacity.purchase import (
    NO_SOLUTION,
    PurchaseSolution,
    TypeSpec,
    shape_fits,
    solve_purchase,
)
from gpuplan.planner.pipeline.compile import compile_node, compile_problem
from gpuplan.planner.pipeline.deadline import Deadline, Phases
from gpuplan.planner.pipeline.files import describe, read_structured
from gpuplan.planner.pipeline.layouts import cluster_after
from gpuplan.planner.pipeline.metrics import gpu_equivalents
from gpuplan.planner.planning import inputs_digest, make_plan
from gpuplan.planner.validation.errors import InvalidPlanError
from gpuplan.solvers.fleet.purchase import Offer, configure_purchase
from gpuplan.solvers.problem import PlacementProblem, Request, ShapeSpec
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)

Key = tuple[str, int]

#: Default purchasable catalog (example prices).
DEFAULT_NODE_TYPES = "node_types.yaml"


def default_node_types_path() -> Path:
    """The bundled example node-type catalog."""
    return data_dir() / "examples" / DEFAULT_NODE_TYPES


def load_node_types(path: Path | None, catalog: HardwareCatalog | None = None) -> NodeTypeCatalog:
    """A node-type catalog from YAML/JSON (the bundled example when ``path`` is None)."""
    path = path or default_node_types_path()
    raw = read_structured(path)
    try:
        return NodeTypeCatalog.model_validate(raw, context={"catalog": catalog} if catalog else None)
    except ValidationError as exc:
        raise InputError(f"{path}: {describe(exc, raw)}") from None


#: The phases of one capacity-gap run.
#: The solver name of a purchase found by the configuration LP.
CONFIGURED = "configuration-lp"
FLEET, REPARTITION, PURCHASE, CHECK, REPAIR = (
    "fleet plan", "re-partition re-plan", "purchase MILP", "placement check", "repair",
)  # fmt: skip
#: Their weights (see :class:`Phases`): placement solves weigh more than MILPs; the repair rounds (a
#: MILP and a check each, only when the check leaves replicas waiting) share the last part.
PHASE_WEIGHTS: dict[str, float] = {FLEET: 4.0, REPARTITION: 3.0, PURCHASE: 1.0, CHECK: 2.0, REPAIR: 1.5}
#: With less time than this an optional phase (the re-partition re-plan, a repair round) is skipped and
#: a required one (a placement solve, a MILP) gets this much: the deadline has as good as passed.
MIN_PHASE_S = 0.1
#: Back-ends that never stop at a time limit.
HEURISTICS = frozenset({"first-fit", "best-fit", "greedy-fgd"})


@dataclass(frozen=True)
class GapOptions:
    """Solver settings of one capacity-gap run.

    ``time_limit_s`` bounds the whole run (without an explicit deadline): every phase takes a share of
    it. ``milp_time_limit_s`` caps each purchase MILP within its share.
    """

    solver: str = "cpsat"
    time_limit_s: float = 30.0
    milp_time_limit_s: float = 30.0
    seed: int = 0
    num_workers: int = 2
    now: datetime | None = None
    repair_rounds: int = 3
    #: Ray address the independent pieces (scenarios, pricing problems, fleet parts) run on.
    ray: str | None = None
    #: Buy any GPU model for workloads without a GPU-model constraint (a what-if), or only for the
    #: workloads in ``other_models_for``; by default each keeps its class (:func:`home_models`).
    allow_other_models: bool = False
    other_models_for: frozenset[str] = frozenset()

    def other_models(self, workload: str) -> bool:
        """Whether ``workload`` may be bought for in another GPU class than its own."""
        return self.allow_other_models or workload in self.other_models_for


def stopped_early(plan: Plan) -> bool:
    """Whether an exact solver stopped at its time limit (a plan it did not prove optimal)."""
    return plan.status in (PlanStatus.FEASIBLE, PlanStatus.FALLBACK) and plan.solver.name not in HEURISTICS


def _phases(inp: PlanningInput, deadline: Deadline, *, fleet: bool) -> Phases:
    """The phases of a run on ``inp`` (the re-partition re-plan only when the policy forbids
    re-partitions and the fleet has MIG GPUs)."""
    weights = dict(PHASE_WEIGHTS)
    if not fleet:
        del weights[FLEET]
    if not _repartitions_to_try(inp):
        del weights[REPARTITION]
    return Phases(deadline, weights)


def _placement(
    inp: PlanningInput, opts: GapOptions, catalog: HardwareCatalog, now: datetime | None, seconds: float
) -> Plan:
    return make_plan(
        inp, solver=opts.solver, catalog=catalog, now=now, time_limit_s=max(MIN_PHASE_S, seconds),
        seed=opts.seed, num_workers=opts.num_workers, ray=opts.ray,
    )  # fmt: skip


def plan_fleet(
    inp: PlanningInput, opts: GapOptions, deadline: Deadline, catalog: HardwareCatalog | None = None
) -> Plan:
    """The fleet plan that starts a capacity-gap run with ``deadline``, within that phase's share (a
    caller that needs the plan itself passes it on as :func:`capacity_gap`'s ``baseline``)."""
    seconds = _phases(inp, deadline, fleet=True).share(FLEET)
    return _placement(inp, opts, catalog or default_catalog(), opts.now, seconds)


def _now(plan: Plan, given: datetime | None) -> datetime | None:
    if given is not None:
        return given
    text = plan.provenance.get("now")
    return datetime.fromisoformat(text) if isinstance(text, str) else None


def gap_demand(plan: Plan, inp: PlanningInput, now: datetime | None = None) -> list[Unplaced]:
    """Waiting replicas without a predicted start, or predicted to start after their tier's target
    (counted from ``now``, by default the plan's own planning time)."""
    now = _now(plan, now)
    out = []
    for u in plan.unplaced:
        target = inp.policy.tier(inp.workload_by_id[u.workload].tier).target_wait_s
        if u.predicted_start is not None and now is not None and target is not None:
            start = datetime.fromisoformat(u.predicted_start)
            if (start - now).total_seconds() <= target:
                continue
        out.append(u)
    return out


#: The solver label of a purchase taken over from the baseline.
WARM = "warm start"
#: Hours a workload without ``duration_s`` counts in the GPU-hours a purchase unlocks (one day).
DAY_H = 24.0

#: What the price source says for the bundled catalog.
EXAMPLE_SOURCE = (
    "EXAMPLE prices and lead times of the bundled node-type catalog, not quotes: give --catalog with "
    "your own (template: data/examples/node_types.template.yaml)"
)


def home_models(inp: PlanningInput, shape: ShapeSpec, workload: str) -> frozenset[str]:
    """The GPU class a shape without a named GPU model keeps: the models the workload's replicas run
    on, else the models of the fleet's GPUs, each narrowed to what the shape allows (its GPU memory
    ask); the shape's own models when neither leaves any."""
    running = {
        inp.cluster.node_by_name[p.node].gpu_by_index[g.index].model
        for p in inp.workload_by_id[workload].running_on
        for g in p.gpus
        if p.node in inp.cluster.node_by_name
    }
    fleet = {g.model for n in inp.cluster.nodes for g in n.gpus}
    for models in (running, fleet):
        fit = frozenset(m for m in models if not shape.models or m in shape.models)
        if fit:
            return fit
    return shape.models


def like_for_like(inp: PlanningInput, requests: list[Request], opts: GapOptions) -> list[Request]:
    """``requests`` with each shape that names no GPU model kept to its class (:func:`home_models`),
    except for workloads the options let buy other models."""
    out = []
    for r in requests:
        if opts.other_models(r.workload):
            out.append(r)
            continue
        shapes = tuple(
            s if s.named_models or s.kind == "cpu" else replace(s, models=home_models(inp, s, r.workload))
            for s in r.shapes
        )
        out.append(replace(r, shapes=shapes))
    return out


def _held(inp: PlanningInput, plan: Plan, catalog: HardwareCatalog) -> tuple[PlanningInput, dict[Key, Key]]:
    """``inp`` with the plan's placements running and held (no moves), its MIG layouts in place and
    re-partitions allowed; replicas are renumbered placed-first, with the map back to the original keys.
    """
    placed: dict[str, dict[int, Placement]] = defaultdict(dict)
    for a in plan.assignments:
        refs = tuple(GpuRef(**g.model_dump()) for g in a.gpus)
        placed[a.workload][a.replica] = Placement(node=a.node, gpus=refs, alternative=a.alternative)
    workloads = []
    back: dict[Key, Key] = {}
    for w in inp.workloads:
        mine = placed.get(w.id, {})
        order = sorted(mine) + [r for r in range(w.replicas) if r not in mine]
        back.update({(w.id, i): (w.id, r) for i, r in enumerate(order)})
        workloads.append(w.model_copy(update={"running_on": tuple(mine[r] for r in sorted(mine))}))
    policy = inp.policy.model_copy(
        update={
            "mig": inp.policy.mig.model_copy(update={"allow_create": True, "allow_repartition": True}),
            "sharing": inp.policy.sharing.model_copy(update={"allow_change": True}),
            "disruption": DisruptionBudget(),
        }
    )
    # A new input, not a model_copy: that would carry over the cached ``workload_by_id`` of ``inp``.
    held = PlanningInput.model_validate(
        {
            "cluster": cluster_after(inp.cluster, plan),
            "workloads": tuple(workloads),
            "policy": policy,
        },
        context={"catalog": catalog},
    )
    return held, back


def _has_mig_gpus(inp: PlanningInput) -> bool:
    return any(g.mig is not None for n in inp.cluster.nodes for g in n.gpus)


def _repartitions_to_try(inp: PlanningInput) -> bool:
    """Whether the policy forbids a change of the fleet that may serve demand without a purchase: a MIG
    re-partition (the fleet has MIG GPUs) or a node's sharing mode (the fleet has nodes with a mode)."""
    mig = not inp.policy.mig.allow_repartition and _has_mig_gpus(inp)
    sharing = not inp.policy.sharing.allow_change and any(n.sharing is not None for n in inp.cluster.nodes)
    return mig or sharing


def node_for(t: NodeType, name: str, mig_gpus: int, labels: dict[str, str], catalog: HardwareCatalog) -> Node:
    """A purchased node of type ``t``; its last ``mig_gpus`` GPUs are in MIG mode with no instances."""
    mig_from = t.gpus - mig_gpus
    raw: dict[str, Any] = {
        "name": name,
        "pool": t.pool or t.name,
        "labels": {**labels, **t.labels},
        "cpu_milli": t.cpu_milli,
        "memory_mib": t.memory_mib,
    }
    if t.topology:
        raw["topology"] = t.topology
        raw["gpu_model"] = t.gpu_model
        raw["gpus"] = [{"index": i, "mig": {"instances": []}} for i in range(mig_from, t.gpus)]
    else:
        raw["gpus"] = [
            {"index": i, "model": t.gpu_model, **({"mig": {"instances": []}} if i >= mig_from else {})}
            for i in range(t.gpus)
        ]
    return Node.model_validate(raw, context={"catalog": catalog})


def type_specs(types: NodeTypeCatalog, catalog: HardwareCatalog) -> list[TypeSpec]:
    """Each node type compiled as one node for the purchase MILP."""
    return [
        TypeSpec(
            name=t.name,
            cost=t.unit_cost,
            node=compile_node(node_for(t, t.name, 0, {}, catalog), catalog),
            spec=catalog.model(t.gpu_model),
        )
        for t in types.node_types
    ]


def _unservable(requests: list[Request], types: list[TypeSpec]) -> dict[Key, str]:
    """Replicas no node type can ever host (whole gangs when one member cannot), with the reason."""
    out: dict[Key, str] = {}
    for r in requests:
        if any(shape_fits(s, t) is None for s in r.shapes for t in types):
            continue
        why = "; ".join(
            f"alternative {k} on {t.name}: {shape_fits(s, t)}" for k, s in enumerate(r.shapes) for t in types
        )
        out[r.key] = (
            f"workload '{r.workload}' replica {r.replica}: no node type of the catalog can ever host it "
            f"({why})"
        )
    gangs = {r.gang for r in requests if r.gang is not None and r.key in out}
    for r in requests:
        if r.gang in gangs and r.key not in out:
            out[r.key] = (
                f"workload '{r.workload}' replica {r.replica}: its gang '{r.gang}' has a member that no "
                "node type can host"
            )
    return out


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
class _Fleet:
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


def _verify(
    inp: PlanningInput,
    fleet: _Fleet,
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
    return _placement(sub, opts, fleet.catalog, now, seconds), sub, back


#: Summed fields of a gap line.
_FIELDS = (
    "replicas", "served_by_repartition", "served_by_purchase", "unservable", "still_unplaced",
    "gpu_equivalents", "gpus_added", "nodes_added", "cost",
)  # fmt: skip


def _lines(
    groups: Iterable[tuple[str, Key]],
    outcome: dict[Key, str],
    share: dict[Key, tuple[float, float, float, float]],
) -> tuple[GapLine, ...]:
    """Per-group totals: demand, how it was served and the share of GPUs, nodes and cost added."""
    acc: dict[str, dict[str, float]] = {}
    for group, key in groups:
        line = acc.setdefault(group, dict.fromkeys(_FIELDS, 0.0))
        line["replicas"] += 1
        line[outcome[key]] += 1
        gpu_eq, gpus, nodes, cost = share.get(key, (0.0, 0.0, 0.0, 0.0))
        line["gpu_equivalents"] += gpu_eq
        line["gpus_added"] += gpus
        line["nodes_added"] += nodes
        line["cost"] += cost
    return tuple(
        GapLine(
            key=group,
            replicas=int(v["replicas"]),
            served_by_repartition=int(v["served_by_repartition"]),
            served_by_purchase=int(v["served_by_purchase"]),
            unservable=int(v["unservable"]),
            still_unplaced=int(v["still_unplaced"]),
            gpu_equivalents=round(v["gpu_equivalents"], 4),
            gpus_added=round(v["gpus_added"], 4),
            nodes_added=round(v["nodes_added"], 4),
            cost=round(v["cost"], 2),
        )
        for group, v in sorted(acc.items())
    )


def _shares(
    plan: Plan, sub: PlanningInput, back: dict[Key, Key], fleet: _Fleet
) -> dict[Key, tuple[float, float, float, float]]:
    """Each placed replica's GPU-equivalents and its share of its node's GPUs, the node and its cost."""
    nodes = sub.cluster.node_by_name
    type_of = {n.name: k for k, n in fleet.nodes}
    weight: dict[Key, tuple[str, float, float]] = {}
    totals: dict[str, tuple[float, float]] = defaultdict(lambda: (0.0, 0.0))
    for a in plan.assignments:
        node = nodes[a.node]
        eq = sum(gpu_equivalents(g, node.gpu_by_index[g.index].model, fleet.catalog) for g in a.gpus)
        cpu = a.cpu_milli / node.cpu_milli if node.cpu_milli else 0.0
        weight[back[(a.workload, a.replica)]] = (a.node, eq, cpu)
        t_eq, t_cpu = totals[a.node]
        totals[a.node] = (t_eq + eq, t_cpu + cpu)
    out = {}
    for key, (name, eq, cpu) in weight.items():
        t_eq, t_cpu = totals[name]
        part = eq / t_eq if t_eq else (cpu / t_cpu if t_cpu else 0.0)
        t = fleet.types.node_type(type_of[name])
        out[key] = (eq, part * t.gpus, part, part * t.unit_cost)
    return out


@dataclass
class _Labels:
    """Notes of a run and the phases the time limit cut short."""

    notes: list[str] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)

    def cut_short(self, phase: str, note: str) -> None:
        """Record that ``phase`` stopped at (or was skipped for) the time limit, and what that means."""
        if phase not in self.cut:
            self.cut.append(phase)
        self.notes.append(f"time limit: {note}")

    def plan(self, phase: str, plan: Plan, consequence: str) -> None:
        """Label a placement solve that stopped at its time limit."""
        if stopped_early(plan):
            limit = plan.provenance.get("time_limit_s")
            share = f"its {limit:.1f} s share" if isinstance(limit, float | int) else "its share"
            self.cut_short(phase, f"the {phase} stopped at {share} ({plan.status}); {consequence}")


@dataclass
class _Purchase:
    """What the purchase phases found: the nodes bought, the last placement check on them and the
    MILP's bound and status."""

    fleet: _Fleet
    check: Plan | None = None
    sub: PlanningInput | None = None
    back: dict[Key, Key] = field(default_factory=dict)
    waiting: list[Key] = field(default_factory=list)
    lower: float = 0.0
    solver: str = ""
    status: str = ""


@dataclass
class _Run:
    """The phases of one capacity-gap run after the fleet plan, each within its share of ``phases``."""

    inp: PlanningInput
    opts: GapOptions
    catalog: HardwareCatalog
    now: datetime | None
    phases: Phases
    labels: _Labels = field(default_factory=_Labels)
    #: The GPU models each like-for-like workload is bought for.
    keep: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def repartition(self, plan: Plan, demand: list[Key]) -> tuple[list[Key], tuple[Repartition, ...]]:
        """Re-plan with the plan held and MIG re-partitions and sharing-mode changes allowed: the demand
        still waiting and the actions, per GPU re-partitioned (per node whose mode changes), with the gap
        replicas placed there."""
        seconds = self.phases.share(REPARTITION)
        if seconds < MIN_PHASE_S:
            self.labels.cut_short(
                REPARTITION, f"no time was left for the {REPARTITION}; its demand goes to purchases"
            )
            return demand, ()
        held, back = _held(self.inp, plan, self.catalog)
        try:
            again = _placement(held, self.opts, self.catalog, self.now, seconds)
        except InvalidPlanError as exc:
            # Never act on a plan the validator rejects: without re-partitions, the purchase serves all.
            log.warning("the %s was skipped: %s", REPARTITION, exc)
            first = exc.violations[0] if exc.violations else None
            self.labels.notes.append(
                f"the {REPARTITION} produced a plan the validator rejects (a planner bug"
                + (f": {first.rule} on {first.subject}" if first else "")
                + "); it was skipped and its demand goes to purchases"
            )
            return demand, ()
        self.labels.plan(REPARTITION, again, "a longer solve may serve more demand by re-partitioning")
        left = {back[(u.workload, u.replica)] for u in gap_demand(again, held, self.now)}
        served = set(demand) - left
        # Served replicas per GPU, and per node (key GPU ``None``) for the sharing mode of the node.
        on_gpu: dict[tuple[str, int | None], list[tuple[Key, float]]] = defaultdict(list)
        for a in again.assignments:
            key = back[(a.workload, a.replica)]
            if key not in served:
                continue
            node = held.cluster.node_by_name[a.node]
            for g in a.gpus:
                eq = gpu_equivalents(g, node.gpu_by_index[g.index].model, self.catalog)
                on_gpu[(a.node, g.index)].append((key, eq))
                on_gpu[(a.node, None)].append((key, eq))
        by_gpu: dict[tuple[str, int | None], list[str]] = defaultdict(list)
        for act in again.actions:
            if act.kind.endswith("-mig") and act.node is not None and act.gpu is not None:
                by_gpu[(act.node, act.gpu)].append(f"{act.kind} {act.detail} on {act.node} GPU {act.gpu}")
            elif act.kind == SET_SHARING and act.node is not None:
                by_gpu[(act.node, None)].append(f"{act.kind} {act.to or act.detail} on {act.node}")
        actions = tuple(
            Repartition(
                node=node, gpu=gpu, actions=tuple(steps), serves=_served(self.inp, on_gpu[(node, gpu)])
            )
            for (node, gpu), steps in by_gpu.items()
        )
        return [k for k in demand if k in left], actions

    def _milp(self, requests: list[Request], specs: list[TypeSpec], seconds: float) -> PurchaseSolution:
        return solve_purchase(
            requests,
            specs,
            policy=self.inp.policy,
            time_limit_s=max(MIN_PHASE_S, min(self.opts.milp_time_limit_s, seconds)),
            threads=self.opts.num_workers,
        )

    def _check(self, out: _Purchase, keys: list[Key], seconds: float, phase: str) -> None:
        out.check, out.sub, out.back = _verify(
            self.inp, out.fleet, keys, self.opts, self.now, seconds, self.keep
        )
        self.labels.plan(phase, out.check, "replicas it left waiting may fit the purchase with more time")
        out.waiting = [out.back[(u.workload, u.replica)] for u in out.check.unplaced]

    def _configured(self, buyable: list[Request], types: NodeTypeCatalog, seconds: float) -> PurchaseSolution:
        """The purchase by the configuration LP (node types as priced columns, exact per node), as a
        :class:`PurchaseSolution`; each type is offered with MIG off and, when MIG demand exists and
        the model has MIG, with every GPU in MIG mode. Its lower bound holds for every purchase only
        without MIG demand (mixed-mode nodes are not offered), otherwise it is reported as 0."""
        t0 = time.perf_counter()
        mig_demand = any(s.kind == "mig" for r in buyable for s in r.shapes)
        offers: list[Offer] = []
        mig_of: dict[str, tuple[str, int]] = {}
        for t in types.node_types:
            variants = [0]
            if mig_demand and self.catalog.model(t.gpu_model).mig_capable:
                variants.append(t.gpus)
            for mig in variants:
                name = t.name if not mig else f"{t.name}#mig"
                node = compile_node(node_for(t, name, mig, {}, self.catalog), self.catalog)
                offers.append(Offer(name, t.unit_cost, node))
                mig_of[name] = (t.name, mig)
        problem = PlacementProblem(
            nodes=(),
            requests=tuple(buyable),
            catalog=self.catalog,
            policy=self.inp.policy,
        )
        options = RunOptions(
            time_limit_s=seconds, seed=self.opts.seed, num_workers=self.opts.num_workers, ray=self.opts.ray
        )
        found = configure_purchase(problem, options, offers, t0 + seconds)
        if found is None:
            return PurchaseSolution({}, {}, 0.0, 0.0, NO_SOLUTION, CONFIGURED, time.perf_counter() - t0)
        counts: dict[str, int] = defaultdict(int)
        migs: dict[str, int] = defaultdict(int)
        for name, n in found.counts.items():
            base, mig = mig_of[name]
            counts[base] += n
            migs[base] += n * mig
        lower = 0.0 if mig_demand or found.lower_bound is None else min(found.lower_bound, found.cost)
        return PurchaseSolution(
            dict(counts),
            {k: v for k, v in migs.items() if v},
            found.cost,
            lower,
            "OPTIMAL" if found.converged and found.cost <= lower * (1 + 1e-9) else "FEASIBLE",
            CONFIGURED,
            time.perf_counter() - t0,
        )

    def _warm(
        self,
        buyable: list[Request],
        types: NodeTypeCatalog,
        warm: tuple[Purchase, ...],
        found: PurchaseSolution,
    ) -> _Purchase | None:
        """The baseline's purchase (``warm``, re-priced with ``types``) when it costs less than the
        purchase ``found`` and the placement check places all of ``buyable`` on it; else ``None``."""
        known = {t.name for t in types.node_types}
        if not warm or any(p.node_type not in known for p in warm):
            return None
        cost = sum(p.count * types.node_type(p.node_type).unit_cost for p in warm)
        if found.status != NO_SOLUTION and cost >= found.objective:
            return None
        domains = {r.gang_domain: "purchase" for r in buyable if r.gang_domain}
        out = _Purchase(_Fleet(types, self.catalog, domains), lower=min(found.lower_bound, cost),
                        solver=f"{found.solver} + {WARM}", status="FEASIBLE")  # fmt: skip
        for p in warm:
            out.fleet.buy(p.node_type, p.count, p.mig_gpus)
        # Half the placement check's share, leaving the schedule as it is for the purchase found.
        todo = self.phases.todo
        self._check(
            out,
            [r.key for r in buyable],
            self.phases.deadline.share(todo[CHECK] / 2 / sum(todo.values())),
            CHECK,
        )
        what = ", ".join(f"{p.count} x {p.node_type}" for p in warm)
        if out.waiting:
            self.labels.notes.append(
                f"{WARM}: the baseline's purchase ({what}) leaves {len(out.waiting)} replica(s) waiting here"
            )
            return None
        self.labels.notes.append(
            f"{WARM}: the baseline's purchase ({what}, {cost:,.0f}) serves this demand and costs less than "
            f"the purchase found ({found.objective:,.0f})"
        )
        return out

    def buy(
        self,
        buyable: list[Request],
        specs: list[TypeSpec],
        types: NodeTypeCatalog,
        warm: tuple[Purchase, ...] = (),
    ) -> _Purchase:
        """The purchase MILP and the configuration LP's purchase (the cheaper is kept, the better lower
        bound reported), the placement check on the nodes bought, and repair rounds (a MILP for what
        the check leaves waiting, then a check again) while replicas wait and time remains. A ``warm``
        purchase (the baseline's) that costs less and passes the placement check is kept instead."""
        seconds = self.phases.share(PURCHASE)
        pooled = self._milp(buyable, specs, seconds / 2)
        configured = self._configured(buyable, types, seconds / 2)
        solution = pooled
        if configured.status != NO_SOLUTION and (
            pooled.status == NO_SOLUTION or configured.objective < pooled.objective
        ):
            solution = configured
        best_lower = max(pooled.lower_bound, configured.lower_bound)
        solution = replace(
            solution, lower_bound=min(best_lower, solution.objective) if solution.counts else best_lower
        )
        started = self._warm(buyable, types, warm, solution)
        if started is not None:
            return started
        domains = {r.gang_domain: "purchase" for r in buyable if r.gang_domain}
        out = _Purchase(_Fleet(types, self.catalog, domains), lower=solution.lower_bound,
                        solver=solution.solver, status=solution.status)  # fmt: skip
        keys = [r.key for r in buyable]
        within = f"the {PURCHASE} stopped at its {seconds:.1f} s share"
        if solution.status == NO_SOLUTION:
            self.labels.cut_short(PURCHASE, f"{within} with no purchase; none for {len(keys)} replica(s)")
            out.waiting = keys
            return out
        if solution.status != "OPTIMAL":
            self.labels.cut_short(PURCHASE, f"{within}, feasible; the lower bound is the LP relaxation's")
        for name, count in sorted(solution.counts.items()):
            out.fleet.buy(name, count, solution.mig_gpus.get(name, 0))
        self._check(out, keys, self.phases.share(CHECK), CHECK)
        by_key = {r.key: r for r in buyable}
        repair = self.phases.sub(REPAIR)
        milp_part = PHASE_WEIGHTS[PURCHASE] / (PHASE_WEIGHTS[PURCHASE] + PHASE_WEIGHTS[CHECK])
        for attempt in range(self.opts.repair_rounds):
            if not out.waiting:
                break
            this_round = repair.sub(1 / (self.opts.repair_rounds - attempt))
            if this_round.remaining() < 2 * MIN_PHASE_S:
                self.labels.cut_short(REPAIR, f"no time was left to {REPAIR} the purchase; "
                                              f"{len(out.waiting)} replica(s) stay unplaced")  # fmt: skip
                break
            extra = self._milp([by_key[k] for k in out.waiting], specs, this_round.share(milp_part))
            first = out.check.unplaced[0] if out.check is not None else None
            self.labels.notes.append(
                f"the placement check left {len(out.waiting)} replica(s) waiting"
                + (f" (first: '{first.workload}', {first.code}: {first.reason})" if first else "")
                + "; added "
                + (", ".join(f"{n} x {name}" for name, n in sorted(extra.counts.items())) or "nothing")
            )
            if extra.status == NO_SOLUTION:
                self.labels.cut_short(REPAIR, f"the {PURCHASE} of a repair round found no purchase in time")
                break
            for name, count in sorted(extra.counts.items()):
                out.fleet.buy(name, count, extra.mig_gpus.get(name, 0))
            self._check(out, keys, this_round.remaining(), REPAIR)
        return out


def capacity_gap(
    inp: PlanningInput,
    types: NodeTypeCatalog,
    opts: GapOptions | None = None,
    *,
    baseline: Plan | None = None,
    catalog: HardwareCatalog | None = None,
    deadline: Deadline | None = None,
    warm: tuple[Purchase, ...] = (),
) -> CapacityGap:
    """The re-partitions and the cheapest purchase that serve the demand the fleet leaves waiting.

    The whole run keeps within ``deadline`` (by default ``opts.time_limit_s`` from now): each phase
    takes its share of the time left (:data:`PHASE_WEIGHTS`), and a phase the time limit stops keeps
    its best result so far, named in ``cut_short`` and explained in ``notes``. ``baseline`` is the
    fleet plan when the caller has made it already (:func:`plan_fleet`); ``warm`` is a purchase to try
    first (a scenario's baseline purchase), kept when it is cheaper and the placement check passes.
    """
    opts = opts or GapOptions()
    catalog = catalog or default_catalog()
    deadline = deadline or Deadline.after(opts.time_limit_s)
    t0 = time.perf_counter()
    plan = baseline or plan_fleet(inp, opts, deadline, catalog)
    now = _now(plan, opts.now)
    run = _Run(inp, opts, catalog, now, _phases(inp, deadline, fleet=False))
    run.labels.plan(FLEET, plan, "the gap demand may count replicas a longer solve would place")
    demand = [(u.workload, u.replica) for u in gap_demand(plan, inp, now)]
    outcome: dict[Key, str] = {}
    rest = list(demand)
    actions: tuple[Repartition, ...] = ()
    if demand and REPARTITION in run.phases.todo:
        rest, actions = run.repartition(plan, demand)
        outcome.update({k: "served_by_repartition" for k in demand if k not in set(rest)})
    elif demand and inp.policy.mig.allow_repartition:
        run.labels.notes.append(
            "the policy already allows MIG re-partitions (and sharing-mode changes when it allows them); "
            "the fleet plan includes them"
        )

    specs = type_specs(types, catalog)
    problem = compile_problem(inp, catalog, now or datetime.now().astimezone())
    by_key = {r.key: r for r in problem.requests}
    requests = like_for_like(inp, [by_key[k] for k in rest], opts)
    run.keep = _keep(requests, by_key)
    bad = _unservable(requests, specs)
    unservable = tuple(
        Unservable(
            workload=k[0], replica=k[1], team=by_key[k].team, tier=by_key[k].tier,
            message=msg + (
                f" (like-for-like: bought only as {', '.join(run.keep[k[0]])}; "
                "--allow-other-models lets it move class)" if k[0] in run.keep else ""
            ),
        )
        for k, msg in sorted(bad.items())
    )  # fmt: skip
    outcome.update(dict.fromkeys(bad, "unservable"))
    buyable = [r for r in requests if r.key not in bad]

    purchases: tuple[Purchase, ...] = ()
    share: dict[Key, tuple[float, float, float, float]] = {}
    bought = _Purchase(_Fleet(types, catalog, {}))
    if buyable:
        bought = run.buy(buyable, specs, types, warm)
        if bought.check is not None and bought.sub is not None:
            share = _shares(bought.check, bought.sub, bought.back, bought.fleet)
            purchases = _purchases(bought, inp)
        keys = [r.key for r in buyable]
        outcome.update({k: "served_by_purchase" for k in keys if k in share})
        outcome.update({k: "still_unplaced" for k in keys if k not in share})
    counts = {k: outcome.get(k, "unservable") for k in demand}
    cost = sum(p.cost for p in purchases)
    moves = _class_moves(inp, bought, by_key, opts) if purchases else ()
    return CapacityGap(
        demand_replicas=len(demand),
        served_by_repartition=sum(1 for v in counts.values() if v == "served_by_repartition"),
        served_by_purchase=sum(1 for v in counts.values() if v == "served_by_purchase"),
        repartition_actions=tuple(step for r in actions for step in r.actions),
        repartitions=actions,
        purchases=purchases,
        nodes_added=sum(p.count for p in purchases),
        gpus_added=sum(p.gpus for p in purchases),
        cost=round(cost, 2),
        currency=types.currency,
        lower_bound=round(bought.lower, 2),
        gap=round(max(0.0, cost - bought.lower) / cost, 6) if cost > 0 else 0.0,
        max_lead_time_days=max((p.lead_time_days for p in purchases), default=0),
        verified=not bought.waiting,
        still_unplaced=len(bought.waiting),
        solver=bought.solver,
        solver_status=bought.status,
        wall_s=round(time.perf_counter() - t0, 3),
        by_tier=_lines(((by_key[k].tier, k) for k in demand), counts, share),
        by_team=_lines(((by_key[k].team, k) for k in demand), counts, share),
        unservable=unservable,
        cut_short=tuple(run.labels.cut),
        notes=tuple(run.labels.notes),
        inputs_sha256=inputs_digest(inp),
        example_prices=types.example_prices,
        price_source=EXAMPLE_SOURCE if types.example_prices else types.note or "the given node-type catalog",
        allow_other_models=("*",) if opts.allow_other_models else tuple(sorted(opts.other_models_for)),
        class_moves=moves,
    )


def _keep(requests: list[Request], by_key: dict[Key, Request]) -> dict[str, tuple[str, ...]]:
    """The GPU models each workload whose shapes :func:`like_for_like` narrowed is kept to."""
    keep: dict[str, set[str]] = defaultdict(set)
    for r in requests:
        for s, before in zip(r.shapes, by_key[r.key].shapes, strict=True):
            if s.models != before.models and s.models:
                keep[r.workload] |= s.models
    return {w: tuple(sorted(m)) for w, m in keep.items()}


def _served(inp: PlanningInput, placed: Iterable[tuple[Key, float]]) -> tuple[Served, ...]:
    """Replicas per workload with their GPU-equivalents and the GPU-hours those give (:data:`DAY_H`
    hours for a workload without ``duration_s``)."""
    acc: dict[str, list[float]] = {}
    for (wid, _), eq in placed:
        line = acc.setdefault(wid, [0.0, 0.0])
        line[0] += 1
        line[1] += eq
    out = []
    for wid, (n, eq) in sorted(acc.items()):
        w = inp.workload_by_id[wid]
        hours = w.duration_s / 3600 if w.duration_s else DAY_H
        out.append(Served(workload=wid, team=w.team, tier=w.tier, replicas=int(n),
                          gpu_equivalents=round(eq, 4), gpu_hours=round(eq * hours, 2)))  # fmt: skip
    return tuple(out)


def _placed_eq(bought: _Purchase) -> dict[str, list[tuple[Key, float]]]:
    """Per purchased node, the original replica keys the check placed there with their
    GPU-equivalents."""
    out: dict[str, list[tuple[Key, float]]] = defaultdict(list)
    if bought.check is None or bought.sub is None:
        return out
    nodes = bought.sub.cluster.node_by_name
    for a in bought.check.assignments:
        node = nodes[a.node]
        eq = sum(gpu_equivalents(g, node.gpu_by_index[g.index].model, bought.fleet.catalog) for g in a.gpus)
        out[a.node].append((bought.back[(a.workload, a.replica)], eq))
    return out


def _class_moves(
    inp: PlanningInput, bought: _Purchase, by_key: dict[Key, Request], opts: GapOptions
) -> tuple[ClassMove, ...]:
    """Workloads allowed other models that the purchase serves outside their own class."""
    model_of = {n.name: t_name for t_name, n in bought.fleet.nodes}
    moved: dict[tuple[str, str], tuple[set[str], int]] = {}
    for node, placed in _placed_eq(bought).items():
        model = bought.fleet.types.node_type(model_of[node]).gpu_model
        for key, _ in placed:
            r = by_key[key]
            if not opts.other_models(r.workload):
                continue
            home = {m for s in r.shapes if not s.named_models for m in home_models(inp, s, r.workload)}
            if not home or model in home:
                continue
            models, n = moved.get((r.workload, model), (home, 0))
            moved[(r.workload, model)] = (models, n + 1)
    return tuple(
        ClassMove(workload=w, replicas=n, from_models=tuple(sorted(models)), to_model=m)
        for (w, m), (models, n) in sorted(moved.items())
    )


def _purchases(bought: _Purchase, inp: PlanningInput) -> tuple[Purchase, ...]:
    """Purchased nodes per type, with the workloads they serve and their idle GPUs (nodes the check
    left empty are not bought)."""
    placed = _placed_eq(bought)
    by_type: dict[str, list[str]] = defaultdict(list)
    for type_name, node in bought.fleet.nodes:
        if placed.get(node.name):
            by_type[type_name].append(node.name)
    out = []
    for name, nodes in sorted(by_type.items()):
        t = bought.fleet.types.node_type(name)
        on = [p for n in nodes for p in placed[n]]
        node_of = {n.name: n for _, n in bought.fleet.nodes}
        mig = sum(1 for n in nodes for g in node_of[n].gpus if g.mig is not None)
        serves = _served(inp, on)
        out.append(
            Purchase(
                node_type=name,
                gpu_model=t.gpu_model,
                count=len(nodes),
                gpus=len(nodes) * t.gpus,
                gpus_idle=round(max(0.0, len(nodes) * t.gpus - sum(eq for _, eq in on)), 4),
                mig_gpus=mig,
                cost=round(len(nodes) * t.unit_cost, 2),
                lead_time_days=t.lead_time_days,
                nodes=tuple(nodes),
                serves=serves,
                gpu_hours=round(sum(s.gpu_hours for s in serves), 2),
            )
        )
    return tuple(out)

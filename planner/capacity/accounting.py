"""What a purchase is charged to: each placed replica's share of its node's GPUs and cost, totals per
tier and per team, the purchases per node type with the workloads they serve, and the workloads that
move GPU class. Pure bookkeeping on the plans the run made.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from gpuplan.models.capacity import ClassMove, GapLine, Purchase, Served
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.planner.capacity.check import Bought, Fleet
from gpuplan.planner.capacity.demand import Key, home_models, names_models
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.pipeline.metrics import gpu_equivalents
from gpuplan.solvers.problem import Request

#: Hours a workload without ``duration_s`` counts in the GPU-hours a purchase unlocks (one day).
DAY_H = 24.0

#: Summed fields of a gap line.
_FIELDS = (
    "replicas", "served_by_repartition", "served_by_purchase", "unservable", "still_unplaced",
    "gpu_equivalents", "gpus_added", "node_share", "cost",
)  # fmt: skip


@dataclass(frozen=True)
class Share:
    """What one placed replica is charged: its GPU-equivalents, its share of its new node's GPUs, of
    the node itself and of its price, and the node's name."""

    gpu_equivalents: float
    gpus: float
    node_share: float
    cost: float
    node: str


def gap_lines(
    groups: Iterable[tuple[str, Key]], outcome: dict[Key, str], share: dict[Key, Share]
) -> tuple[GapLine, ...]:
    """Per-group totals: demand, how it was served, the share of GPUs, nodes and cost added, and the
    new nodes its replicas are on."""
    acc: dict[str, dict[str, float]] = {}
    nodes: dict[str, set[str]] = defaultdict(set)
    for group, key in groups:
        line = acc.setdefault(group, dict.fromkeys(_FIELDS, 0.0))
        line["replicas"] += 1
        line[outcome[key]] += 1
        mine = share.get(key)
        if mine is None:
            continue
        line["gpu_equivalents"] += mine.gpu_equivalents
        line["gpus_added"] += mine.gpus
        line["node_share"] += mine.node_share
        line["cost"] += mine.cost
        nodes[group].add(mine.node)
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
            nodes_added=len(nodes[group]),
            node_share=round(v["node_share"], 4),
            cost=round(v["cost"], 2),
        )
        for group, v in sorted(acc.items())
    )


def node_shares(plan: Plan, sub: PlanningInput, back: dict[Key, Key], fleet: Fleet) -> dict[Key, Share]:
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
        out[key] = Share(eq, part * t.gpus, part, part * t.unit_cost, name)
    return out


def served_by(inp: PlanningInput, placed: Iterable[tuple[Key, float]]) -> tuple[Served, ...]:
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


def _placed_eq(bought: Bought) -> dict[str, list[tuple[Key, float]]]:
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


def class_moves(
    inp: PlanningInput, bought: Bought, by_key: dict[Key, Request], opts: GapOptions
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
            home = {m for s in r.shapes if not names_models(s) for m in home_models(inp, s, r.workload)}
            if not home or model in home:
                continue
            models, n = moved.get((r.workload, model), (home, 0))
            moved[(r.workload, model)] = (models, n + 1)
    return tuple(
        ClassMove(workload=w, replicas=n, from_models=tuple(sorted(models)), to_model=m)
        for (w, m), (models, n) in sorted(moved.items())
    )


def use_note(gpus: int, used: float, min_use: float) -> str:
    """What a purchase line says when its replicas use less than ``min_use`` of its ``gpus`` (empty
    otherwise)."""
    if gpus == 0 or used >= min_use * gpus:
        return ""
    return (
        f"serves {round(used, 2):g} of {gpus} GPUs ({used / gpus:.0%}, below the {min_use:.0%} minimum use): "
        "consider waiting, renting or re-partitioning"
    )


def purchased(bought: Bought, inp: PlanningInput, min_use: float) -> tuple[Purchase, ...]:
    """Purchased nodes per type, with the workloads they serve, their idle GPUs and a note when they
    serve less than ``min_use`` of their GPUs (nodes the check left empty are not bought)."""
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
        serves = served_by(inp, on)
        gpus, used = len(nodes) * t.gpus, sum(eq for _, eq in on)
        out.append(
            Purchase(
                node_type=name,
                gpu_model=t.gpu_model,
                count=len(nodes),
                unit_cost=t.unit_cost,
                gpus=gpus,
                gpus_idle=round(max(0.0, gpus - used), 4),
                mig_gpus=mig,
                cost=round(len(nodes) * t.unit_cost, 2),
                lead_time_days=t.lead_time_days,
                nodes=tuple(nodes),
                serves=serves,
                gpu_hours=round(sum(s.gpu_hours for s in serves), 2),
                use_note=use_note(gpus, used, min_use),
            )
        )
    return tuple(out)

"""Plans and capacity gaps as tables (pandas DataFrames), one per sheet, and as CSV files.

Every table has snake_case column names and machine-friendly values, so that a CSV (or a DataFrame)
is read by programs: numbers are stored as numbers (integer columns as integers), text is readable
words (never JSON). The workbooks (:mod:`.plan_book`, :mod:`.capacity_book`) show the same values
under human headers with units and number formats.

Names come from the input (workload ids, node names, teams), so CSV text cells that a spreadsheet
would read as a formula get a leading ``'`` (the OWASP advice against CSV injection).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from gpuplan.models.base import InputError
from gpuplan.models.capacity import CapacityReport, NodeTypeCatalog, Served
from gpuplan.models.cluster import Cluster, Node
from gpuplan.models.hardware import MILLI_PER_GPU, HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Counterfactual, Plan, Unplaced
from gpuplan.models.workload import where
from gpuplan.planner.capacity.scenarios import scenario_row
from gpuplan.planner.explain.team_view import team_plan
from gpuplan.planner.pipeline.metrics import gpu_equivalents, gpu_memory_held

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

log = logging.getLogger(__name__)

#: The tables (and CSV files) in order.
SHEETS: tuple[str, ...] = (
    "Summary", "Placements", "Nodes", "Pools", "Fragmentation", "Waiting", "CapacityGap", "Teams",
    "Scenarios",
)  # fmt: skip

#: How a text cell starts when a spreadsheet would evaluate it as a formula (or a DDE command).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

#: Hours in a year, for amortising purchase prices into GPU-hour rates.
HOURS_PER_YEAR = 8760

_PERCENT = ("utilisation", "share", "gap", "rate", "fraction")
_MONEY = ("cost", "lower_bound", "price", "unit_cost")

#: The Summary's unit of a ratio (shown as a percentage in the workbook) and its total rows.
FRACTION = "fraction"
TOTAL = "total"

#: What a table without rows says in a workbook: why it is empty and how to fill it.
EMPTY_HINTS: dict[str, str] = {
    "Placements": "The plan places no replica.",
    "Nodes": "No GPU to show: export with the plan's inputs (--cluster C --workloads W).",
    "Pools": "No GPU to show: export with the plan's inputs (--cluster C --workloads W).",
    "Fragmentation": "Free capacity per node needs the plan's inputs: export with --cluster C --workloads W.",
    "Waiting": "No replica waits in this plan.",
    "CapacityGap": "No capacity gap in this export: run `gpuplan capacity-gap --cluster C --workloads W "
    "--out gap.json` on the plan's inputs, then `gpuplan export ... --gap gap.json`.",
    "Teams": "No placed replica to show back: export with the plan's inputs (--cluster C --workloads W).",
    "Scenarios": "No scenarios in this export: run `gpuplan capacity-gap --cluster C --workloads W "
    "--scenarios S --out gap.json`, then `gpuplan export ... --gap gap.json`.",
}

_COLUMNS: dict[str, tuple[str, ...]] = {
    "Placements": (
        "workload", "replica", "team", "tier", "node", "pool", "gpu_model", "kind", "gpus", "mig_profile",
        "milli", "gpu_equivalents", "cpu_milli", "memory_mib", "gpu_memory_mib", "alternative",
    ),
    "Nodes": (
        "level", "node", "pool", "gpu", "model", "mig_layout", "used_slices", "free_slices", "used_milli",
        "free_milli", "used_gpu_memory_mib", "free_gpu_memory_mib", "gpu_equivalents_used", "utilisation",
    ),
    "Pools": ("pool", "nodes", "gpus", "gpu_equivalents_used", "utilisation"),
    "Fragmentation": (
        "node", "pool", "free_whole_gpus", "partly_used_gpus", "stranded_gpu_equivalents", "free_mig_slices",
        "free_cpu_milli", "free_memory_mib",
    ),
    "Waiting": (
        "workload", "replica", "team", "tier", "code", "reason", "predicted_start", "wait_h", "reserved",
        "resources", "alternatives", "best_counterfactual", "counterfactuals",
    ),
    "CapacityGap": (
        "section", "key", "replicas", "served_by_repartition", "served_by_purchase", "unservable",
        "still_unplaced", "gpu_equivalents", "nodes_added", "unit_cost", "gpus_added", "gpus_idle",
        "gpus_charged", "cost", "lead_time_days", "gpu_hours", "detail",
    ),
    "Teams": (
        "team", "tier", "replicas_placed", "gpu_equivalents", "hours", "gpu_hours", "share", "cost",
    ),
    "Scenarios": (
        "scenario", "status", "input_replicas", "demand_replicas", "served_by_repartition",
        "served_by_purchase", "unservable",
        "nodes_added", "gpus_added", "cost", "lower_bound", "gap", "max_lead_time_days", "verified",
        "cut_short", "wall_s",
    ),
    "Summary": ("section", "metric", "value", "unit"),
}  # fmt: skip


def is_percent(name: str) -> bool:
    return any(name == p or name.endswith(p) for p in _PERCENT)


def is_money(name: str) -> bool:
    return name.startswith(_MONEY)


class _Context:
    """What the tables read: the plan and, when given, the inputs, the gap report and node types."""

    def __init__(
        self,
        plan: Plan,
        inp: PlanningInput | None,
        report: CapacityReport | None,
        types: NodeTypeCatalog | None,
        catalog: HardwareCatalog,
        period_h: float,
    ) -> None:
        self.plan = plan
        self.inp = inp
        self.report = report
        self.types = types
        self.catalog = catalog
        self.period_h = period_h
        self.cluster: Cluster | None = inp.cluster if inp else None

    def node(self, name: str) -> Node | None:
        return self.cluster.node_by_name.get(name) if self.cluster else None

    def model(self, node: str, gpu: int) -> str | None:
        n = self.node(node)
        g = n.gpu_by_index.get(gpu) if n else None
        return self.catalog.canonical(g.model) if g else None

    def team_tier(self, workload: str) -> tuple[str, str]:
        w = self.inp.workload_by_id.get(workload) if self.inp else None
        return (w.team, w.tier) if w else ("", "")

    def equivalents(self, node: str, gpu: Any) -> float:
        model = self.model(node, gpu.index)
        if model is None:
            return 1.0 if gpu.milli is None and gpu.mig_profile is None else (gpu.milli or 0) / MILLI_PER_GPU
        return gpu_equivalents(gpu, model, self.catalog)


def _placements(ctx: _Context) -> list[dict[str, Any]]:
    rows = []
    for a in ctx.plan.assignments:
        team, tier = ctx.team_tier(a.workload)
        node = ctx.node(a.node)
        kinds = {g.kind for g in a.gpus} or {"cpu"}
        rows.append(
            {
                "workload": a.workload,
                "replica": a.replica,
                "team": team,
                "tier": tier,
                "node": a.node,
                "pool": (node.pool or "") if node else "",
                "gpu_model": ctx.model(a.node, a.gpus[0].index) or "" if a.gpus else "",
                "kind": "/".join(sorted(kinds)),
                # One GPU index is a number; several are a list, as text.
                "gpus": a.gpus[0].index if len(a.gpus) == 1 else ",".join(str(g.index) for g in a.gpus),
                "mig_profile": ",".join(f"{g.mig_profile}@{g.mig_start}" for g in a.gpus if g.mig_profile),
                "milli": sum(g.milli or 0 for g in a.gpus),
                "gpu_equivalents": round(sum(ctx.equivalents(a.node, g) for g in a.gpus), 6),
                "cpu_milli": a.cpu_milli,
                "memory_mib": a.memory_mib,
                "gpu_memory_mib": a.gpu_memory_mib,
                "alternative": a.alternative,
            }
        )
    return rows


def _gpu_use(ctx: _Context) -> dict[tuple[str, int], list[Any]]:
    use: dict[tuple[str, int], list[Any]] = defaultdict(list)
    for a in ctx.plan.assignments:
        for g in a.gpus:
            use[(a.node, g.index)].append(g)
    return use


def _gpu_memory(ctx: _Context) -> dict[tuple[str, int], int]:
    """GPU memory (MiB) the plan's assignments hold per GPU of a known model."""
    held: dict[tuple[str, int], int] = defaultdict(int)
    for a in ctx.plan.assignments:
        for g in a.gpus:
            model = ctx.model(a.node, g.index)
            if model is not None:
                held[(a.node, g.index)] += gpu_memory_held(g, model, a.gpu_memory_mib, ctx.catalog)
    return held


def _layouts(ctx: _Context) -> dict[tuple[str, int], tuple[tuple[str, int], ...]]:
    out: dict[tuple[str, int], tuple[tuple[str, int], ...]] = {}
    if ctx.cluster:
        for n in ctx.cluster.nodes:
            for g in n.gpus:
                if g.mig is not None:
                    out[(n.name, g.index)] = tuple((i.profile, i.start) for i in g.mig.instances)
    for lay in ctx.plan.mig_layouts:
        out[(lay.node, lay.gpu)] = tuple((i.profile, i.start) for i in lay.instances)
    return out


def _gpu_rows(ctx: _Context) -> list[dict[str, Any]]:
    """One row per GPU: MIG layout, used/free memory slices (MIG) or milli (shared), utilisation."""
    use, layouts, memory = _gpu_use(ctx), _layouts(ctx), _gpu_memory(ctx)
    keys = sorted({(n.name, g.index) for n in ctx.cluster.nodes for g in n.gpus} if ctx.cluster else set(use))
    rows = []
    for node_name, index in keys:
        node, model = ctx.node(node_name), ctx.model(node_name, index)
        parts = use.get((node_name, index), [])
        eq = sum(ctx.equivalents(node_name, g) for g in parts)
        row: dict[str, Any] = {
            "level": "gpu", "node": node_name, "pool": (node.pool or "") if node else "", "gpu": index,
            "model": model or "", "mig_layout": "", "used_slices": None, "free_slices": None,
            "used_milli": None, "free_milli": None, "used_gpu_memory_mib": None, "free_gpu_memory_mib": None,
            "gpu_equivalents_used": round(eq, 6), "utilisation": round(min(eq, 1.0), 6),
        }  # fmt: skip
        if model is not None:
            row["used_gpu_memory_mib"] = memory.get((node_name, index), 0)
            row["free_gpu_memory_mib"] = ctx.catalog.model(model).memory_mib - row["used_gpu_memory_mib"]
        layout = layouts.get((node_name, index))
        if layout is not None and model is not None:
            spec = ctx.catalog.model(model)
            row["mig_layout"] = (
                " ".join(f"{p}@{s}" for p, s in sorted(layout, key=lambda x: x[1])) or "(empty)"
            )
            used = {(g.mig_profile, g.mig_start) for g in parts}
            row["used_slices"] = sum(spec.profile(p).size_at(s) for p, s in used if p and s is not None)
            row["free_slices"] = spec.memory_slices - row["used_slices"]
        else:
            used_milli = sum(MILLI_PER_GPU if g.milli is None else g.milli for g in parts)
            row["used_milli"] = used_milli
            row["free_milli"] = MILLI_PER_GPU - used_milli if model is not None or node is None else None
        rows.append(row)
    return rows


def _nodes(ctx: _Context, gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in gpus:
        by_node[r["node"]].append(r)
    rows = []
    for name, rs in by_node.items():
        eq = sum(r["gpu_equivalents_used"] for r in rs)
        models = sorted({r["model"] for r in rs if r["model"]})
        rows.append(
            {
                "level": "node",
                "node": name,
                "pool": rs[0]["pool"],
                "gpu": None,
                "model": ",".join(models),
                "mig_layout": "",
                "used_slices": None,
                "free_slices": None,
                "used_milli": None,
                "free_milli": None,
                "used_gpu_memory_mib": None,
                "free_gpu_memory_mib": None,
                "gpu_equivalents_used": round(eq, 6),
                "utilisation": round(eq / len(rs), 6) if rs else 0.0,
            }
        )
        rows.extend(rs)
    return rows


def _pools(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    acc: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in gpus:
        acc[r["pool"] or "(none)"].append(r)
    return [
        {
            "pool": pool,
            "nodes": len({r["node"] for r in rs}),
            "gpus": len(rs),
            "gpu_equivalents_used": round(sum(r["gpu_equivalents_used"] for r in rs), 6),
            "utilisation": round(sum(r["gpu_equivalents_used"] for r in rs) / len(rs), 6),
        }
        for pool, rs in sorted(acc.items())
    ]


def _fragmentation(ctx: _Context, gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Free capacity per node: whole free GPUs, capacity stranded on partly used GPUs, CPU, memory."""
    if ctx.cluster is None:
        return []
    used_cpu: dict[str, int] = defaultdict(int)
    used_mem: dict[str, int] = defaultdict(int)
    for a in ctx.plan.assignments:
        used_cpu[a.node] += a.cpu_milli
        used_mem[a.node] += a.memory_mib
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in gpus:
        by_node[r["node"]].append(r)
    rows = []
    for n in ctx.cluster.nodes:
        rs = by_node.get(n.name, [])
        partly = [r for r in rs if 0 < r["gpu_equivalents_used"] < 1]
        rows.append(
            {
                "node": n.name,
                "pool": n.pool or "",
                "free_whole_gpus": sum(1 for r in rs if r["gpu_equivalents_used"] == 0),
                "partly_used_gpus": len(partly),
                "stranded_gpu_equivalents": round(sum(1 - r["gpu_equivalents_used"] for r in partly), 6),
                "free_mig_slices": sum(r["free_slices"] or 0 for r in rs),
                "free_cpu_milli": n.cpu_milli - used_cpu[n.name],
                "free_memory_mib": n.memory_mib - used_mem[n.name],
            }
        )
    return rows


def _counterfactual_text(c: Counterfactual) -> str:
    """A counterfactual in words: the change, where the replica would then run, how it was checked."""
    then = f"; it then runs on {where(c.placement.node, c.placement.gpus, 'short')}" if c.placement else ""
    check = f"verified by a {c.verified_by} re-solve" if c.verified and c.verified_by else "not verified"
    return f"{c.summary}{then} ({check}; disruption {c.disruption}, cost {c.cost:g})"


def _wait_h(plan: Plan, u: Unplaced) -> float | None:
    """Hours from the plan's time to the replica's predicted start."""
    stamp = plan.provenance.get("now")
    if u.predicted_start is None or not isinstance(stamp, str):
        return None
    delta = datetime.fromisoformat(u.predicted_start) - datetime.fromisoformat(stamp)
    return round(delta.total_seconds() / 3600, 2)


def _waiting(ctx: _Context) -> list[dict[str, Any]]:
    """Waiting replicas in words: reason code and sentence, predicted start, reservation, each
    alternative's reason, and the best counterfactual (the plan ranks them, best first)."""
    rows = []
    for u in ctx.plan.unplaced:
        team, tier = ctx.team_tier(u.workload)
        rows.append(
            {
                "workload": u.workload,
                "replica": u.replica,
                "team": team,
                "tier": tier,
                "code": u.code,
                "reason": u.reason,
                "predicted_start": u.predicted_start or "",
                "wait_h": _wait_h(ctx.plan, u),
                "reserved": where(u.reserved_node, u.reserved_gpus, "short") if u.reserved_node else "",
                "resources": ", ".join(u.resources),
                "alternatives": "; ".join(
                    f"alternative {d.alternative}: {d.code}, {d.reason}" for d in u.details
                )
                if len(u.details) > 1
                else "",
                "best_counterfactual": _counterfactual_text(u.counterfactuals[0])
                if u.counterfactuals
                else "",
                "counterfactuals": len(u.counterfactuals),
            }
        )
    return rows


def _serves(items: tuple[Served, ...]) -> str:
    """The workloads a purchase or re-partition serves, with team and tier (``-`` for none)."""
    return "; ".join(f"{s.workload} x{s.replicas} ({s.team}/{s.tier})" for s in items) or "-"


def _gap(ctx: _Context) -> list[dict[str, Any]]:
    """The CapacityGap table: the total and what its lower bound covers, one row per purchase (unit
    price, whole nodes and GPUs, idle GPUs, a note when it serves little), the tiers and teams with
    their shares of GPUs and cost, re-partitions, class moves, unservable replicas and notes."""
    if ctx.report is None:
        return []
    gap = ctx.report.gap
    rows: list[dict[str, Any]] = [
        {
            "section": "total", "key": "all", "replicas": gap.demand_replicas,
            "served_by_repartition": gap.served_by_repartition, "served_by_purchase": gap.served_by_purchase,
            "unservable": len(gap.unservable),
            "still_unplaced": gap.still_unplaced, "nodes_added": gap.nodes_added,
            "gpus_added": gap.gpus_added,
            "cost": gap.cost, "lead_time_days": gap.max_lead_time_days,
            "detail": f"{'verified' if gap.verified else 'NOT verified'} by placement"
            + (f"; cut short by the time limit: {', '.join(gap.cut_short)}" if gap.cut_short else ""),
        },
        {"section": "bound", "key": "lower bound", "cost": gap.lower_bound,
         "detail": gap.bound_note or "a lower bound on the cost of serving the demand"},
    ]  # fmt: skip
    for p in gap.purchases:
        rows.append(
            {
                "section": "purchase",
                "key": p.node_type,
                "nodes_added": p.count,
                "unit_cost": p.unit_cost,
                "gpus_added": p.gpus,
                "gpus_idle": p.gpus_idle,
                "cost": p.cost,
                "lead_time_days": p.lead_time_days,
                "gpu_hours": p.gpu_hours,
                "detail": (f"LOW USE: {p.use_note}; " if p.use_note else "")
                + f"{p.gpu_model}: {' '.join(p.nodes)}; serves {_serves(p.serves)}",
            }
        )
    for section, lines in (("tier", gap.by_tier), ("team", gap.by_team)):
        rows.extend(
            {
                "section": section, "key": line.key, "replicas": line.replicas,
                "served_by_repartition": line.served_by_repartition,
                "served_by_purchase": line.served_by_purchase, "unservable": line.unservable,
                "still_unplaced": line.still_unplaced, "gpu_equivalents": line.gpu_equivalents,
                "gpus_charged": line.gpus_added, "cost": line.cost,
            }
            for line in lines
        )  # fmt: skip
    if gap.repartitions:
        rows.extend(
            {
                "section": "repartition",
                "key": f"{r.node} GPU {r.gpu}" if r.gpu is not None else r.node,
                "detail": f"{', '.join(r.actions)}; frees room for {_serves(r.serves)}",
            }
            for r in gap.repartitions
        )
    else:
        rows.extend({"section": "repartition", "key": "", "detail": a} for a in gap.repartition_actions)
    rows.extend(
        {"section": "class move", "key": m.workload, "replicas": m.replicas,
         "detail": f"from {'|'.join(m.from_models)} to {m.to_model}"}
        for m in gap.class_moves
    )  # fmt: skip
    rows.extend(
        {"section": "unservable", "key": f"{u.workload}#{u.replica}", "detail": u.message}
        for u in gap.unservable
    )
    rows.extend({"section": "note", "key": "", "detail": n} for n in gap.notes)
    if gap.price_source:
        rows.append({"section": "prices", "key": "source", "detail": gap.price_source})
    return rows


def gpu_hour_rates(types: NodeTypeCatalog | None, catalog: HardwareCatalog) -> dict[str, float]:
    """Amortised price of one GPU-hour per GPU model (cheapest node type offering it)."""
    rates: dict[str, float] = {}
    if types is None:
        return rates
    hours = types.amortisation_years * HOURS_PER_YEAR
    for t in types.node_types:
        model = catalog.canonical(t.gpu_model)
        rate = t.unit_cost / t.gpus / hours
        rates[model] = min(rate, rates.get(model, rate))
    return rates


def _teams(ctx: _Context, placements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Showback: GPU-hours per team and tier (expected duration, else the period) and cost share."""
    rates = gpu_hour_rates(ctx.types, ctx.catalog)
    acc: dict[tuple[str, str], dict[str, float]] = {}
    for p in placements:
        w = ctx.inp.workload_by_id.get(p["workload"]) if ctx.inp else None
        hours = (w.duration_s / 3600) if w is not None and w.duration_s is not None else ctx.period_h
        line = acc.setdefault(
            (p["team"], p["tier"]),
            {"replicas_placed": 0, "gpu_equivalents": 0.0, "hours": 0.0, "gpu_hours": 0.0, "cost": 0.0},
        )
        line["replicas_placed"] += 1
        line["gpu_equivalents"] += p["gpu_equivalents"]
        line["hours"] += hours
        line["gpu_hours"] += p["gpu_equivalents"] * hours
        line["cost"] += p["gpu_equivalents"] * hours * rates.get(p["gpu_model"], 0.0)
    total = sum(v["gpu_hours"] for v in acc.values())
    return [
        {
            "team": team,
            "tier": tier,
            "replicas_placed": int(v["replicas_placed"]),
            "gpu_equivalents": round(v["gpu_equivalents"], 6),
            "hours": round(v["hours"], 4),
            "gpu_hours": round(v["gpu_hours"], 4),
            "share": round(v["gpu_hours"] / total, 6) if total else 0.0,
            "cost": round(v["cost"], 2),
        }
        for (team, tier), v in sorted(acc.items())
    ]


def _unit(name: str, currency: str) -> str:
    """The unit of a Summary number, from its name (a ratio is a ``fraction``, money the currency)."""
    if is_percent(name):
        return FRACTION
    if is_money(name):
        return currency
    for part, unit in (("_days", "days"), ("_s", "seconds"), ("_mib", "MiB")):
        if name.endswith(part):
            return unit
    for part, unit in (("gpus", "GPUs"), ("nodes", "nodes"), ("gpu_hours", "GPU-hours")):
        if part in name:
            return unit
    if "replicas" in name or name.startswith("served") or name in ("unservable", "still_unplaced"):
        return "replicas"
    return ""


def _number(value: Any) -> Any:
    """A whole float as an integer (counts arrive as floats in the plan's metrics)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _by_tier(ctx: _Context) -> tuple[Counter[str], Counter[str]]:
    """Replicas placed and waiting per tier (tiers in the policy's order when the inputs are given)."""
    placed = Counter(ctx.team_tier(a.workload)[1] or "(unknown tier)" for a in ctx.plan.assignments)
    waiting = Counter(ctx.team_tier(u.workload)[1] or "(unknown tier)" for u in ctx.plan.unplaced)
    order = [t.name for t in ctx.inp.policy.tiers] if ctx.inp else []
    tiers = sorted(
        set(placed) | set(waiting), key=lambda t: (t not in order, order.index(t) if t in order else 0, t)
    )
    return Counter({t: placed[t] for t in tiers}), Counter({t: waiting[t] for t in tiers})


def _summary(ctx: _Context, teams: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The plan's headline numbers by section, each with its unit; replicas placed and waiting per
    tier with their totals; the whole fleet's showback (``teams``) and the capacity gap when given."""
    plan = ctx.plan
    rows: list[tuple[str, str, Any]] = [
        ("plan", "status", plan.status.value),
        ("plan", "solver", plan.solver.name),
        ("plan", "objective", plan.solver.objective),
        ("plan", "best_bound", plan.solver.best_bound),
        ("plan", "solver_gap", plan.solver.gap),
        ("plan", "wall_s", plan.solver.wall_s),
        ("plan", "actions", len(plan.actions)),
    ]
    for section, counts in zip(("replicas placed", "replicas waiting"), _by_tier(ctx), strict=True):
        rows.extend((section, tier, n) for tier, n in counts.items())
        rows.append((section, TOTAL, counts.total()))
    # The per-tier counts are the blocks above.
    rows.extend(
        ("fleet", k, v) for k, v in sorted(plan.metrics.items()) if not k.startswith(("placed_", "unplaced_"))
    )
    currency = ctx.types.currency if ctx.types else ""
    if teams:
        rows.append(("showback", "gpu_hours", round(sum(t["gpu_hours"] for t in teams), 4)))
        if ctx.types is not None:
            rows.append(("showback", "cost", round(sum(t["cost"] for t in teams), 2)))
    if ctx.report is not None:
        currency = ctx.report.gap.currency
        gap = scenario_row("", ctx.report.gap)
        rows.extend(("capacity gap", k, v) for k, v in gap.items() if k not in ("scenario", "status"))
    units = {"showback": ctx.types.currency if ctx.types else "", "capacity gap": currency}
    if _example(ctx.types, ctx.report):
        units = {k: f"{v} {EXAMPLE_LABEL}" if v else v for k, v in units.items()}
    return [
        {
            "section": sec,
            "metric": k,
            "value": _number(v),
            "unit": "replicas" if sec.startswith("replicas") else _unit(k, units.get(sec, "")),
        }
        for sec, k, v in rows
    ]


def _scenarios(ctx: _Context) -> list[dict[str, Any]]:
    if ctx.report is None:
        return []
    results = ctx.report.scenarios
    if not results:
        return [scenario_row("(this gap)", ctx.report.gap)]
    return [
        {**scenario_row(r.name, r.gap), "description": r.description, "buys": r.buys,
         "vs_baseline": r.vs_baseline}
        for r in results
    ]  # fmt: skip


def check_gap(plan: Plan, report: CapacityReport) -> None:
    """Refuse a capacity gap computed from other inputs than the plan (when both record their digest)."""
    mine = plan.provenance.get("inputs_sha256")
    theirs = report.gap.inputs_sha256
    if mine and theirs and mine != theirs:
        raise InputError(
            f"capacity gap: computed from other inputs than the plan (inputs_sha256 {theirs[:12]}... in "
            f"the gap, {str(mine)[:12]}... in the plan); run gpuplan capacity-gap on the plan's inputs"
        )


def _frame(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    """The table; a column whose values are all integers (some missing) is an integer column."""
    frame = pd.DataFrame(rows, columns=columns)
    for col in columns:
        values = [r[col] for r in rows if r.get(col) is not None]
        if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            frame[col] = frame[col].astype("Int64")
    return frame


@dataclass(frozen=True)
class Facts:
    """What a workbook's cover and Details sheets say beyond the tables: the plan's time and inputs
    digest, where prices come from, the showback basis and the solves' internals."""

    plan_time: str
    inputs_sha256: str
    price_source: str
    example_prices: bool
    currency: str
    period_h: float
    amortisation_years: float | None
    has_gap: bool
    team_view: bool
    #: (section, item, value, unit) rows of solver internals.
    internals: tuple[tuple[str, str, Any, str], ...]


def _internals(plan: Plan, report: CapacityReport | None) -> tuple[tuple[str, str, Any, str], ...]:
    """The solves' internals: the plan's solver, bound, gap and time, and each gap solve's."""
    s = plan.solver
    rows: list[tuple[str, str, Any, str]] = [
        ("plan", "solver", s.name, ""),
        ("plan", "status", plan.status.value, ""),
        ("plan", "objective", s.objective, ""),
        ("plan", "best_bound", s.best_bound, ""),
        ("plan", "solver_gap", s.gap, FRACTION),
        ("plan", "wall_s", s.wall_s, "seconds"),
        ("plan", "actions", len(plan.actions), ""),
    ]
    for key in ("time_limit_s", "seed", "cut_short"):
        value = plan.provenance.get(key)
        if isinstance(value, list | tuple):
            value = ", ".join(map(str, value)) or "-"
        if isinstance(value, int | float | str):
            rows.append(("plan", key, value, "seconds" if key.endswith("_s") else ""))
    if report is not None:
        runs = [("capacity gap", report.gap)] + [(f"scenario {r.name}", r.gap) for r in report.scenarios]
        for section, g in runs:
            rows += [
                (section, "purchase_solver", f"{g.solver} ({g.solver_status})", ""),
                (
                    section,
                    "lower_bound",
                    g.lower_bound,
                    f"{g.currency} {EXAMPLE_LABEL}" if g.example_prices else g.currency,
                ),
                (section, "gap", g.gap, FRACTION),
                (section, "cut_short", ", ".join(g.cut_short) or "-", ""),
                (section, "wall_s", g.wall_s, "seconds"),
            ]
    return tuple(rows)


def build_tables(
    plan: Plan,
    catalog: HardwareCatalog,
    inp: PlanningInput | None = None,
    report: CapacityReport | None = None,
    types: NodeTypeCatalog | None = None,
    period_h: float = 24.0,
    workloads: AbstractSet[str] | None = None,
) -> dict[str, pd.DataFrame]:
    """Every sheet as a DataFrame, in workbook order; with ``workloads`` (a team's view) the placements,
    waits and showback hold only those workloads, and the fleet sheets (summary, nodes, pools,
    fragmentation) the whole plan. A gap ``report`` of other inputs than the plan is refused
    (:func:`check_gap`). Money columns carry their currency in ``frame.attrs["currency"]``; the Summary's
    ``attrs["facts"]`` holds the workbook's :class:`Facts`."""
    if report is not None:
        check_gap(plan, report)
    ctx = _Context(plan, inp, report, types, catalog, period_h)
    own = (
        ctx
        if workloads is None
        else _Context(team_plan(plan, workloads), inp, report, types, catalog, period_h)
    )
    placements = _placements(own)
    teams = _teams(own, placements)
    gpus = _gpu_rows(ctx)
    rows: dict[str, list[dict[str, Any]]] = {
        "Summary": _summary(ctx, teams if workloads is None else _teams(ctx, _placements(ctx))),
        "Placements": placements,
        "Nodes": _nodes(ctx, gpus),
        "Pools": _pools(gpus),
        "Fragmentation": _fragmentation(ctx, gpus),
        "Waiting": _waiting(own),
        "CapacityGap": _gap(ctx),
        "Teams": teams,
        "Scenarios": _scenarios(ctx),
    }
    currency = {"Teams": types.currency if types else ""}
    if report is not None:
        currency.update(dict.fromkeys(("CapacityGap", "Scenarios"), report.gap.currency))
    if _example(types, report):
        currency = {k: f"{v} {EXAMPLE_LABEL}" if v else v for k, v in currency.items()}
    tables = {}
    for name in SHEETS:
        columns = list(_COLUMNS[name])
        extra = [c for r in rows[name] for c in r if c not in columns]
        columns.extend(dict.fromkeys(extra))
        tables[name] = _frame(rows[name], columns)
        tables[name].attrs["currency"] = currency.get(name, "")
    tables["Summary"].attrs["facts"] = _facts(plan, report, types, period_h, team_view=workloads is not None)
    return tables


def _facts(
    plan: Plan,
    report: CapacityReport | None,
    types: NodeTypeCatalog | None,
    period_h: float,
    *,
    team_view: bool,
) -> Facts:
    if report is not None:
        source, currency = report.gap.price_source, report.gap.currency
    elif types is not None:
        source, currency = types.note or "the given node-type catalog", types.currency
    else:
        source, currency = "", ""
    if types is not None and types.example_prices and report is None:
        source = "EXAMPLE prices of the bundled node-type catalog, not quotes"
    return Facts(
        plan_time=str(plan.provenance.get("now") or ""),
        inputs_sha256=str(plan.provenance.get("inputs_sha256") or ""),
        price_source=source,
        example_prices=_example(types, report),
        currency=currency,
        period_h=period_h,
        amortisation_years=types.amortisation_years if types is not None else None,
        has_gap=report is not None,
        team_view=team_view,
        internals=_internals(plan, report),
    )


#: What every money unit says while the prices are the bundled catalog's examples.
EXAMPLE_LABEL = "(EXAMPLE prices)"


def _example(types: NodeTypeCatalog | None, report: CapacityReport | None) -> bool:
    """Whether the money shown comes from example prices (the bundled catalog)."""
    return bool(types is not None and types.example_prices) or bool(
        report is not None and report.gap.example_prices
    )


def _inert(value: Any) -> Any:
    """Text that a spreadsheet would run as a formula, with a leading ``'``; anything else as it is."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_START) else value


def csv_text(frame: pd.DataFrame) -> str:
    """One table as CSV text, formula-like text cells escaped (the API's and the command line's CSV)."""
    text: str = frame.map(_inert).to_csv(index=False)
    return text


def write_csv(tables: dict[str, pd.DataFrame], directory: Path) -> list[Path]:
    """One CSV per sheet (``<Sheet>.csv``)."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name, frame in tables.items():
        path = directory / f"{name}.csv"
        path.write_text(csv_text(frame))
        out.append(path)
    return out

"""Plans and capacity gaps as spreadsheet tables (pandas): an Excel workbook with charts, or CSV files.

Every sheet is one table with its header in the first row, so that reading the workbook (or the CSV
of the sheet) back with pandas gives the same numbers. Percent and currency formats change only how
Excel shows a cell, never the value stored.

Names come from the input (workload ids, node names, teams), so no text is ever a live formula: the
workbook stores every text cell as a string, and CSV text cells that a spreadsheet would read as a
formula get a leading ``'`` (the OWASP advice against CSV injection).
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from openpyxl.chart import BarChart, Reference
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.worksheet import Worksheet

from gpuplan.models.capacity import CapacityReport, NodeTypeCatalog
from gpuplan.models.cluster import Cluster, Node
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.plan import Plan
from gpuplan.models.problem import PlanningInput
from gpuplan.planner.metrics import gpu_equivalents
from gpuplan.planner.scenarios import scenario_row
from gpuplan.planner.team_view import team_plan

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

log = logging.getLogger(__name__)

#: Sheet names in workbook order.
SHEETS: tuple[str, ...] = (
    "Summary", "Placements", "Nodes", "Pools", "Fragmentation", "Waiting", "CapacityGap", "Teams",
    "Scenarios",
)  # fmt: skip

#: How a text cell starts when a spreadsheet would evaluate it as a formula (or a DDE command).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

#: Hours in a year, for amortising purchase prices into GPU-hour rates.
HOURS_PER_YEAR = 8760

_PERCENT = ("utilisation", "share", "gap", "rate", "fraction")
_MONEY = ("cost", "lower_bound", "price")

_COLUMNS: dict[str, tuple[str, ...]] = {
    "Placements": (
        "workload", "replica", "team", "tier", "node", "pool", "gpu_model", "kind", "gpus", "mig_profile",
        "milli", "gpu_equivalents", "cpu_milli", "memory_mib", "alternative",
    ),
    "Nodes": (
        "level", "node", "pool", "gpu", "model", "mig_layout", "used_slices", "free_slices", "used_milli",
        "free_milli", "gpu_equivalents_used", "utilisation",
    ),
    "Pools": ("pool", "nodes", "gpus", "gpu_equivalents_used", "utilisation"),
    "Fragmentation": (
        "node", "pool", "free_whole_gpus", "partly_used_gpus", "stranded_gpu_equivalents", "free_mig_slices",
        "free_cpu_milli", "free_memory_mib",
    ),
    "Waiting": ("workload", "replica", "team", "tier", "code", "reason", "predicted_start"),
    "CapacityGap": (
        "section", "key", "replicas", "served_by_repartition", "served_by_purchase", "unservable",
        "still_unplaced", "gpu_equivalents", "nodes_added", "gpus_added", "cost", "lead_time_days", "detail",
    ),
    "Teams": (
        "team", "tier", "replicas_placed", "gpu_equivalents", "hours", "gpu_hours", "share", "cost",
    ),
    "Scenarios": (
        "scenario", "demand_replicas", "served_by_repartition", "served_by_purchase", "unservable",
        "nodes_added", "gpus_added", "cost", "lower_bound", "gap", "max_lead_time_days", "verified",
        "cut_short", "wall_s",
    ),
}  # fmt: skip


def _where(node: str, gpus: list[str]) -> str:
    return f"{node}:{','.join(gpus)}"


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
            return 1.0 if gpu.milli is None and gpu.mig_profile is None else (gpu.milli or 0) / 1000
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
                "gpus": ",".join(str(g.index) for g in a.gpus),
                "mig_profile": ",".join(f"{g.mig_profile}@{g.mig_start}" for g in a.gpus if g.mig_profile),
                "milli": sum(g.milli or 0 for g in a.gpus),
                "gpu_equivalents": round(sum(ctx.equivalents(a.node, g) for g in a.gpus), 6),
                "cpu_milli": a.cpu_milli,
                "memory_mib": a.memory_mib,
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
    use, layouts = _gpu_use(ctx), _layouts(ctx)
    keys = sorted({(n.name, g.index) for n in ctx.cluster.nodes for g in n.gpus} if ctx.cluster else set(use))
    rows = []
    for node_name, index in keys:
        node, model = ctx.node(node_name), ctx.model(node_name, index)
        parts = use.get((node_name, index), [])
        eq = sum(ctx.equivalents(node_name, g) for g in parts)
        row: dict[str, Any] = {
            "level": "gpu", "node": node_name, "pool": (node.pool or "") if node else "", "gpu": index,
            "model": model or "", "mig_layout": "", "used_slices": None, "free_slices": None,
            "used_milli": None, "free_milli": None, "gpu_equivalents_used": round(eq, 6),
            "utilisation": round(min(eq, 1.0), 6),
        }  # fmt: skip
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
            used_milli = sum(1000 if g.milli is None else g.milli for g in parts)
            row["used_milli"] = used_milli
            row["free_milli"] = 1000 - used_milli if model is not None or node is None else None
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


def _cell(value: Any) -> Any:
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, default=str)
    return value


def _waiting(ctx: _Context) -> list[dict[str, Any]]:
    """Waiting replicas with every field the plan gives them (explanations included, as JSON)."""
    rows = []
    for u in ctx.plan.unplaced:
        team, tier = ctx.team_tier(u.workload)
        fields = u.model_dump(mode="json", by_alias=True)
        row: dict[str, Any] = {"workload": u.workload, "replica": u.replica, "team": team, "tier": tier}
        row.update({k: _cell(v) for k, v in fields.items() if k not in row})
        rows.append(row)
    return rows


def _gap(ctx: _Context) -> list[dict[str, Any]]:
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
            "detail": f"lower bound {gap.lower_bound:.2f} {gap.currency}, gap {gap.gap:.4f}, "
            f"{'verified' if gap.verified else 'NOT verified'} by placement"
            + (f"; cut short by the time limit: {', '.join(gap.cut_short)}" if gap.cut_short else ""),
        }
    ]  # fmt: skip
    for p in gap.purchases:
        rows.append(
            {
                "section": "purchase",
                "key": p.node_type,
                "nodes_added": p.count,
                "gpus_added": p.gpus,
                "cost": p.cost,
                "lead_time_days": p.lead_time_days,
                "detail": " ".join(p.nodes),
            }
        )
    for section, lines in (("tier", gap.by_tier), ("team", gap.by_team)):
        rows.extend({"section": section, **line.model_dump()} for line in lines)
    rows.extend({"section": "repartition", "key": "", "detail": a} for a in gap.repartition_actions)
    rows.extend(
        {"section": "unservable", "key": f"{u.workload}#{u.replica}", "detail": u.message}
        for u in gap.unservable
    )
    rows.extend({"section": "note", "key": "", "detail": n} for n in gap.notes)
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


def _summary(ctx: _Context) -> list[dict[str, Any]]:
    plan = ctx.plan
    rows: list[tuple[str, Any]] = [
        ("status", plan.status.value),
        ("solver", plan.solver.name),
        ("objective", plan.solver.objective),
        ("best_bound", plan.solver.best_bound),
        ("solver_gap", plan.solver.gap),
        ("wall_s", plan.solver.wall_s),
        ("assignments", len(plan.assignments)),
        ("waiting", len(plan.unplaced)),
        ("actions", len(plan.actions)),
    ]
    rows.extend(sorted(plan.metrics.items()))
    if ctx.report is not None:
        gap = ctx.report.gap
        rows.extend(
            [
                ("gap_demand_replicas", gap.demand_replicas),
                ("gap_served_by_repartition", gap.served_by_repartition),
                ("gap_nodes_added", gap.nodes_added),
                ("gap_gpus_added", gap.gpus_added),
                (f"gap_cost_{gap.currency}", gap.cost),
                (f"gap_lower_bound_{gap.currency}", gap.lower_bound),
            ]
        )
    return [{"metric": k, "value": v} for k, v in rows]


def _scenarios(ctx: _Context) -> list[dict[str, Any]]:
    if ctx.report is None:
        return []
    results = ctx.report.scenarios
    if not results:
        return [scenario_row("(this gap)", ctx.report.gap)]
    return [scenario_row(r.name, r.gap) for r in results]


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
    fragmentation) the whole plan."""
    ctx = _Context(plan, inp, report, types, catalog, period_h)
    own = (
        ctx
        if workloads is None
        else _Context(team_plan(plan, workloads), inp, report, types, catalog, period_h)
    )
    placements = _placements(own)
    gpus = _gpu_rows(ctx)
    rows: dict[str, list[dict[str, Any]]] = {
        "Summary": _summary(ctx),
        "Placements": placements,
        "Nodes": _nodes(ctx, gpus),
        "Pools": _pools(gpus),
        "Fragmentation": _fragmentation(ctx, gpus),
        "Waiting": _waiting(own),
        "CapacityGap": _gap(ctx),
        "Teams": _teams(own, placements),
        "Scenarios": _scenarios(ctx),
    }
    tables = {}
    for name in SHEETS:
        columns = list(_COLUMNS.get(name, ("metric", "value")))
        extra = [c for r in rows[name] for c in r if c not in columns]
        columns.extend(dict.fromkeys(extra))
        tables[name] = pd.DataFrame(rows[name], columns=columns)
    return tables


def _format(ws: Worksheet, frame: pd.DataFrame) -> None:
    """Frozen header, column widths from the content, number formats by column name."""
    ws.freeze_panes = "A2"
    for i, col in enumerate(frame.columns, start=1):
        values = [str(col)] + [str(v) for v in frame[col].head(500) if v is not None]
        ws.column_dimensions[get_column_letter(i)].width = min(60, max(len(v) for v in values) + 2)
        fmt = None
        if any(col == p or col.endswith(p) for p in _PERCENT):
            fmt = "0.0%"
        elif any(col.startswith(p) for p in _MONEY):
            fmt = "#,##0.00"
        elif pd.api.types.is_float_dtype(frame[col]):
            fmt = "0.00##"
        if fmt:
            for cell in ws.iter_rows(min_row=2, min_col=i, max_col=i):
                cell[0].number_format = fmt


def _bar(ws: Worksheet, frame: pd.DataFrame, label: str, values: list[str], title: str, anchor: str) -> None:
    """A native Excel bar chart of ``values`` columns against the ``label`` column."""
    if frame.empty:
        return
    chart = BarChart()
    chart.title = title
    chart.height, chart.width = 8, 16
    cols = list(frame.columns)
    n = len(frame) + 1
    for v in values:
        c = cols.index(v) + 1
        chart.add_data(Reference(ws, min_col=c, min_row=1, max_row=n), titles_from_data=True)
    c = cols.index(label) + 1
    chart.set_categories(Reference(ws, min_col=c, min_row=2, max_row=n))
    ws.add_chart(chart, anchor)


def _as_text(ws: Worksheet) -> None:
    """Store every cell openpyxl took for a formula (text starting with ``=``) as the text it is."""
    for row in ws.iter_rows():
        for cell in row:
            if cell.data_type == "f":
                cell.data_type = "s"


def write_xlsx(tables: dict[str, pd.DataFrame], path: Path) -> None:
    """The workbook: one formatted sheet per table, charts for pool utilisation and gap by scenario."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with pd.ExcelWriter(path, engine="openpyxl") as writer:
        for name, frame in tables.items():
            frame.to_excel(writer, sheet_name=name, index=False)
            ws = writer.sheets[name]
            _as_text(ws)
            _format(ws, frame)
        pools, scen = tables["Pools"], tables["Scenarios"]
        anchor = get_column_letter(len(pools.columns) + 2) + "2"
        _bar(writer.sheets["Pools"], pools, "pool", ["utilisation"], "GPU utilisation by pool", anchor)
        anchor = get_column_letter(len(scen.columns) + 2)
        _bar(
            writer.sheets["Scenarios"],
            scen,
            "scenario",
            ["gpus_added"],
            "GPUs to add by scenario",
            anchor + "2",
        )
        _bar(
            writer.sheets["Scenarios"], scen, "scenario", ["cost"], "Purchase cost by scenario", anchor + "20"
        )
    log.info("workbook written to %s", path)


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

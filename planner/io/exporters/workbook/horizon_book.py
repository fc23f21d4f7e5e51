"""The capacity-plan workbook (``capacity-plan --xlsx``): a Cover, the order schedule, the rentals, the
periods (demand, what waits, GPUs in service, costs, budget, placement check) with a chart of cost per
period, the demand served late per tier, and the solve's Details; in the capacity workbook's look
(:mod:`.style`: headers in words with the unit said once, number formats, printable pages)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from openpyxl import Workbook
from openpyxl.styles import Alignment
from openpyxl.worksheet.worksheet import Worksheet

from gpuplan.models.capacity import HorizonPlan, ServedGroup
from gpuplan.planner.io.exporters.workbook.cover import About
from gpuplan.planner.io.exporters.workbook.style import (
    Shown,
    as_text,
    bar,
    below,
    font,
    format_key_values,
    format_table,
    key_value_rows,
    printable,
    shown,
)

log = logging.getLogger(__name__)

TITLE = "GPU capacity plan over time"

#: The sheets after the Cover, with what each holds (the Cover lists them).
SHEETS: dict[str, str] = {
    "Orders": "what to order when, when it arrives, at what price and whom it serves",
    "Rent": "nodes rented per period, at what price and whom they serve",
    "Periods": "each period's demand, what waits, GPUs in service, costs, budget and placement check",
    "Waiting": "the demand served late per tier: replica-periods, GPU-hours and their cost",
    "Details": "the MILP's status, objective, lower bound, gap and wall times",
}

#: Column labels of these sheets ({money}: the currency, with "EXAMPLE prices" while they are examples).
LABELS: dict[str, str] = {
    "period": "Period", "order_date": "Order date", "arrives_date": "Arrives", "arrives_period":
    "Serves from period", "node_type": "Node type", "gpu_model": "GPU model", "count": "Nodes",
    "gpus": "GPUs", "unit_cost": "Unit price, {money}", "cost": "Cost, {money}",
    "lead_time_days": "Lead time (days)", "serves": "Serves (team/tier: GPUs)", "hours": "Hours",
    "rent_per_gpu_hour": "Rent per GPU-hour, {money}", "start": "Starts", "replicas": "Replicas asked",
    "gpu_equivalents": "GPUs asked (equivalents)", "served": "Replicas served",
    "waiting": "Replicas waiting", "waiting_gpu_hours": "GPU-hours waiting",
    "gpus_in_service": "GPUs in service", "cost_buy": "Orders, {money}", "cost_rent": "Rent, {money}",
    "cost_waiting": "Waiting, {money}", "budget": "Budget, {money}", "check": "Placement check",
    "tier": "Tier", "weight": "Tier weight", "price_per_gpu_hour": "Waiting per GPU-hour, {money}",
    "replica_periods": "Replica-periods waiting", "gpu_hours": "GPU-hours waiting",
}  # fmt: skip


def _who(groups: tuple[ServedGroup, ...]) -> str:
    return "; ".join(f"{g.team}/{g.tier}: {g.gpu_equivalents:g}" for g in groups) or "-"


def tables(plan: HorizonPlan) -> dict[str, pd.DataFrame]:
    """The plan's tables (snake_case columns, raw values), each with its currency in ``attrs``."""
    out = {
        "Orders": pd.DataFrame(
            [(o.period, o.order_date, o.arrives_date, o.arrives_period, o.node_type, o.gpu_model, o.count,
              o.gpus, o.unit_cost, o.cost, o.lead_time_days, _who(o.serves)) for o in plan.orders],
            columns=["period", "order_date", "arrives_date", "arrives_period", "node_type", "gpu_model",
                     "count", "gpus", "unit_cost", "cost", "lead_time_days", "serves"],
        ),
        "Rent": pd.DataFrame(
            [(r.period, r.node_type, r.gpu_model, r.count, r.gpus, r.hours, r.rent_per_gpu_hour, r.cost,
              _who(r.serves)) for r in plan.rents],
            columns=["period", "node_type", "gpu_model", "count", "gpus", "hours", "rent_per_gpu_hour",
                     "cost", "serves"],
        ),
        "Periods": pd.DataFrame(
            [(p.period, p.start, p.replicas, p.gpu_equivalents, p.served, p.waiting, p.waiting_gpu_hours,
              p.gpus_in_service, p.buy_cost, p.rent_cost, p.wait_cost, p.budget,
              (f"{p.check_status}: {p.check_note}" if p.checked else "not checked"))
             for p in plan.per_period],
            columns=["period", "start", "replicas", "gpu_equivalents", "served", "waiting",
                     "waiting_gpu_hours", "gpus_in_service", "cost_buy", "cost_rent", "cost_waiting",
                     "budget", "check"],
        ),
        "Waiting": pd.DataFrame(
            [(t.tier, t.weight, t.price_per_gpu_hour, t.replica_periods, t.gpu_hours, t.cost)
             for t in plan.waiting_by_tier],
            columns=["tier", "weight", "price_per_gpu_hour", "replica_periods", "gpu_hours", "cost"],
        ),
    }  # fmt: skip
    money = plan.currency + (" (EXAMPLE prices)" if plan.example_prices else "")
    for frame in out.values():
        frame.attrs["currency"] = money
    return out


def _details(plan: HorizonPlan) -> pd.DataFrame:
    """The solve's internals as Details rows."""
    rows: list[tuple[str, str, Any, str]] = [
        ("plan", "solver", plan.solver, ""),
        ("plan", "status", plan.status, ""),
        ("plan", "objective", plan.objective, plan.currency),
        ("plan", "lower_bound", plan.lower_bound, plan.currency),
        ("plan", "gap", plan.gap, "fraction"),
        ("plan", "milp_wall_s", plan.milp_wall_s, "seconds"),
        ("plan", "wall_s", plan.wall_s, "seconds"),
        ("plan", "verified", plan.verified, ""),
        ("plan", "cut_short", ", ".join(plan.cut_short) or "-", ""),
    ]
    return key_value_rows(rows)


def _sheet(book: Workbook, title: str, table: Shown) -> Worksheet:
    """A sheet holding ``table`` as shown, text never read as a formula."""
    ws = book.create_sheet(title)
    ws.append([str(c) for c in table.frame.columns])
    for row in table.frame.itertuples(index=False):
        ws.append([None if pd.isna(v) else v.item() if hasattr(v, "item") else v for v in row])
    as_text(ws)
    return ws


def _cover(ws: Worksheet, plan: HorizonPlan, about: About) -> None:
    """What was asked, when, the prices and inputs, the assumptions and the sheets."""
    ws.column_dimensions["A"].width, ws.column_dimensions["B"].width = 18, 110
    ws["A1"] = TITLE
    ws["A1"].font = font(bold=True, size=16)
    made = (about.made or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    rows = [
        ("What was asked", about.asked or "a capacity plan over time"),
        ("Made", made),
        ("Periods", f"{plan.periods} of {plan.period_days} days from {plan.start[:10]}"),
        ("Prices", plan.price_source),
        ("Currency", plan.currency),
        *((f.role, f"{f.name} (SHA-256 {f.sha256})") for f in about.inputs),
        *(("Assumptions" if i == 0 else "", f"- {n}") for i, n in enumerate(plan.notes)),
        *(("Sheets" if i == 0 else "", f"{k}: {v}") for i, (k, v) in enumerate(SHEETS.items())),
    ]
    wrap = Alignment(wrap_text=True, vertical="top")
    for r, (label, text) in enumerate(rows, start=3):
        ws.cell(row=r, column=1, value=label).font = font(bold=True)
        cell = ws.cell(row=r, column=2, value=text)
        cell.data_type, cell.alignment = "s", wrap
        if label == "Prices" and plan.example_prices:
            cell.font = font(bold=True, color="C00000")
    printable(ws, title_row=False)


def write_horizon_xlsx(plan: HorizonPlan, path: Path, about: About | None = None) -> None:
    """The workbook of ``plan``: Cover, Orders, Rent, Periods (with the cost per period charted),
    Waiting and Details."""
    book = Workbook()
    cover = book.active
    cover.title = "Cover"
    _cover(cover, plan, about or About())
    views: dict[str, Shown] = {}
    sheets: dict[str, Worksheet] = {}
    for name, table in tables(plan).items():
        view = shown(name, table)
        money = str(table.attrs["currency"])
        view.frame.columns = [
            LABELS.get(s, str(c)).format(money=money)
            for s, c in zip(view.source, view.frame.columns, strict=True)
        ]
        sheets[name] = _sheet(book, name, view)
        format_table(sheets[name], view)
        views[name] = view
    periods = views["Periods"]
    n = len(periods.frame) + 1
    if n > 1:
        start = periods.col("start")
        bar(sheets["Periods"], "Cost per period", below(periods), (start, start, 2, n),
            [(str(periods.frame.columns[periods.col(c) - 1]), periods.col(c), 2, n)
             for c in ("cost_buy", "cost_rent", "cost_waiting")],
            axes=("Period", f"Cost, {plan.currency}"), stacked=True)  # fmt: skip
    details = shown("Details", _details(plan))
    format_key_values(_sheet(book, "Details", details), details)
    path.parent.mkdir(parents=True, exist_ok=True)
    book.save(path)
    log.info("workbook written to %s", path)

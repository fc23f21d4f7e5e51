"""The "Fairness frontier" sheet (``gpuplan frontier --xlsx``): one row per point of the frontier, and a
chart of the queue term against the fairness level reached, the policy's own point in its own series.
Added to a workbook that exists, replacing an earlier sheet of that name, or written on its own."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
from openpyxl.chart import Reference, ScatterChart, Series
from openpyxl.worksheet.worksheet import Worksheet

from gpuplan.models.review import Frontier, FrontierPoint
from gpuplan.planner.io.exporters.workbook.review_sheet import write_review_sheet
from gpuplan.planner.io.exporters.workbook.style import yes_no

log = logging.getLogger(__name__)

TITLE = "Fairness frontier"

#: The sheet's columns: the name each value is formatted by (a ``gap`` as a percentage) and its header.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("floor", "Fairness floor asked"),
    ("reached", "Floor reached"),
    ("fairness", "Fairness reached (lowest share of entitlement)"),
    ("jain", "Jain's index"),
    ("objective", "Queue term (objective)"),
    ("best_bound", "Best bound"),
    ("gap", "Gap"),
    ("price_queue_term", "Price: queue term"),
    ("price_queue_share", "Price: queue term (share)"),
    ("price_gpus_allocated", "Price: GPUs allocated (change)"),
    ("price_weighted_queue_hours", "Price: tier-weighted queue hours"),
    ("money_per_hour", "Money per hour ({currency})"),
    ("proved", "Step proved (beyond both gaps)"),
    ("current", "Policy as given"),
)


def _row(p: FrontierPoint) -> dict[str, object]:
    reached = p.reached
    return {
        "floor": "none (efficient)" if p.level == 0 else p.level,
        "reached": yes_no(reached) if reached else ("no (proved)" if p.unreachable_proved else "no"),
        "fairness": p.fairness if reached else None,
        "jain": p.jain if reached else None,
        "objective": p.solve.objective if reached else None,
        "best_bound": p.solve.best_bound,
        "gap": p.solve.gap if reached else None,
        "price_queue_term": p.price_queue_term if reached else None,
        "price_queue_share": p.price_queue_share if reached else None,
        "price_gpus_allocated": p.price_gpus_allocated if reached else None,
        "price_weighted_queue_hours": p.price_weighted_queue_hours if reached else None,
        "money_per_hour": (p.money_note if p.money_per_hour is None else p.money_per_hour)
        if reached
        else None,
        "proved": "" if p.proved is None else yes_no(p.proved),
        "current": yes_no(p.current),
    }


#: The frontier's colour (the workbooks' dark blue) and the policy's point (red).
FRONTIER_COLOUR, POLICY_COLOUR = "1F4E79", "C00000"


def _look(series: Series, symbol: str, size: int, colour: str, *, line: bool) -> None:
    """Filled markers of ``colour`` (viewers draw hollow or no markers otherwise), joined by a line or not."""
    series.marker.symbol = symbol
    series.marker.size = size
    series.marker.graphicalProperties.solidFill = colour
    series.marker.graphicalProperties.line.solidFill = colour
    if line:
        series.graphicalProperties.line.solidFill = colour
        series.graphicalProperties.line.width = 19050  # 1.5 pt, in EMU
    else:
        series.graphicalProperties.line.noFill = True


def _chart(ws: Worksheet, rows: int, current: int | None) -> None:
    """Queue term against fairness reached: the frontier's points, and the policy's own point (row
    ``current`` of the points, when it was reached)."""
    chart = ScatterChart(scatterStyle="lineMarker")
    chart.title = "Queue term against fairness"
    chart.style = 13
    chart.x_axis.title = "Fairness reached (lowest share of entitlement)"
    chart.y_axis.title = "Queue term (lower is better)"
    chart.height, chart.width = 9, 18
    x = Reference(ws, min_col=3, min_row=2, max_row=rows + 1)
    y = Reference(ws, min_col=5, min_row=2, max_row=rows + 1)
    points = Series(y, x, title="best plan at each floor")
    _look(points, "circle", 7, FRONTIER_COLOUR, line=True)
    points.smooth = False
    chart.series.append(points)
    if current is not None:
        row = current + 2
        mine = Series(
            Reference(ws, min_col=5, min_row=row, max_row=row),
            Reference(ws, min_col=3, min_row=row, max_row=row),
            title="policy as given",
        )
        _look(mine, "diamond", 11, POLICY_COLOUR, line=False)
        chart.series.append(mine)
    chart.y_axis.number_format = "#,##0"
    chart.x_axis.number_format = "0.000"
    chart.x_axis.delete = False
    chart.y_axis.delete = False
    ws.add_chart(chart, f"A{rows + 4}")


def write_frontier_sheet(frontier: Frontier, path: Path) -> None:
    """The "Fairness frontier" sheet of ``frontier`` in the workbook at ``path`` (made when absent)."""
    currency = frontier.currency
    money = f"{currency}{', EXAMPLE prices' if frontier.example_prices else ''}" if currency else "no prices"
    source = tuple(name for name, _ in COLUMNS)
    frame = pd.DataFrame([_row(p) for p in frontier.points], columns=list(source))
    frame.columns = [label.format(currency=money) for _, label in COLUMNS]
    current = next((i for i, p in enumerate(frontier.points) if p.current and p.reached), None)
    write_review_sheet(path, TITLE, frame, source, lambda ws: _chart(ws, len(frame), current))
    log.info("fairness frontier sheet written to %s", path)

"""The shared look of the workbooks: human headers with their unit said once, number formats per
column, a frozen wrapped header row, pages that print on A4 or Letter landscape at a readable size
(fit to the page's width, as many pages down as needed, the header row repeated), key-value sheets
(Summary, Details) formatted row by row, and column charts with titles and axis labels.

The tables keep their snake_case names and raw values (the CSV's); :func:`shown` is what a sheet
shows: headers in words, truth values as yes/no, solver internals left to the Details sheet.
"""

from __future__ import annotations

import math
import numbers as numbers_
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from openpyxl.chart import BarChart, Reference, Series
from openpyxl.chart.data_source import AxDataSource, MultiLevelStrRef, StrRef
from openpyxl.chart.marker import DataPoint
from openpyxl.chart.shapes import GraphicalProperties
from openpyxl.styles import Alignment, Border, Font, PatternFill, Side
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.pagebreak import Break
from openpyxl.worksheet.worksheet import Worksheet

from gpuplan.planner.io.exporters.workbook.tables import EMPTY_HINTS, FRACTION, TOTAL, is_money, is_percent

#: Number formats: a ratio as a percentage, counts, two decimals, one decimal, money (the currency is
#: in the header or the unit column, never in the cell).
PERCENT_FORMAT = "0.0%"
INTEGER_FORMAT = "#,##0"
DECIMAL_FORMAT = "#,##0.00"
TENTHS_FORMAT = "#,##0.0"
MONEY_FORMAT = "#,##0.00"

#: Widest column in characters (longer text wraps) and the height of one line of text in points.
WIDEST = 28
LINE_HEIGHT = 13

#: Header labels; ``{money}`` is the table's currency (with "EXAMPLE prices" while they are examples).
HEADERS: dict[str, str] = {
    "section": "Section", "metric": "Item", "value": "Value", "unit": "Unit", "key": "Item",
    "workload": "Workload", "replica": "Replica", "team": "Team", "tier": "Tier", "node": "Node",
    "pool": "Pool", "gpu_model": "GPU model", "kind": "GPU use", "gpus": "GPU(s)",
    "mig_profile": "MIG instance", "milli": "GPU share (milli-GPU)",
    "gpu_equivalents": "GPUs (whole-GPU equivalents)", "cpu_milli": "CPU (millicores)",
    "memory_mib": "Memory (MiB)", "gpu_memory_mib": "GPU memory (MiB)", "alternative": "Alternative no.",
    "level": "Row", "gpu": "GPU", "model": "GPU model", "mig_layout": "MIG layout (profile@start)",
    "used_slices": "MIG slices used", "free_slices": "MIG slices free", "used_milli": "Used (milli-GPU)",
    "free_milli": "Free (milli-GPU)", "used_gpu_memory_mib": "GPU memory used (MiB)",
    "free_gpu_memory_mib": "GPU memory free (MiB)", "gpu_equivalents_used": "GPUs used (equivalents)",
    "utilisation": "Utilisation", "nodes": "Nodes",
    "free_whole_gpus": "Free whole GPUs", "partly_used_gpus": "Partly used GPUs",
    "stranded_gpu_equivalents": "Stranded on partly used GPUs (GPU equivalents)",
    "free_mig_slices": "Free MIG slices", "free_cpu_milli": "Free CPU (millicores)",
    "free_memory_mib": "Free memory (MiB)",
    "code": "Reason code", "reason": "Why it waits", "predicted_start": "Predicted start",
    "wait_h": "Wait (hours)", "reserved": "Reserved on", "resources": "Short of",
    "alternatives": "Its alternatives", "best_counterfactual": "What would let it run",
    "counterfactuals": "Options found",
    "replicas": "Replicas", "served_by_repartition": "Served by re-partition (replicas)",
    "served_by_purchase": "Served by purchase (replicas)", "unservable": "Cannot be served (replicas)",
    "still_unplaced": "Still waiting after purchase (replicas)", "nodes_added": "Nodes to buy",
    "gpus_added": "GPUs to buy", "cost": "Cost, {money}", "lead_time_days": "Lead time (days)",
    "unit_cost": "Unit price, {money}", "gpus_charged": "GPUs charged (its share of those bought)",
    "input_replicas": "Replicas asked", "status": "Placement check",
    "detail": "Detail", "gpus_idle": "GPUs idle", "gpu_hours": "GPU-hours",
    "replicas_placed": "Replicas placed", "hours": "Hours", "share": "Share of GPU-hours",
    "scenario": "Scenario", "demand_replicas": "Waiting beyond target (replicas)",
    "max_lead_time_days": "Longest lead time (days)", "verified": "Verified by placement",
    "description": "Description", "buys": "Buys", "vs_baseline": "Compared with the baseline",
    "lower_bound": "Lower bound, {money}", "gap": "Gap to the bound",
    "cut_short": "Cut short by the time limit",
    "wall_s": "Wall time (s)",
}  # fmt: skip

#: Header labels of one sheet that differ from :data:`HEADERS` (a pool's GPUs are a count, not indices).
SHEET_HEADERS: dict[str, dict[str, str]] = {"Pools": {"gpus": "GPUs"}}

#: Number formats by column (others by type: whole numbers as counts, decimals with two places).
FORMATS: dict[str, str] = {
    "gpu_equivalents": DECIMAL_FORMAT, "gpu_equivalents_used": DECIMAL_FORMAT,
    "stranded_gpu_equivalents": DECIMAL_FORMAT, "gpus_idle": DECIMAL_FORMAT, "wait_h": TENTHS_FORMAT,
    "gpus_charged": DECIMAL_FORMAT,
    "hours": TENTHS_FORMAT, "gpu_hours": TENTHS_FORMAT, "wall_s": DECIMAL_FORMAT,
}  # fmt: skip

#: Columns of a table that are solver internals, shown on the Details sheet instead.
INTERNAL_COLUMNS: dict[str, tuple[str, ...]] = {"Scenarios": ("lower_bound", "gap", "cut_short", "wall_s")}

#: Rows of the Summary (section, metric) that are solver internals, shown on the Details sheet instead.
INTERNAL_ROWS = frozenset(
    [("plan", m) for m in ("solver", "objective", "best_bound", "solver_gap", "wall_s")]
    + [("capacity gap", m) for m in ("lower_bound", "gap", "cut_short", "wall_s")]
)

#: Words that keep their capitals when a snake_case name is written out.
_WORDS = {"gpu": "GPU", "gpus": "GPUs", "mig": "MIG", "cpu": "CPU", "mib": "MiB", "s": "(s)", "h": "(hours)"}

#: The workbooks' font (Excel's default; LibreOffice prints it as the metric-compatible Carlito).
FONT_NAME, FONT_SIZE = "Calibri", 11


def font(
    *, bold: bool = False, italic: bool = False, size: float = FONT_SIZE, color: str | None = None
) -> Font:
    """The workbooks' font with the given emphasis (a font with no name prints in a serif fallback)."""
    return Font(name=FONT_NAME, size=size, bold=bold, italic=italic, color=color)


_HEADER_FILL = PatternFill("solid", fgColor="DDE4EE")
_THIN = Side(style="thin", color="A6A6A6")
#: A table cell's border: thin grey lines (printed grid lines would cross the charts too).
BORDER = Border(left=_THIN, right=_THIN, top=_THIN, bottom=_THIN)
#: Characters of text per unit of column width (proportional fonts fit more than one), and the width of
#: a bold character in units of a regular one.
CHARS_PER_WIDTH, BOLD_WIDTH = 1.25, 1.15


#: Names written out whole.
_NAMES = {
    "wall_s": "Wall time", "time_limit_s": "Time limit", "gpu_hours": "GPU-hours",
    "gpu_memory_allocated_mib": "GPU memory allocated", "gpu_memory_total_mib": "GPU memory total",
    "gap": "Gap to the bound", "solver_gap": "Gap to the bound",
    "served_by_repartition": "Served by re-partition", "input_replicas": "Replicas asked",
    "demand_replicas": "Waiting beyond target",
    "max_lead_time_days": "Longest lead time", "cut_short": "Cut short by the time limit",
    "verified": "Verified by placement", "actions": "Actions to apply",
}  # fmt: skip


def words(name: str) -> str:
    """A snake_case name in words (``allocated_gpu_fraction`` -> ``Allocated GPU fraction``)."""
    if name in _NAMES:
        return _NAMES[name]
    parts = [_WORDS.get(p, p) for p in name.split("_")]
    text = " ".join(parts)
    return text[:1].upper() + text[1:]


def header(column: str, currency: str, sheet: str = "") -> str:
    """The label of a column of ``sheet``, its unit said once."""
    label = SHEET_HEADERS.get(sheet, {}).get(column) or HEADERS.get(column)
    if label is None:
        return words(column)
    return label.format(money=currency or "money")


def yes_no(value: Any) -> Any:
    """A truth value as yes or no (a spreadsheet shows a stored boolean as 1 or TRUE)."""
    return ("yes" if value else "no") if isinstance(value, bool) else value


@dataclass(frozen=True)
class Shown:
    """A table as a sheet shows it, with the table's name and the snake_case name of each column."""

    name: str
    frame: pd.DataFrame
    source: tuple[str, ...]
    #: Rows (0-based) of a key-value sheet whose value is a ratio, shown as a percentage.
    percent: frozenset[int] = frozenset()

    def col(self, name: str) -> int:
        """The sheet column (1-based) of the table column ``name``."""
        return self.source.index(name) + 1


def shown(name: str, table: pd.DataFrame) -> Shown:
    """``table`` as sheet ``name`` shows it: internal columns and Summary rows left out, truth values as
    yes/no, the Summary's metric names in words and no unit for a percentage (the % sign says it)."""
    frame = table.drop(columns=[c for c in INTERNAL_COLUMNS.get(name, ()) if c in table.columns])
    if name == "Summary" and not frame.empty:
        keep = [(s, m) not in INTERNAL_ROWS for s, m in zip(frame["section"], frame["metric"], strict=True)]
        frame = frame[keep].reset_index(drop=True)
    if name == "Summary":
        # Tier names are the input's; the other metrics are the planner's names, written out.
        frame["metric"] = [
            m if m == TOTAL or str(s).startswith("replicas") else words(str(m))
            for s, m in zip(frame["section"], frame["metric"], strict=True)
        ]
    for col in frame.columns:
        if any(isinstance(v, bool) for v in frame[col]):
            frame[col] = [yes_no(v) for v in frame[col]]
    percent: frozenset[int] = frozenset()
    if "unit" in frame.columns:
        percent = frozenset(i for i, u in enumerate(frame["unit"]) if u == FRACTION)
        frame["unit"] = [None if u == FRACTION else u for u in frame["unit"]]
    frame.attrs = dict(table.attrs)
    source = tuple(str(c) for c in frame.columns)
    currency = str(table.attrs.get("currency", ""))
    frame.columns = [header(c, currency, name) for c in source]
    return Shown(name, frame, source, percent)


def key_value_rows(rows: list[tuple[str, str, Any, str]]) -> pd.DataFrame:
    """(section, item, value, unit) rows as a sheet's frame: names in words, truth values as yes/no."""
    return pd.DataFrame(
        [(s, words(m) if m != TOTAL else TOTAL, yes_no(v), u) for s, m, v, u in rows],
        columns=["section", "metric", "value", "unit"],
    )


def _column_format(source: str, values: pd.Series) -> str | None:
    if is_percent(source):
        return PERCENT_FORMAT
    if is_money(source):
        return MONEY_FORMAT
    if source in FORMATS:
        return FORMATS[source]
    numbers = [v for v in values if isinstance(v, numbers_.Real) and not isinstance(v, bool | np.bool_)]
    if not numbers or len(numbers) < sum(1 for v in values if v is not None and not _missing(v)):
        return None
    return INTEGER_FORMAT if all(float(v).is_integer() for v in numbers) else DECIMAL_FORMAT


def _missing(value: Any) -> bool:
    return value is pd.NA or (isinstance(value, float) and math.isnan(value))


def text_of(value: Any, fmt: str | None) -> str:
    """About the text a spreadsheet shows for ``value`` in format ``fmt`` (for column widths)."""
    if value is None or _missing(value):
        return ""
    if fmt is None or isinstance(value, bool) or not isinstance(value, numbers_.Real):
        return str(value)
    if fmt == PERCENT_FORMAT:
        return f"{value:.1%}"
    if fmt == INTEGER_FORMAT:
        return f"{value:,.0f}"
    return f"{value:,.1f}" if fmt == TENTHS_FORMAT else f"{value:,.2f}"


def as_text(ws: Worksheet) -> None:
    """Store every cell openpyxl took for a formula (text starting with ``=``) as the text it is."""
    for row in ws.iter_rows():
        for cell in row:
            if cell.data_type == "f":
                cell.data_type = "s"


def printable(ws: Worksheet, *, title_row: bool = True) -> None:
    """A4 landscape (Letter prints it too), as wide as the page and as many pages down as needed, the
    header row on every page and a footer naming the sheet and the page."""
    ws.page_setup.orientation = "landscape"
    ws.page_setup.paperSize = ws.PAPERSIZE_A4
    ws.sheet_properties.pageSetUpPr.fitToPage = True
    ws.page_setup.fitToWidth, ws.page_setup.fitToHeight = 1, 0
    ws.page_margins.left = ws.page_margins.right = 0.4
    ws.page_margins.top, ws.page_margins.bottom = 0.5, 0.7
    ws.page_margins.header, ws.page_margins.footer = 0.2, 0.3
    if title_row:
        ws.print_title_rows = "1:1"
    ws.oddFooter.center.text = "&A - page &P of &N"


def _header_row(ws: Worksheet, widths: list[float], labels: list[str]) -> None:
    """Bold, shaded, wrapped header cells, tall enough for their longest label."""
    wrap = Alignment(wrap_text=True, vertical="center")
    lines = 1
    for cell, width, label in zip(ws[1], widths, labels, strict=True):
        cell.font = font(bold=True)
        cell.fill = _HEADER_FILL
        cell.alignment = wrap
        cell.border = BORDER
        lines = max(lines, _lines(label, width, bold=True))
    ws.row_dimensions[1].height = (LINE_HEIGHT + 1) * lines + 2


def _lines(text: str, width: float, *, bold: bool = False) -> int:
    """About how many lines ``text`` wraps to in a column ``width`` wide (bold letters are wider)."""
    per_line = max(1, int((width - 1) * CHARS_PER_WIDTH / (BOLD_WIDTH if bold else 1)))
    words_, lines, used = text.split(), 1, 0
    for w in words_:
        if used and used + 1 + len(w) > per_line:
            lines, used = lines + 1, len(w)
        else:
            used += len(w) + (1 if used else 0)
    return lines


def format_table(ws: Worksheet, table: Shown) -> None:
    """A table sheet: header row frozen with filters, widths from the content (text wraps past
    :data:`WIDEST`), a number format per column, a hint on an empty sheet, printable pages."""
    frame = table.frame
    ws.freeze_panes = "A2"
    top = Alignment(wrap_text=True, vertical="top")
    lines = [1] * len(frame)
    widths: list[float] = []
    for i, (label, source) in enumerate(zip(frame.columns, table.source, strict=True), start=1):
        values = frame[label]
        fmt = _column_format(source, values)
        # A column of text with some numbers in it (GPU indices: ``3`` or ``0,1``) aligns as text.
        align = top if fmt is not None else Alignment(wrap_text=True, vertical="top", horizontal="left")
        texts = [text_of(v, fmt) for v in values.head(500)]
        longest_word = max((len(w) for w in str(label).split()), default=4)
        content = max((len(t) for t in texts), default=0)
        # Bold header letters are wider than the body's: a header word must not break, and a header
        # takes at most about three lines.
        heading = max(longest_word, len(str(label)) / 3) * BOLD_WIDTH
        width = min(WIDEST, max(content, math.ceil(heading), 5)) + 1.2
        widths.append(width)
        ws.column_dimensions[get_column_letter(i)].width = width
        for r, (cell,) in enumerate(ws.iter_rows(min_row=2, max_row=len(frame) + 1, min_col=i, max_col=i)):
            if fmt and cell.data_type == "n":
                cell.number_format = fmt
            cell.alignment = align
            cell.border = BORDER
            if content > WIDEST:
                lines[r] = max(lines[r], _lines(texts[r] if r < len(texts) else str(cell.value or ""), width))
    _header_row(ws, widths, [str(c) for c in frame.columns])
    # Spreadsheets do not size wrapped rows on opening: give them the lines their text needs.
    for r, n in enumerate(lines, start=2):
        if n > 1:
            ws.row_dimensions[r].height = LINE_HEIGHT * n
    if frame.empty:
        hint = ws.cell(row=2, column=1, value=EMPTY_HINTS.get(table.name, "No rows."))
        hint.font = font(italic=True, color="555555")
    else:
        ws.auto_filter.ref = ws.dimensions
    printable(ws)


def format_key_values(ws: Worksheet, table: Shown) -> None:
    """A key-value sheet (Summary, Details): each value formatted by its row's unit and name (a ratio
    as a percentage, money with thousands and cents, counts whole), total rows bold."""
    format_table(ws, table)
    value_col = table.col("value")
    frame = table.frame
    texts = [len(str(frame.columns[value_col - 1]))]
    for r in range(2, len(frame) + 2):
        cell = ws.cell(row=r, column=value_col)
        name = str(ws.cell(row=r, column=table.col("metric")).value or "")
        if r - 2 in table.percent:
            cell.number_format = PERCENT_FORMAT
        elif cell.data_type == "n" and is_money(name.lower().replace(" ", "_")):
            cell.number_format = MONEY_FORMAT
        elif cell.data_type == "n":
            value = cell.value
            whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
            cell.number_format = INTEGER_FORMAT if whole else DECIMAL_FORMAT
        if cell.data_type == "n":
            cell.alignment = Alignment(horizontal="right", vertical="top")
        texts.append(len(text_of(cell.value, cell.number_format)))
        if name == TOTAL:
            for c in ws[r]:
                c.font = font(bold=True)
    ws.column_dimensions[get_column_letter(value_col)].width = min(WIDEST, max(texts)) + 1.5


def bar(
    ws: Worksheet,
    title: str,
    anchor: str,
    categories: tuple[int, int, int, int],
    series: list[tuple[str, int, int, int]],
    *,
    axes: tuple[str, str],
    stacked: bool = False,
    percent: bool = False,
    muted: tuple[int, ...] = (),
) -> None:
    """A native column chart with a title and axis labels: ``categories`` (first column, last column,
    first row, last row; two columns give two-level labels) and ``series`` (title, column, first row,
    last row); ``axes`` the titles of the category and the value axis. The bars of the categories
    ``muted`` (0-based) are drawn grey, for values not to be read like the others (the title says why)."""
    c1, c2, r1, r2 = categories
    labels = str(Reference(ws, min_col=c1, max_col=c2, min_row=r1, max_row=r2))
    chart = BarChart()
    chart.type = "col"
    chart.title = title
    chart.x_axis.title, chart.y_axis.title = axes
    chart.height, chart.width = CHART_CM
    chart.x_axis.delete = chart.y_axis.delete = False
    if stacked:
        chart.grouping, chart.overlap = "stacked", 100
    chart.y_axis.number_format = "0%" if percent else "#,##0"
    # Bars start at zero (a cut axis exaggerates differences); a share ends at 100 %.
    chart.y_axis.scaling.min = 0
    if percent:
        chart.y_axis.scaling.max = 1
    for name, col, first, last in series:
        s = Series(Reference(ws, min_col=col, min_row=first, max_row=last), title=name)
        s.cat = AxDataSource(
            strRef=StrRef(f=labels) if c1 == c2 else None,
            multiLvlStrRef=MultiLevelStrRef(f=labels) if c1 != c2 else None,
        )
        s.dPt = [DataPoint(idx=i, spPr=GraphicalProperties(solidFill=MUTED_FILL)) for i in muted]
        chart.series.append(s)
    ws.add_chart(chart, anchor)


#: The fill of a muted bar (see :func:`bar`).
MUTED_FILL = "BFBFBF"

#: A chart's height and width (cm), and the rows from one chart's top to the next one's (two charts fit
#: one printed page).
CHART_CM, CHART_ROWS = (7.0, 20.0), 16

#: Points: a row of one line, a centimetre, and the printable height of an A4 landscape page.
DEFAULT_ROW_PT, POINTS_PER_CM, PAGE_PT = 15.0, 72 / 2.54, 595 - 1.2 * 72


def keep_charts_whole(ws: Worksheet, table: Shown, charts: int) -> None:
    """Start a new printed page after the table unless the table and its ``charts`` fit one page
    unscaled, so that no chart is cut between two pages."""
    rows = range(1, len(table.frame) + 3)
    table_pt = sum(ws.row_dimensions[r].height or DEFAULT_ROW_PT for r in rows)
    charts_pt = CHART_ROWS * DEFAULT_ROW_PT * (charts - 1) + CHART_CM[0] * POINTS_PER_CM
    if table_pt + charts_pt > PAGE_PT:
        ws.row_breaks.append(Break(id=len(table.frame) + 2))


def below(table: Shown, charts_before: int = 0) -> str:
    """Where a chart goes: under the table (past the page break that may follow it), after
    ``charts_before`` charts."""
    return f"A{len(table.frame) + 4 + CHART_ROWS * charts_before}"


def rows_of(table: Shown, column: str, value: str) -> tuple[int, int] | None:
    """First and last sheet row of the contiguous rows whose ``column`` is ``value`` (totals left out)."""
    frame = table.frame
    col = frame.columns[table.col(column) - 1]
    metric = frame.columns[table.col("metric") - 1] if "metric" in table.source else col
    hits = [
        i + 2
        for i, (v, m) in enumerate(zip(frame[col], frame[metric], strict=True))
        if v == value and m != TOTAL
    ]
    return (hits[0], hits[-1]) if hits else None

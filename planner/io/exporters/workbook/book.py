"""Write a workbook: the Cover, the sheets of its kind (a capacity workbook when the tables hold a
capacity gap, else a plan workbook) with their charts, and the Details sheet last."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pandas as pd
from openpyxl import Workbook
from openpyxl.worksheet.worksheet import Worksheet

from gpuplan.planner.io.exporters.workbook import capacity_book, plan_book
from gpuplan.planner.io.exporters.workbook.cover import About, write_cover
from gpuplan.planner.io.exporters.workbook.style import (
    Shown,
    as_text,
    format_key_values,
    format_table,
    keep_charts_whole,
    key_value_rows,
    shown,
)
from gpuplan.planner.io.exporters.workbook.tables import Facts

log = logging.getLogger(__name__)

#: Sheet titles that differ from their table's name.
TITLES = {"CapacityGap": "Capacity gap"}

#: The last sheet: what it holds (the Cover lists it).
DETAILS = ("Details", "solver internals: each solve's solver, status, bound, gap, wall time and the passes "
           "the time limit cut short")  # fmt: skip


def _cell(value: Any) -> Any:
    """A value as openpyxl stores it: missing as an empty cell, numpy numbers as Python numbers."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _sheet(book: Workbook, title: str, table: Shown) -> Worksheet:
    ws = book.create_sheet(title)
    ws.append([str(c) for c in table.frame.columns])
    for row in table.frame.itertuples(index=False):
        ws.append([_cell(v) for v in row])
    as_text(ws)
    return ws


def write_xlsx(tables: dict[str, pd.DataFrame], path: Path, about: About | None = None) -> None:
    """The workbook of ``tables`` (from :func:`~.tables.build_tables`): Cover, its kind's sheets with
    charts, Details; ``about`` says what was asked and of which input files."""
    facts: Facts = tables["Summary"].attrs["facts"]
    kind = capacity_book if facts.has_gap else plan_book
    book = Workbook()
    cover = book.active
    cover.title = "Cover"
    views = {name: shown(name, tables[name]) for name in kind.SHEETS}
    sheets: dict[str, Worksheet] = {}
    for name, view in views.items():
        ws = _sheet(book, TITLES.get(name, name), view)
        (format_key_values if name == "Summary" else format_table)(ws, view)
        sheets[name] = ws
    kind.charts(sheets, views)
    for name, ws in sheets.items():
        if ws._charts:
            keep_charts_whole(ws, views[name], len(ws._charts))
    details = shown("Details", key_value_rows(list(facts.internals)))
    format_key_values(_sheet(book, DETAILS[0], details), details)
    listed = {TITLES.get(k, k): v for k, v in kind.SHEETS.items()} | {DETAILS[0]: DETAILS[1]}
    write_cover(cover, kind.TITLE, facts, about or About(), listed)
    path.parent.mkdir(parents=True, exist_ok=True)
    book.save(path)
    log.info("workbook written to %s", path)

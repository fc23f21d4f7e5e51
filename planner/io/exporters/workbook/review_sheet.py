"""One sheet of a policy review (the "Policy cost" and "Fairness frontier" sheets), in the workbooks'
look: added to a workbook that exists (a plan workbook, say), replacing an earlier sheet of its title,
or written as a workbook of its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
from openpyxl import Workbook, load_workbook
from openpyxl.worksheet.worksheet import Worksheet

from gpuplan.planner.io.exporters.workbook.style import Shown, as_text, format_table


def write_review_sheet(
    path: Path,
    title: str,
    frame: pd.DataFrame,
    source: tuple[str, ...],
    then: Callable[[Worksheet], None] | None = None,
) -> None:
    """The sheet ``title`` holding ``frame`` (its columns formatted by the names ``source``) in the
    workbook at ``path``; ``then`` adds to the sheet (a chart) before the workbook is saved."""
    if path.is_file():
        book = load_workbook(path)
        if title in book.sheetnames:
            del book[title]
    else:
        book = Workbook()
        book.remove(book.active)
    ws = book.create_sheet(title)
    ws.append(list(frame.columns))
    for values in frame.itertuples(index=False):
        ws.append([None if pd.isna(v) else v for v in values])
    as_text(ws)
    format_table(ws, Shown(title, frame, source))
    if then is not None:
        then(ws)
    path.parent.mkdir(parents=True, exist_ok=True)
    book.save(path)

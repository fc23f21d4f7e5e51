"""Plans and capacity gaps as spreadsheets: the tables (:mod:`.tables`, also written as CSV), the plan
and capacity workbooks (:mod:`.plan_book`, :mod:`.capacity_book`) written by :mod:`.book`, with the
Cover and Details sheets (:mod:`.cover`) and the shared look (:mod:`.style`)."""

from gpuplan.planner.io.exporters.workbook.book import write_xlsx
from gpuplan.planner.io.exporters.workbook.cover import About, about_files
from gpuplan.planner.io.exporters.workbook.tables import (
    EMPTY_HINTS,
    FORMULA_START,
    SHEETS,
    build_tables,
    check_gap,
    csv_text,
    gpu_hour_rates,
    write_csv,
)

__all__ = [
    "EMPTY_HINTS",
    "FORMULA_START",
    "SHEETS",
    "About",
    "about_files",
    "build_tables",
    "check_gap",
    "csv_text",
    "gpu_hour_rates",
    "write_csv",
    "write_xlsx",
]

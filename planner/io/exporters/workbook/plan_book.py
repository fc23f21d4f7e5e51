"""The plan workbook: the plan's sheets in reading order and their charts (replicas by tier,
utilisation by pool, GPU-hours by team and tier)."""

from __future__ import annotations

from openpyxl.worksheet.worksheet import Worksheet

from gpuplan.planner.io.exporters.workbook.style import Shown, bar, below, rows_of

TITLE = "GPU placement plan"

#: The plan's sheets in workbook order, with what each holds (the Cover lists them).
SHEETS: dict[str, str] = {
    "Summary": "the plan's status, replicas placed and waiting per tier, fleet use and showback",
    "Placements": "where each replica runs",
    "Waiting": "each waiting replica, why, when it is predicted to start and what would let it run",
    "Nodes": "each node and GPU: MIG layout, used and free capacity, utilisation",
    "Pools": "GPU utilisation per pool",
    "Fragmentation": "free capacity per node, and the part stranded on partly used GPUs",
    "Teams": "showback: GPU-hours and their cost per team and tier",
}


def charts(sheets: dict[str, Worksheet], shown: dict[str, Shown]) -> None:
    """Replicas by tier (Summary), utilisation by pool and GPU-hours by team and tier."""
    summary = shown["Summary"]
    placed, waiting = (
        rows_of(summary, "section", "replicas placed"),
        rows_of(summary, "section", "replicas waiting"),
    )
    if placed and waiting:
        v, m = summary.col("value"), summary.col("metric")
        bar(sheets["Summary"], "Replicas by tier", below(summary), (m, m, *placed),
            [("placed", v, *placed), ("waiting", v, *waiting)], axes=("Tier", "Replicas"))  # fmt: skip
    pools = shown["Pools"]
    n = len(pools.frame) + 1
    if n > 1:
        bar(sheets["Pools"], "GPU utilisation by pool", below(pools), (1, 1, 2, n),
            [("Utilisation", pools.col("utilisation"), 2, n)], axes=("Pool", "Utilisation"),
            percent=True)  # fmt: skip
    teams = shown["Teams"]
    n = len(teams.frame) + 1
    if n > 1:
        bar(sheets["Teams"], "GPU-hours by team and tier", below(teams), (1, 2, 2, n),
            [("GPU-hours", teams.col("gpu_hours"), 2, n)], axes=("Team and tier", "GPU-hours"))  # fmt: skip

"""The capacity workbook: the gap, the scenarios and the showback first, then the plan's sheets, with
the gap's charts (demand by tier and how it is served, purchase cost by team, GPUs to buy and cost by
scenario) added to the plan's."""

from __future__ import annotations

from openpyxl.worksheet.worksheet import Worksheet

from gpuplan.planner.io.exporters.workbook import plan_book
from gpuplan.planner.io.exporters.workbook.style import Shown, bar, below, rows_of

TITLE = "GPU capacity plan"

#: The capacity workbook's sheets in workbook order, with what each holds (the Cover lists them).
SHEETS: dict[str, str] = {
    "Summary": "the plan and the capacity gap's headline numbers",
    "CapacityGap": "what to buy and re-partition, for whom, at what cost and lead time; the gap by tier "
    "and team",
    "Scenarios": "each what-if side by side, what it buys and why it differs from the baseline",
    **{k: v for k, v in plan_book.SHEETS.items() if k != "Summary"},
}

#: How the gap's demand is served (the stacked series of the tier chart).
SERVED = ("served_by_repartition", "served_by_purchase", "unservable", "still_unplaced")


def charts(sheets: dict[str, Worksheet], shown: dict[str, Shown]) -> None:
    """The plan's charts, then the gap's demand by tier, purchase cost by team, and GPUs to buy and
    purchase cost by scenario."""
    plan_book.charts(sheets, shown)
    gap = shown["CapacityGap"]
    tiers, teams = rows_of(gap, "section", "tier"), rows_of(gap, "section", "team")
    key = gap.col("key")
    money = str(gap.frame.attrs.get("currency", ""))
    if tiers:
        bar(sheets["CapacityGap"], "Gap demand by tier: how it is served", below(gap), (key, key, *tiers),
            [(str(gap.frame.columns[gap.col(h) - 1]), gap.col(h), *tiers) for h in SERVED],
            axes=("Tier", "Replicas"), stacked=True)  # fmt: skip
    if teams:
        bar(sheets["CapacityGap"], "Purchase cost by team", below(gap, 1 if tiers else 0), (key, key, *teams),
            [("Cost", gap.col("cost"), *teams)], axes=("Team", f"Cost, {money}"))  # fmt: skip
    scenarios = shown["Scenarios"]
    n = len(scenarios.frame) + 1
    if n > 1:
        # A purchase the placement check did NOT verify is drawn grey, never read as a verified one.
        verified = scenarios.frame[scenarios.frame.columns[scenarios.col("verified") - 1]]
        muted = tuple(i for i, v in enumerate(verified) if v not in (True, "yes"))
        note = " (grey: NOT verified by placement)" if muted else ""
        bar(sheets["Scenarios"], f"GPUs to buy by scenario{note}", below(scenarios), (1, 1, 2, n),
            [("GPUs to buy", scenarios.col("gpus_added"), 2, n)], axes=("Scenario", "GPUs"),
            muted=muted)  # fmt: skip
        bar(sheets["Scenarios"], f"Purchase cost by scenario{note}", below(scenarios, 1), (1, 1, 2, n),
            [("Cost", scenarios.col("cost"), 2, n)], axes=("Scenario", f"Cost, {money}"),
            muted=muted)  # fmt: skip

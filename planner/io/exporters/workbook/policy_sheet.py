"""The "Policy cost" sheet (``gpuplan policy-cost --xlsx``): one row per rule, most costly first
(:func:`~gpuplan.planner.io.exporters.workbook.review_sheet.write_review_sheet`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from gpuplan.models.review import RuleCost
from gpuplan.planner.io.exporters.workbook.review_sheet import write_review_sheet
from gpuplan.planner.io.exporters.workbook.style import yes_no

log = logging.getLogger(__name__)

TITLE = "Policy cost"

#: The sheet's columns: the name each value is formatted by (a ``gap`` as a percentage) and its header.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("relaxed", "Rule relaxed"),
    ("objective_saved", "Cost (queue term saved)"),
    ("significant", "Significant (beyond both gaps)"),
    ("gpus_allocated_change", "GPUs allocated (+ more, - freed)"),
    ("replicas_placed_change", "Replicas placed (change)"),
    ("queue_term_change", "Queue term (change)"),
    ("queue_hours_change", "Queue hours to predicted starts (change)"),
    ("weighted_queue_hours_change", "Tier-weighted queue hours (change)"),
    ("waiting_without_start_change", "Waiting with no predicted start (change)"),
    ("money_per_hour", "Money per hour ({currency})"),
    ("given_objective", "Objective as given"),
    ("given_gap", "Gap as given"),
    ("relaxed_objective", "Objective relaxed"),
    ("relaxed_gap", "Gap relaxed"),
    ("seconds", "Seconds per plan"),
    ("rule", "Policy field"),
)


def _row(c: RuleCost) -> dict[str, object]:
    given, relaxed = c.given.solve, c.with_rule_relaxed.solve
    return {
        "relaxed": c.relaxed,
        "objective_saved": c.cost,
        "significant": yes_no(c.significant),
        "gpus_allocated_change": c.gpus_allocated_change,
        "replicas_placed_change": c.replicas_placed_change,
        "queue_term_change": c.queue_term_change,
        "queue_hours_change": c.queue_hours_change,
        "weighted_queue_hours_change": c.weighted_queue_hours_change,
        "waiting_without_start_change": c.waiting_without_start_change,
        "money_per_hour": c.money_per_hour if c.money_per_hour is not None else c.money_note,
        "given_objective": given.objective,
        "given_gap": given.gap,
        "relaxed_objective": relaxed.objective,
        "relaxed_gap": relaxed.gap,
        "seconds": relaxed.time_limit_s,
        "rule": c.rule,
    }


def write_policy_cost_sheet(costs: Sequence[RuleCost], path: Path) -> None:
    """The "Policy cost" sheet of ``costs`` in the workbook at ``path`` (made when it does not exist)."""
    currency = next((c.currency for c in costs if c.currency), "")
    example = any(c.example_prices for c in costs)
    money = f"{currency}{', EXAMPLE prices' if example else ''}" if currency else "no prices"
    source = tuple(name for name, _ in COLUMNS)
    frame = pd.DataFrame([_row(c) for c in costs], columns=list(source))
    frame.columns = [label.format(currency=money) for _, label in COLUMNS]
    write_review_sheet(path, TITLE, frame, source)
    log.info("policy cost sheet written to %s", path)

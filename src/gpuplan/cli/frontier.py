"""``gpuplan frontier``: the throughput-vs-fairness frontier, the best plan at each fairness floor and the
price of fairness read off it."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.cli import common
from gpuplan.cli.policy import _note, _seconds_each, _signed, _table
from gpuplan.models.base import InputError
from gpuplan.models.catalog import default_catalog

if TYPE_CHECKING:
    from gpuplan.models.review import Frontier


def _levels(text: str | None) -> list[float] | None:
    """``--levels``: comma-separated floors in (0, 1] (``None``: found by the sweep)."""
    if text is None:
        return None
    out = []
    for part in text.split(","):
        try:
            level = float(part)
        except ValueError:
            raise InputError(
                f"--levels: '{part.strip()}' is not a number; give floors such as 0.5,0.7,0.9"
            ) from None
        if not 0 < level <= 1:
            raise InputError(
                f"--levels: {level:g} is outside (0, 1]; a floor is a share of each team's entitlement"
            )
        out.append(level)
    return out


def render_frontier(frontier: Frontier) -> str:
    """The points as a table, the policy's own marked, with what the columns mean."""
    money = (
        f"{frontier.currency}/h{' EXAMPLE' if frontier.example_prices else ''}"
        if frontier.currency
        else "money/h"
    )
    header = ["floor", "reached", "fairness", "Jain", "queue term", "bound", "gap", "price", "price %",
              "GPUs", "weighted queue h", money, "step", ""]  # fmt: skip
    rows = []
    for p in frontier.points:
        floor = "none" if p.level == 0 else f"{p.level:.3f}" + ("" if p.asked else "*")
        if not p.reached:
            proof = "no, proved" if p.unreachable_proved else "no plan found"
            rows.append([floor, proof, *[""] * 11, "<- policy" if p.current else ""])
            continue
        s = p.solve
        rows.append(
            [
                floor,
                "yes",
                "-" if p.fairness is None else f"{p.fairness:.3f}",
                "-" if p.jain is None else f"{p.jain:.3f}",
                f"{s.objective or 0:,.0f}",
                "-" if s.best_bound is None else f"{s.best_bound:,.0f}",
                "-" if s.gap is None else f"{s.gap:.1%}",
                _signed(p.price_queue_term),
                "-" if p.price_queue_share is None else f"{p.price_queue_share:+.1%}",
                _signed(p.price_gpus_allocated, 2),
                _signed(p.price_weighted_queue_hours, 1),
                "-" if p.money_per_hour is None else _signed(p.money_per_hour, 2),
                "" if p.proved is None else ("proved" if p.proved else "within gaps"),
                "<- policy" if p.current else "",
            ]
        )
    notes = [
        "floor: every team holds at least this share of its max-min fair entitlement of the fleet's "
        "GPU-equivalents (none: the efficient plan); fairness: the lowest share a team holds in the plan; "
        "Jain: Jain's index of those shares",
        "price: the plan's queue term (objective) minus the efficient plan's, and the changes in GPUs "
        "allocated and tier-weighted queue hours to the predicted starts; step: whether the step from the "
        "point before is larger than both points' gaps",
        "no plan found: no plan met the floor in the time given; proved: the solve's bound shows none can; "
        "*: not asked, the fairness a plan asked for a higher floor reached",
        f"{frontier.seconds_each:.1f} s per plan",
    ]
    return "\n".join([_table(header, rows), "", *notes])


def cmd_frontier(args: argparse.Namespace) -> int:
    """Plan the input at a range of fairness floors and print (and write) the frontier."""
    from gpuplan.planner.capacity.node_types import load_node_types
    from gpuplan.planner.io.files import write_json
    from gpuplan.planner.policy.cost import Prices, Run
    from gpuplan.planner.policy.frontier import frontier, solves_needed

    levels = _levels(args.levels)
    if args.points < 2:
        raise InputError("--points: must be at least 2 (the efficient plan and one floor)")
    catalog = default_catalog()
    inp = common.input_from_args(args, catalog)
    prices = Prices.of(load_node_types(Path(args.catalog) if args.catalog else None, catalog), catalog)
    runs = solves_needed(args.points, args.probes, levels, current_floor=inp.policy.fair_floor is not None)
    each = _seconds_each(args, runs, deterministic=args.deterministic)
    run = Run(
        solver=args.solver,
        seed=args.seed,
        num_workers=args.workers,
        deterministic=args.deterministic,
        now=common.parse_now(args.now) or datetime.now(UTC),
        catalog=catalog,
        seconds_each=each,
        ray=common.ray_from_args(args),
    )
    print(
        f"policy: {args.policy or 'the default (no --policy)'}; up to {runs} plans, {each:.1f} s each, "
        f"{args.solver}"
    )
    result = frontier(
        inp, run, prices, points=args.points, probes=args.probes, levels=levels, progress=_note(args)
    )
    print(render_frontier(result))
    if args.out:
        write_json(Path(args.out), result)
        print(f"frontier written to {args.out}")
    if args.xlsx:
        from gpuplan.planner.io.exporters.workbook.frontier_sheet import write_frontier_sheet

        write_frontier_sheet(result, Path(args.xlsx))
        print(f"sheet 'Fairness frontier' written to {args.xlsx}")
    return common.EXIT_OK


def add_parsers(sub: common.Subparsers) -> None:
    """Register ``frontier``."""
    p = sub.add_parser("frontier", help="throughput against fairness: the best plan at each fairness floor")
    common.add_input_options(p)
    p.add_argument(
        "--levels",
        help="comma-separated fairness floors in (0, 1] (default: from the efficient plan's fairness up to "
        "the highest a plan reaches)",
    )
    p.add_argument(
        "--points",
        type=int,
        default=6,
        help="points without --levels, the efficient plan included (default 6)",
    )
    p.add_argument(
        "--probes", type=int, default=3, help="bisection steps towards the highest floor reached (default 3)"
    )
    p.add_argument(
        "--catalog",
        help="node types whose prices give the money per GPU-hour (default: the bundled catalog with "
        "EXAMPLE prices)",
    )
    common.add_solve_options(p, 120.0, "seconds for the whole command, split evenly among its plans")
    p.add_argument("--out", help="write the frontier as JSON here")
    p.add_argument("--xlsx", help="add a 'Fairness frontier' sheet with its chart to this workbook")
    p.set_defaults(func=cmd_frontier)

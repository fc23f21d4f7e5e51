"""``gpuplan policy-cost`` (what each rule of a policy costs) and ``gpuplan replay`` (a proposed policy
replayed on the plan history): the evidence a policy owner wants before approving a change."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.cli import common
from gpuplan.models.base import InputError
from gpuplan.models.catalog import default_catalog

if TYPE_CHECKING:
    from gpuplan.models.review import ReplayLine, ReplayReport, RuleCost, SolveFigures, Tally

def _table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """Columns padded to their widest cell; the first ``left`` columns aligned left, the others right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(widths[i]) if i < left else c.rjust(widths[i]) for i, c in enumerate(r)).rstrip()
        for r in [header, *rows]
    )


def _signed(value: float, digits: int = 0) -> str:
    """A change with its sign, thousands separated (``0`` without one)."""
    if round(value, digits) == 0:
        return "0"
    return f"{value:+,.{digits}f}"


def _solve(s: SolveFigures) -> str:
    """A plan's status, objective and gap in words."""
    if s.objective is None:
        return s.status
    gap = "" if s.gap is None else f", gap {s.gap:.1%}"
    return f"{s.status} {s.objective:,.0f}{gap}"


def _seconds_each(args: argparse.Namespace, runs: int, *, deterministic: bool) -> float:
    """The seconds each of ``runs`` plans gets (:func:`gpuplan.planner.policy.budget.seconds_each` of
    ``--time-limit``, from the command's start)."""
    from gpuplan.planner.policy.budget import seconds_each

    return seconds_each(args.time_limit, runs, common.command_deadline(args), deterministic=deterministic)


def _cut_note(figures: Sequence[SolveFigures]) -> list[str]:
    """A line saying in how many of the plans the time limit cut the predicted starts short (their queue
    hours then count fewer starts), when it did."""
    cut = sum("predicted starts" in f.cut_short for f in figures)
    if not cut:
        return []
    return [
        f"the time limit cut the predicted starts short in {cut} of the {len(figures)} plans: fewer waiting "
        "replicas have a predicted start there (more 'no start', other queue hours); give a longer "
        "--time-limit"
    ]


def _note(args: argparse.Namespace) -> Callable[[str], None] | None:
    """The progress printer's note, when progress lines are shown."""
    progress = getattr(args, "progress", None)
    return None if progress is None else progress.note


def render_costs(costs: Sequence[RuleCost]) -> str:
    """The rules by cost as a table, with what the columns mean."""
    currency = next((c.currency for c in costs if c.currency), "")
    example = " EXAMPLE prices" if any(c.example_prices for c in costs) else ""
    money = f"{currency}/h{example}" if currency else "money/h"
    header = ["rule relaxed", "cost", "", "GPUs allocated", "placed", "queue h", "weighted queue h",
              "no start", money, "with the rule relaxed"]  # fmt: skip
    rows = [
        [
            c.relaxed,
            f"{c.cost:,.0f}",
            "significant" if c.significant else "not significant",
            _signed(c.gpus_allocated_change, 2),
            _signed(c.replicas_placed_change),
            _signed(c.queue_hours_change, 1),
            _signed(c.weighted_queue_hours_change, 1),
            _signed(c.waiting_without_start_change),
            "-" if c.money_per_hour is None else _signed(c.money_per_hour, 2),
            _solve(c.with_rule_relaxed.solve),
        ]
        for c in costs
    ]
    notes = [
        "cost: how much lower the objective (tier-weighted queue term) is with the rule relaxed; for a tier "
        "weight both plans are measured with the lowered weight; not significant: no larger than the two "
        "plans' gaps added",
        "changes are with the rule relaxed minus as given: GPUs allocated (+ more put to work, - freed), "
        "replicas placed, queue hours to the predicted starts (plain and tier-weighted), replicas waiting "
        "with no predicted start",
    ]
    unpriced = sorted({c.money_note for c in costs if c.money_per_hour is None and c.money_note})
    if currency:
        notes.append(
            f"{money}: the change in GPUs allocated per GPU model at the cheapest node type's price per "
            "GPU-hour (amortised)" + (f"; left out where {'; '.join(unpriced)}" if unpriced else "")
        )
    solves = [costs[0].given.solve, *(c.with_rule_relaxed.solve for c in costs)] if costs else []
    return "\n".join([_table(header, rows), "", *notes, *_cut_note(solves)])


def cmd_policy_cost(args: argparse.Namespace) -> int:
    """Plan with each rule of the policy relaxed in turn against the plan with the policy as given, all
    within ``--time-limit``, and print (and write) the rules by cost."""
    from pydantic import TypeAdapter

    from gpuplan.models.review import RuleCost
    from gpuplan.planner.capacity.node_types import load_node_types
    from gpuplan.planner.policy.cost import Prices, Run, policy_cost
    from gpuplan.planner.policy.relax import input_relaxations

    catalog = default_catalog()
    inp = common.input_from_args(args, catalog)
    prices = Prices.of(load_node_types(Path(args.catalog) if args.catalog else None, catalog), catalog)
    rules, skipped = input_relaxations(inp.policy, inp.workloads)
    if not rules:
        print("the policy has no rule to relax: " + "; ".join(skipped))
        return common.EXIT_OK
    # Deterministic plans: each does the same work whatever the machine's load, so that two plans differ
    # by their rule, not by how busy the machine was while each was made.
    each = _seconds_each(args, 1 + len(rules), deterministic=True)
    run = Run(
        solver=args.solver,
        seed=args.seed,
        num_workers=args.workers,
        deterministic=True,
        now=common.parse_now(args.now) or datetime.now(UTC),
        catalog=catalog,
        seconds_each=each,
        ray=common.ray_from_args(args),
    )
    print(
        f"policy: {args.policy or 'the default (no --policy)'}; {1 + len(rules)} plans (the policy as given "
        f"and {len(rules)} rules relaxed), {each:.1f} s each, {args.solver} (deterministic), seed {args.seed}"
    )
    costs = policy_cost(inp, rules, run, prices, _note(args))
    given = costs[0].given
    print(
        f"the policy as given: {_solve(given.solve)}; {given.tally.placed} replicas placed, "
        f"{given.tally.waiting} waiting, {given.tally.gpus_allocated:,.2f} GPUs allocated"
    )
    if skipped:
        print("not relaxed: " + "; ".join(skipped))
    print()
    print(render_costs(costs))
    if args.out:
        text = TypeAdapter(list[RuleCost]).dump_json(costs, indent=2, exclude_none=True).decode()
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
        print(f"policy cost written to {args.out}")
    if args.xlsx:
        from gpuplan.planner.io.exporters.workbook.policy_sheet import write_policy_cost_sheet

        write_policy_cost_sheet(costs, Path(args.xlsx))
        print(f"sheet 'Policy cost' written to {args.xlsx}")
    return common.EXIT_OK


def _change(before: float, after: float, digits: int = 0) -> str:
    """``before -> after``, or the one value when equal."""
    if round(before, digits) == round(after, digits):
        return f"{before:,.{digits}f}"
    return f"{before:,.{digits}f} -> {after:,.{digits}f}"


def _lines_table(title: str, lines: Sequence[ReplayLine]) -> str:
    """Stored -> replayed figures of ``lines`` (tiers, teams or the total)."""

    def cells(s: Tally, r: Tally) -> list[str]:
        return [
            _change(s.placed, r.placed),
            _change(s.waiting, r.waiting),
            _change(s.queue_term, r.queue_term),
            _change(s.weighted_queue_hours, r.weighted_queue_hours, 1),
            _change(s.waiting_without_start, r.waiting_without_start),
            _change(s.preemptions, r.preemptions),
            _change(s.gpus_allocated, r.gpus_allocated, 2),
        ]

    header = [title, "placed", "waiting", "queue term", "weighted queue h", "no start", "preemptions",
              "GPUs allocated"]  # fmt: skip
    return _table(header, [[line.key, *cells(line.stored, line.replayed)] for line in lines])


def render_replay(report: ReplayReport) -> str:
    """Each replayed plan against the stored one, then the figures per tier, per team and in total."""
    rows = [
        [
            str(p.plan),
            p.created_at[:16].replace("T", " "),
            p.solver,
            _solve(p.stored),
            _solve(p.replayed),
            _signed((p.replayed.objective or 0.0) - (p.stored.objective or 0.0)),
            "within the gaps" if p.within_gaps else "beyond the gaps",
        ]
        for p in report.plans
    ]
    plans = _table(["plan", "stored (UTC)", "solver", "stored", "replayed", "difference", ""], rows, left=3)
    n = len(report.plans)
    summed = f"summed over the {n} plans, " if n > 1 else ""
    return "\n".join(
        [
            plans,
            "",
            f"per tier ({summed}stored -> replayed)",
            _lines_table("tier", report.by_tier),
            "",
            f"per team ({summed}stored -> replayed)",
            _lines_table("team", report.by_team),
            "",
            _lines_table("all", [report.total]),
            "",
            "queue term and weighted queue hours (to the predicted starts) use each stored plan's tier "
            "weights; no start: waiting with no predicted start; difference: replayed minus stored "
            "objective, within the gaps when no larger than the two plans' gaps added",
            *_cut_note([f for p in report.plans for f in (p.stored, p.replayed)]),
        ]
    )


def cmd_replay(args: argparse.Namespace) -> int:
    """Re-plan the last ``--last`` stored plans' inputs under ``--policy`` and compare with what was
    planned."""
    from gpuplan.cli.history import _history
    from gpuplan.planner.io.files import load_policy, write_json
    from gpuplan.planner.policy.replay import last_plans, replay

    if args.last < 1:
        raise InputError("--last: must be at least 1")
    if args.workers < 1:
        raise InputError("--workers: must be at least 1")
    policy = load_policy(Path(args.policy))
    with _history(args.db) as history:
        items = last_plans(history, args.last)
    if not items:
        raise InputError(f"--db {args.db or 'gpuplan.db'}: no plans stored yet (gpuplan replan stores them)")
    each = _seconds_each(args, len(items), deterministic=False)
    print(
        f"replaying {len(items)} stored plan(s) under {args.policy}, {each:.1f} s each, with each plan's "
        "stored solver, seed, planning time and rounds"
    )
    report = replay(items, policy, args.policy, each, default_catalog(), args.workers, _note(args))
    print(render_replay(report))
    if args.out:
        write_json(Path(args.out), report)
        print(f"replay written to {args.out}")
    return common.EXIT_OK


def add_parsers(sub: common.Subparsers) -> None:
    """Register ``policy-cost`` and ``replay``."""
    p = sub.add_parser("policy-cost", help="what each rule of the policy costs: plans with each relaxed")
    common.add_input_options(p)
    p.add_argument(
        "--catalog",
        help="node types whose prices give the money per GPU-hour (default: the bundled catalog with "
        "EXAMPLE prices)",
    )
    common.add_solve_options(
        p, 60.0, "seconds for the whole command, split evenly among its plans", deterministic=False
    )
    p.add_argument("--out", help="write the rules by cost as JSON (a list of entries) here")
    p.add_argument("--xlsx", help="add a 'Policy cost' sheet to this workbook (made when it does not exist)")
    p.set_defaults(func=cmd_policy_cost)

    p = sub.add_parser("replay", help="a proposed policy replayed on the last stored plans, compared")
    p.add_argument("--db", help="plan history: a SQLite file or a PostgreSQL URL (default gpuplan.db)")
    p.add_argument("--policy", required=True, help="the proposed policy file")
    p.add_argument("--last", type=int, default=5, help="replay the last N stored plans (default 5)")
    p.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        help="seconds for the whole command, split evenly among the plans (default 60)",
    )
    p.add_argument("--workers", type=int, default=2, help="solver threads (default 2)")
    p.add_argument("--out", help="write the comparison as JSON here")
    p.set_defaults(func=cmd_replay)

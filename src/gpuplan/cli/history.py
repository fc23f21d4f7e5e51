"""``gpuplan history list|show N|diff N M``: the stored plans (of ``gpuplan replan`` and of the API) as
readable tables."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.cli import common
from gpuplan.models.base import InputError

if TYPE_CHECKING:
    from gpuplan.planner.store.history import PlanHistory, StoredPlan


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M")


@contextmanager
def _history(target: str | None) -> Iterator[PlanHistory]:
    """The plan history at ``target``; an input error of one line when it cannot be read (a SQLite file
    that does not exist is not made: there is no history to read)."""
    from sqlalchemy.exc import SQLAlchemyError

    from gpuplan.planner.store.db import database_url, driver_reason, shown
    from gpuplan.planner.store.history import PlanHistory

    url = database_url(target)
    name = shown(target or url)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise InputError(f"database {name} does not exist")
    try:
        history = PlanHistory(target)
        try:
            yield history
        finally:
            history.store.close()
    except SQLAlchemyError as exc:
        raise InputError(f"database {name}: {driver_reason(exc)}") from None


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    """Columns padded to their widest cell; the columns in ``right`` aligned right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)).rstrip()
        for r in [header, *rows]
    )


def cmd_list(args: argparse.Namespace) -> int:
    """The last ``--limit`` plans, newest first: one line each."""
    if args.limit < 1:
        raise InputError("--limit: must be at least 1")
    with _history(args.db) as history:
        plans = history.recent(args.limit)
    if not plans:
        print("no plans stored yet")
        return common.EXIT_OK
    rows = [
        [
            str(number),
            _when(job.finished_at or job.created_at),
            job.source.value,
            job.solver,
            plan.status.value,
            "-" if plan.solver.objective is None else f"{plan.solver.objective:g}",
            f"{plan.metrics.get('allocated_gpu_fraction', 0.0):.1%}",
            str(len(plan.unplaced)),
            job.team or "(all)",
        ]
        for number, job, plan in plans
    ]
    header = ["plan", "when (UTC)", "source", "solver", "status", "objective", "allocated", "waiting", "team"]
    print(_table(header, rows, right={0, 5, 6, 7}))
    return common.EXIT_OK


def _gpus(count: float) -> str:
    """A number of GPUs in the pool table's one format: two decimals (fractions and MIG instances count
    their share of a GPU)."""
    return f"{count:,.2f}"


def _show(stored: StoredPlan) -> str:
    from gpuplan.planner.presentation import summary
    from gpuplan.planner.presentation.fleet_metrics import fleet_metrics

    job = stored.job
    lines = [
        f"plan {stored.id}: {_when(job.finished_at or job.created_at)} UTC, {job.source.value}, "
        f"team {job.team or '(all)'}, {job.nodes} nodes, {job.workloads} workloads",
        summary.render(stored.plan, stored.inputs),
    ]
    pools = fleet_metrics(stored.plan, stored.inputs).pools
    rows = [[p, str(u.replicas), _gpus(u.used), str(u.gpus), f"{u.ratio:.1%}"] for p, u in pools.items()]
    lines.append(_table(["pool", "placed", "GPUs used", "GPUs", "allocated"], rows, right={1, 2, 3, 4}))
    return "\n".join(lines)


def cmd_show(args: argparse.Namespace) -> int:
    """One plan's summary: status, bound and gap, placements per pool, waits per reason and actions."""
    with _history(args.db) as history:
        print(_show(history.plan(args.number)))
    return common.EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    """What changed from plan N to plan M (the diff ``gpuplan replan`` prints): work plan M's inputs no
    longer hold is finished, not stopped."""
    from gpuplan.planner.store.history import plan_diff

    with _history(args.db) as history:
        before, after = history.plan(args.first), history.plan(args.second)
    print(f"from plan {before.id} to plan {after.id}")
    print(plan_diff(before.plan, after.plan, after.inputs, before.inputs).render())
    return common.EXIT_OK


def add_parsers(sub: common.Subparsers) -> None:
    """Register ``history`` with its ``list``, ``show`` and ``diff`` commands."""
    p = sub.add_parser("history", help="the stored plans: list them, show one, diff two")
    commands = p.add_subparsers(dest="history_command", required=True)
    db_help = "plan history: a SQLite file or a PostgreSQL URL (default gpuplan.db)"

    c = commands.add_parser("list", help="the last plans, newest first")
    c.add_argument("--db", help=db_help)
    c.add_argument("--limit", type=int, default=20, help="at most this many plans (default 20)")
    c.set_defaults(func=cmd_list)

    c = commands.add_parser("show", help="one plan: status, bound, gap, pools, waits, actions")
    c.add_argument("number", type=int, help="the plan's number (gpuplan history list)")
    c.add_argument("--db", help=db_help)
    c.set_defaults(func=cmd_show)

    c = commands.add_parser("diff", help="what changed from plan N to plan M")
    c.add_argument("first", type=int, metavar="N", help="the earlier plan's number")
    c.add_argument("second", type=int, metavar="M", help="the later plan's number")
    c.add_argument("--db", help=db_help)
    c.set_defaults(func=cmd_diff)

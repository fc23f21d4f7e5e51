"""B10: order independence — the same pod list planned at once by gpuplan in several input orders.

A plan of a whole pod list should not depend on the order the pods are listed in. Per trace, the pod
list (the file's order, which is also name order) is given to ``make_plan`` (default solver, every tier
weight 1 as in B2, ``--time-limit`` for the whole call) in each order: the file's, shuffled with seeds
42-44, sorted by GPU request ascending and descending (stable), and CPU-only pods first (stable). FGD
places the same pods online in the same order, one pod at a time (ties to the first node in file order),
side by side. Reported per order: allocation (allocated GPU milli / GPU capacity, the FGD paper's
measure), the plan's status, objective, best bound and gap, and wall time; per trace, the spread (max -
min allocation over the orders) of gpuplan and of FGD.

Run ``python -m benchmarks.b10_orders --help``.
"""

from __future__ import annotations

import argparse
import logging
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from benchmarks.common import (
    capacity_milli,
    compile_pods,
    markdown,
    openb_cluster,
    openb_pods,
    openb_trace,
    order_spread,
    parse_seeds,
    place_online,
    plan_at_once,
    scorer_for,
    spread_table,
    total_milli,
    write,
)
from gpuplan.models import Workload

log = logging.getLogger("benchmarks.b10")

Order = Callable[[Sequence[Workload]], list[Workload]]


def shuffled(seed: int) -> Order:
    """The pods shuffled with ``seed``."""

    def order(pods: Sequence[Workload]) -> list[Workload]:
        out = list(pods)
        random.Random(seed).shuffle(out)
        return out

    return order


def orders(seeds: Sequence[int]) -> dict[str, Order]:
    """The input orders, by name."""
    out: dict[str, Order] = {"file": list}
    out.update({f"shuffled-{s}": shuffled(s) for s in seeds})
    out["gpu-ascending"] = lambda pods: sorted(pods, key=total_milli)
    out["gpu-descending"] = lambda pods: sorted(pods, key=lambda w: -total_milli(w))
    out["cpu-only-first"] = lambda pods: sorted(pods, key=lambda w: total_milli(w) > 0)
    return out


def run_trace(
    trace: str, order_by: dict[str, Order], time_limit: float, seed: int
) -> list[dict[str, object]]:
    """gpuplan at once and FGD online on the trace's pods in every order."""
    nodes, base = openb_trace(trace)
    capacity = capacity_milli(nodes)
    rows = []
    for name, order in order_by.items():
        pods = order(openb_pods(trace))
        fgd = place_online(nodes, compile_pods(pods), scorer_for("greedy-fgd", nodes, base))
        row: dict[str, object] = {
            "trace": trace,
            "order": name,
            "pods": len(pods),
            "requested_pct": round(100 * sum(total_milli(w) for w in pods) / capacity, 2),
        }
        plan_row, _ = plan_at_once(openb_cluster(), pods, time_limit, seed)
        row.update(plan_row)
        row["fgd_pct"] = round(100 * fgd.used / capacity, 2)
        log.info("%s", row)
        rows.append(row)
    return rows


#: README tables: (header, column, format).
ORDERS_TABLE = (
    ("trace", "trace", ""),
    ("order", "order", ""),
    ("gpuplan %", "gpuplan_pct", ".2f"),
    ("FGD %", "fgd_pct", ".2f"),
    ("status", "status", ""),
    ("objective", "objective", ".0f"),
    ("best bound", "best_bound", ".0f"),
    ("gap", "gap", ".4f"),
    ("bound %", "bound_pct", ".2f"),
    ("wall s", "wall_s", ".1f"),
)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", default="default,gpushare100,multigpu50")
    parser.add_argument("--shuffle-seeds", default="42-44", help="seeds of the shuffled orders")
    parser.add_argument("--time-limit", type=float, default=60.0, help="make_plan seconds per order")
    parser.add_argument("--seed", type=int, default=42, help="the solver's seed")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/b10.csv"))
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO if args.verbose else logging.WARNING)
    order_by = orders(parse_seeds(args.shuffle_seeds))
    rows = [r for t in args.traces.split(",") for r in run_trace(t, order_by, args.time_limit, args.seed)]
    frame = pd.DataFrame(rows)
    ranges = order_spread(frame, "trace")
    write(frame, args.out)
    write(ranges, args.out.with_name(f"{args.out.stem}_spread.csv"))
    print(markdown(frame, ORDERS_TABLE))
    print()
    print(markdown(ranges, spread_table("trace")))


if __name__ == "__main__":
    main()

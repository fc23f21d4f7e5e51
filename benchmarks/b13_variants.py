"""B13: pod lists we have not seen — B3 offline and B10 orders on seeded variants of the openb lists.

Per variant (:mod:`benchmarks.variants`, e.g. gpushare40 or gpushare60+gpuspec20+cpu050; the list is
written under ``--lists`` and read back by the product's openb importer, in the file's row order):

- **offline** (B3's protocol): the FGD simulator's arrival sequence of the list for ``--seed`` (shuffled,
  inflated by resampling), cut where the arrived GPU request reaches 100% of GPU capacity, planned at
  once by ``make_plan`` (default solver, every tier weight 1, ``--time-limit``) against FGD online on the
  same sequence with the same node ranks; the plan's bound in allocation terms.
- **orders** (B10's): the whole list planned at once in several input orders (the file's, shuffled with
  ``--shuffle-seeds``, GPU request ascending and descending), ``--orders-time-limit`` each, FGD online
  in the same order beside it; per variant the spread (max - min) of gpuplan's allocation.

Allocation is allocated GPU milli / GPU capacity (the FGD paper's measure). Run
``python -m benchmarks.b13_variants --help``.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from benchmarks.b3_offline import ARRIVED, cut
from benchmarks.b10_orders import Order, shuffled
from benchmarks.common import (
    arrivals,
    capacity_milli,
    compile_nodes,
    compile_pods,
    markdown,
    openb_cluster,
    order_spread,
    parse_seeds,
    place_online,
    plan_at_once,
    plan_gpu_milli,
    scorer_for,
    spread_table,
    total_milli,
    unique,
    write,
)
from benchmarks.variants import variant, write_rows
from gpuplan.models import Workload
from gpuplan.planner.io.importers.openb import read_workloads

log = logging.getLogger("benchmarks.b13")

#: Variants run by default: the openb families at levels not shipped, and one mixture.
VARIANTS = "gpushare40,gpushare80,multigpu30,gpuspec25,cpu050,gpushare60+gpuspec20+cpu050+shuffle"


def orders(seeds: Sequence[int]) -> dict[str, Order]:
    """B10's input orders without CPU-only-first (B10 covers it on the shipped lists)."""
    out: dict[str, Order] = {"file": list}
    out.update({f"shuffled-{s}": shuffled(s) for s in seeds})
    out["gpu-ascending"] = lambda pods: sorted(pods, key=total_milli)
    out["gpu-descending"] = lambda pods: sorted(pods, key=lambda w: -total_milli(w))
    return out


def offline(name: str, pods: Sequence[Workload], seed: int, time_limit: float) -> dict[str, object]:
    """B3 on the variant's pods: gpuplan at once against FGD online on the 100% arrival sequence."""
    nodes = compile_nodes(openb_cluster())
    capacity = capacity_milli(nodes)
    requests = compile_pods(pods)
    order, rank = arrivals(requests, capacity, len(nodes), seed)
    arrived = cut(unique([pods[i] for i in order]), ARRIVED * capacity)
    fgd = place_online(nodes, compile_pods(arrived), scorer_for("greedy-fgd", nodes, requests), rank)
    row: dict[str, object] = {
        "variant": name,
        "run": "offline",
        "pods": len(arrived),
        "requested_pct": round(100 * sum(total_milli(w) for w in arrived) / capacity, 2),
        "fgd_pct": round(100 * fgd.used / capacity, 2),
    }
    plan_row, plan = plan_at_once(openb_cluster(), arrived, time_limit, seed)
    row.update(plan_row)
    row["gain_vs_fgd"] = round(100 * (plan_gpu_milli(plan.assignments) - fgd.used) / capacity, 2)
    log.info("%s", row)
    return row


def in_orders(
    name: str, pods: Sequence[Workload], order_by: dict[str, Order], time_limit: float, seed: int
) -> list[dict[str, object]]:
    """B10 on the variant's pods: gpuplan at once and FGD online in every order."""
    nodes = compile_nodes(openb_cluster())
    capacity = capacity_milli(nodes)
    scorer_pods = compile_pods(pods)
    rows = []
    for label, order in order_by.items():
        ordered = order(pods)
        fgd = place_online(nodes, compile_pods(ordered), scorer_for("greedy-fgd", nodes, scorer_pods))
        row: dict[str, object] = {
            "variant": name,
            "run": label,
            "pods": len(ordered),
            "requested_pct": round(100 * sum(total_milli(w) for w in ordered) / capacity, 2),
            "fgd_pct": round(100 * fgd.used / capacity, 2),
        }
        plan_row, plan = plan_at_once(openb_cluster(), ordered, time_limit, seed)
        row.update(plan_row)
        row["gain_vs_fgd"] = round(100 * (plan_gpu_milli(plan.assignments) - fgd.used) / capacity, 2)
        log.info("%s", row)
        rows.append(row)
    return rows


#: README tables: (header, column, format).
RUNS_TABLE = (
    ("variant", "variant", ""),
    ("run", "run", ""),
    ("requested %", "requested_pct", ".2f"),
    ("gpuplan %", "gpuplan_pct", ".2f"),
    ("FGD %", "fgd_pct", ".2f"),
    ("gain", "gain_vs_fgd", ".2f"),
    ("bound %", "bound_pct", ".2f"),
    ("status", "status", ""),
    ("wall s", "wall_s", ".1f"),
)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variants", default=VARIANTS, help="comma-separated variant specs")
    parser.add_argument("--variant-seed", type=int, default=42, help="seed of the variant generator")
    parser.add_argument("--seed", type=int, default=42, help="seed of the arrivals and of the solver")
    parser.add_argument("--time-limit", type=float, default=60.0, help="make_plan seconds, offline")
    parser.add_argument("--orders-time-limit", type=float, default=20.0, help="make_plan seconds per order")
    parser.add_argument("--shuffle-seeds", default="42-43", help="seeds of the shuffled orders")
    parser.add_argument("--no-orders", action="store_true", help="offline runs only")
    parser.add_argument("--lists", type=Path, default=Path("benchmarks/results/variants"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/b13.csv"))
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO if args.verbose else logging.WARNING)
    order_by = orders(parse_seeds(args.shuffle_seeds))
    rows: list[dict[str, object]] = []
    for spec in args.variants.split(","):
        path = args.lists / f"{spec}.csv"
        write_rows(variant(spec, args.variant_seed), path)
        pods = read_workloads(path)
        rows.append(offline(spec, pods, args.seed, args.time_limit))
        if not args.no_orders:
            rows.extend(in_orders(spec, pods, order_by, args.orders_time_limit, args.seed))
        write(pd.DataFrame(rows), args.out)
    frame = pd.DataFrame(rows)
    print(markdown(frame, RUNS_TABLE))
    if not args.no_orders:
        ranges = order_spread(frame[frame["run"] != "offline"], "variant")
        write(ranges, args.out.with_name(f"{args.out.stem}_spread.csv"))
        print()
        print(markdown(ranges, spread_table("variant")))


if __name__ == "__main__":
    main()

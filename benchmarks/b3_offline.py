"""B3: the default pod list at 100% arrived, planned at once by gpuplan, against FGD online.

Per seed, B1's arrival sequence (the name-sorted list shuffled and inflated by resampling, as the FGD
simulator does) is cut where the arrived GPU request reaches 100% of GPU capacity. ``make_plan`` plans
all of it at once (default solver, every tier weight 1, ``--time-limit`` for the whole call); FGD and
best-fit place the same sequence online, one pod at a time with B1's node ranks, in the same process.
The plan's bound on its queue term is converted to allocation terms (see
:func:`benchmarks.common.queue_bound_milli`); the capacity bound is min(arrived, capacity).

Run ``python -m benchmarks.b3_offline --help``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from benchmarks.common import (
    arrived_pods,
    capacity_milli,
    compile_pods,
    openb_cluster,
    openb_trace,
    parse_seeds,
    place_online,
    plan_at_once,
    plan_gpu_milli,
    scorer_for,
    total_milli,
    write,
)
from gpuplan.models import Workload

log = logging.getLogger("benchmarks.b3")

#: Where the arrival sequence is cut, as a share of GPU capacity.
ARRIVED = 1.0


def cut(pods: Sequence[Workload], limit: float) -> list[Workload]:
    """The pods up to and including the one whose arrival brings the GPU request to ``limit`` milli."""
    out: list[Workload] = []
    arrived = 0
    for w in pods:
        if arrived >= limit:
            break
        out.append(w)
        arrived += total_milli(w)
    return out


def run_offline(trace: str, seed: int, time_limit: float) -> dict[str, object]:
    """One seed: gpuplan at once against FGD and best-fit online on the same 100% arrival sequence."""
    nodes, base = openb_trace(trace)
    capacity = capacity_milli(nodes)
    order, rank = arrived_pods(trace, seed)
    pods = cut(order, ARRIVED * capacity)
    requests = compile_pods(pods)
    arrived = sum(total_milli(w) for w in pods)
    row: dict[str, object] = {
        "trace": trace,
        "seed": seed,
        "pods": len(pods),
        "arrived_pct": round(100 * arrived / capacity, 2),
        "capacity_bound_pct": round(100 * min(arrived, capacity) / capacity, 2),
    }
    used = {}
    for policy in ("greedy-fgd", "best-fit"):
        used[policy] = place_online(nodes, requests, scorer_for(policy, nodes, base), rank).used
        row[f"{policy}_pct"] = round(100 * used[policy] / capacity, 2)
    plan_row, plan = plan_at_once(openb_cluster(), pods, time_limit, seed)
    row.update(plan_row)
    row["gain_vs_fgd"] = round(100 * (plan_gpu_milli(plan.assignments) - used["greedy-fgd"]) / capacity, 2)
    log.info("%s", row)
    return row


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", default="default")
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--time-limit", type=float, default=120.0, help="make_plan seconds per seed")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/b3.csv"))
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO if args.verbose else logging.WARNING)
    rows = [
        run_offline(t, s, args.time_limit) for t in args.traces.split(",") for s in parse_seeds(args.seeds)
    ]
    frame = pd.DataFrame(rows)
    write(frame, args.out)
    print(frame.to_string(index=False))
    for col in ("gpuplan_pct", "greedy-fgd_pct", "best-fit_pct", "gain_vs_fgd"):
        print(f"median {col}: {statistics.median(frame[col])}")


if __name__ == "__main__":
    main()

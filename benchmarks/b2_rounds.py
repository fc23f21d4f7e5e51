"""B2 / B2-m: periodic rounds on the Alibaba openb trace, gpuplan against FGD and best-fit.

The arrival sequence of each seed is B1's (shuffled, inflated to 130% of GPU capacity). Arrivals are
released in rounds of 1% of GPU capacity; each round the executor (``planner.executor``, on a simulated
cluster) has ``make_plan`` plan the round's arrivals together with everything still waiting and applies
the plan: placed work stays (B2) or up to ``--moves`` of the running pods may migrate (B2-m: the
policy's budget; the engine chooses what moves). A waiting pod that no longer fits anywhere is dropped,
as in the FGD protocol. FGD and best-fit place the same sequence one pod at a time (B1's protocol), in
the same process. The policy gives every tier weight 1, so the queue term is the GPU demand left
waiting and the comparison is about packing only. With ``--node-order-seed`` gpuplan gets the cluster's
node rows shuffled with that seed (the baselines keep B1's order): its rounds should not depend on it.

Run ``python -m benchmarks.b2_rounds --help``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchmarks.b1_online import run
from benchmarks.common import (
    arrived_pods,
    bench_policy,
    counts,
    held_gpu_milli,
    nodes_shuffled,
    openb_cluster,
    p99,
    parse_seeds,
    plan_rounds,
    rounds,
    total_milli,
    write,
)
from gpuplan.models import Policy
from gpuplan.planner.executor import ARRIVAL_WINDOW

log = logging.getLogger("benchmarks.b2")

#: Arrived percentages at which allocation is reported.
REPORT_AT = (100, 130)

#: Round size, as a share of the GPU capacity.
ROUND_STEP = 0.01


@dataclass(frozen=True)
class RoundsRun:
    """One gpuplan rounds run and the baselines on the same arrivals."""

    trace: str
    seed: int
    moves: float
    node_order: str
    alloc: dict[int, float]
    fgd: dict[int, float]
    best_fit: dict[int, float]
    round_wall_s: list[float]
    moves_per_round: list[int]
    dropped: int
    statuses: Counter[str]


def run_rounds(
    trace: str,
    seed: int,
    time_limit: float,
    moves: float,
    arrival_window: int = ARRIVAL_WINDOW,
    node_order: int | None = None,
) -> RoundsRun:
    """gpuplan's rounds on one seed's arrivals (on the node rows shuffled with ``node_order`` if given),
    plus FGD and best-fit on the same arrivals."""
    cluster = openb_cluster()
    if node_order is not None:
        cluster = nodes_shuffled(cluster, node_order)
    capacity = 1000 * cluster.gpu_count

    def policy(running: int) -> Policy:
        return bench_policy(int(moves * running))

    order, _ = arrived_pods(trace, seed)
    log.info("%s seed %d: %d pods", trace, seed, len(order))
    ours = plan_rounds(
        cluster,
        rounds(order, total_milli, ROUND_STEP * capacity),
        policy=policy,
        size=total_milli,
        held=held_gpu_milli,
        time_limit=time_limit,
        seed=seed,
        on_round=log.info,
        arrival_window=arrival_window,
    )
    fgd = run(trace, "greedy-fgd", seed).curve
    best = run(trace, "best-fit", seed).curve
    return RoundsRun(
        trace,
        seed,
        moves,
        "file" if node_order is None else f"shuffled-{node_order}",
        {k: ours.at(capacity, k) for k in REPORT_AT},
        {k: fgd[k] for k in REPORT_AT},
        {k: best[k] for k in REPORT_AT},
        ours.walls,
        ours.moved,
        sum(ours.dropped),
        ours.statuses,
    )


def summarise(runs: Sequence[RoundsRun]) -> pd.DataFrame:
    """Per trace: means over seeds of gpuplan, FGD and best-fit, and round statistics."""
    rows = []
    for trace in dict.fromkeys(r.trace for r in runs):
        rs = [r for r in runs if r.trace == trace]
        walls = [w for r in rs for w in r.round_wall_s]
        row: dict[str, object] = {
            "trace": trace,
            "seeds": len(rs),
            "moves": rs[0].moves,
            "node_order": ",".join(dict.fromkeys(r.node_order for r in rs)),
        }
        for k in REPORT_AT:
            ours = statistics.mean(r.alloc[k] for r in rs)
            fgd = statistics.mean(r.fgd[k] for r in rs)
            row[f"gpuplan_{k}"] = round(ours, 2)
            row[f"fgd_{k}"] = round(fgd, 2)
            row[f"best_fit_{k}"] = round(statistics.mean(r.best_fit[k] for r in rs), 2)
            row[f"gain_vs_fgd_{k}"] = round(ours - fgd, 2)
        row["round_wall_median_s"] = round(statistics.median(walls), 2)
        row["round_wall_p99_s"] = round(p99(walls), 2)
        row["moves_per_round_mean"] = round(statistics.mean(m for r in rs for m in r.moves_per_round), 2)
        row["dropped_per_run"] = round(statistics.mean(r.dropped for r in rs), 1)
        row["round_statuses"] = counts(sum((r.statuses for r in rs), Counter()))
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", default="default,gpushare100,multigpu50")
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--time-limit", type=float, default=3.0, help="make_plan seconds per round")
    parser.add_argument("--moves", type=float, default=0.0, help="share of running pods movable per round")
    parser.add_argument(
        "--arrival-window",
        type=int,
        default=ARRIVAL_WINDOW,
        help="latest arrived replicas whose mix fragmentation is measured against (0: the demand's own mix)",
    )
    parser.add_argument(
        "--node-order-seed", type=int, default=None, help="shuffle gpuplan's node rows with this seed"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/b2.csv"))
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO if args.verbose else logging.WARNING)
    runs = [
        run_rounds(trace, seed, args.time_limit, args.moves, args.arrival_window, args.node_order_seed)
        for trace in args.traces.split(",")
        for seed in parse_seeds(args.seeds)
    ]
    table = summarise(runs)
    write(table, args.out)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()

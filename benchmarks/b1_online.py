"""B1: online placement of the Alibaba openb trace, following the FGD paper's protocol.

Per seed the pod list is shuffled, then inflated by resampling pods uniformly with replacement until the
arrived GPU request would pass 130% of the cluster's GPU capacity (or deflated by dropping random pods,
as the simulator's ``TunePodsByNodeTotalResource`` does); pods are placed one at a time, never leave,
and a pod that does not fit is dropped. The allocation ratio (allocated GPU milli / capacity) after
every pod is averaged over the pods whose arrived GPU request rounds to each integer percent, as the
reference's ``merge_alloc_discrete`` does. Ties between nodes go to a random node rank drawn per seed
(the simulator prefixes node names with a random rank and keeps the smallest name).

Run ``python -m benchmarks.b1_online --help``.
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchmarks.common import (
    TRACE_DIR,
    arrivals,
    capacity_milli,
    curve,
    markdown,
    openb_trace,
    parse_seeds,
    place_online,
    scorer_for,
    write,
)

#: Arrived percentages reported.
PERCENTS = range(131)

#: The reference simulator's directory name for each of our policies.
REFERENCE_POLICY = {"best-fit": "05-BestFit", "greedy-fgd": "06-FGD"}

REFERENCE_FILE = TRACE_DIR / "reference-results" / "alloc_ratio_mean_over_seeds.csv"


@dataclass(frozen=True)
class Run:
    """One (trace, policy, seed) run: its allocation curve and cost."""

    trace: str
    policy: str
    seed: int
    curve: dict[int, float]
    wall_s: float
    pods: int
    failed: int


def run(trace: str, policy: str, seed: int) -> Run:
    """Run the protocol once and time it (target-mix estimation and placement, not file loading)."""
    nodes, pods = openb_trace(trace)
    start = time.perf_counter()
    capacity = capacity_milli(nodes)
    order, rank = arrivals(pods, capacity, len(nodes), seed)
    online = place_online(nodes, [pods[i] for i in order], scorer_for(policy, nodes, pods), rank)
    wall = time.perf_counter() - start
    alloc = curve(online.records, capacity, PERCENTS)
    return Run(trace, policy, seed, alloc, wall, len(order), online.failed)


def summarise(runs: Sequence[Run]) -> pd.DataFrame:
    """Mean over seeds at 100% and 130% arrived, next to the reference, with wall times."""
    ref: dict[tuple[str, str, int], float] = {}
    for rec in pd.read_csv(REFERENCE_FILE).to_dict("records"):
        for k in (100, 130):
            ref[(str(rec["workload"]), str(rec["sc_policy"]), k)] = float(rec[f"arrived_{k}"])
    rows = []
    keys = sorted({(r.trace, r.policy) for r in runs})
    for trace, policy in keys:
        group = [r for r in runs if (r.trace, r.policy) == (trace, policy)]
        row: dict[str, object] = {"trace": trace, "policy": policy, "seeds": len(group)}
        for k in (100, 130):
            ours = statistics.fmean(r.curve[k] for r in group)
            theirs = ref.get((f"openb_pod_list_{trace}", REFERENCE_POLICY.get(policy, ""), k), math.nan)
            row[f"ours_{k}"] = round(ours, 2)
            row[f"ref_{k}"] = round(theirs, 2)
            row[f"diff_{k}"] = round(ours - theirs, 2)
        row["median_wall_s"] = round(statistics.median(r.wall_s for r in group), 2)
        row["max_wall_s"] = round(max(r.wall_s for r in group), 2)
        row["pods_per_run"] = round(statistics.fmean(r.pods for r in group))
        row["failed_per_run"] = round(statistics.fmean(r.failed for r in group))
        rows.append(row)
    return pd.DataFrame(rows)


def _curves(runs: Sequence[Run]) -> pd.DataFrame:
    rows = []
    for r in runs:
        row: dict[str, object] = {
            "trace": r.trace,
            "policy": r.policy,
            "seed": r.seed,
            "wall_s": round(r.wall_s, 3),
            "pods": r.pods,
            "failed": r.failed,
        }
        row.update({f"arrived_{k}": r.curve.get(k) for k in PERCENTS})
        rows.append(row)
    return pd.DataFrame(rows)


#: The README table: (header, column, format).
TABLE = (
    ("trace", "trace", ""),
    ("policy", "policy", ""),
    ("ours@100", "ours_100", ".2f"),
    ("ref@100", "ref_100", ".2f"),
    ("ours@130", "ours_130", ".2f"),
    ("ref@130", "ref_130", ".2f"),
    ("diff@100", "diff_100", "+.2f"),
    ("diff@130", "diff_130", "+.2f"),
    ("median wall s", "median_wall_s", ".1f"),
)


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", default="default,gpushare100,multigpu50")
    parser.add_argument("--seeds", default="42-51", help="e.g. 42-51 or 42,45")
    parser.add_argument("--policies", default="best-fit,greedy-fgd")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/b1.csv"))
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one process each)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    traces = [t for t in args.traces.split(",") if t]
    policies = [p for p in args.policies.split(",") if p]
    tasks = [(t, p, s) for t in traces for p in policies for s in parse_seeds(args.seeds)]
    for t in traces:
        openb_trace(t)
    runs: list[Run] = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for r in pool.map(run, *zip(*tasks, strict=True)):
            print(
                f"{r.trace:12s} {r.policy:10s} seed {r.seed}: {r.curve.get(100, float('nan')):6.2f}% at 100, "
                f"{r.curve.get(130, float('nan')):6.2f}% at 130, {r.failed} of {r.pods} pods dropped, "
                f"{r.wall_s:.1f} s",
                flush=True,
            )
            runs.append(r)
    summary = summarise(runs)
    write(summary, args.out)
    write(_curves(runs), args.out.with_name(f"{args.out.stem}_curves.csv"))
    print(markdown(summary, TABLE))


if __name__ == "__main__":
    main()

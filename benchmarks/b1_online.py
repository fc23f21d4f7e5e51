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
import random
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd

from benchmarks._openb import TRACE_DIR, load_nodes, load_pods
from gpuplan.models import default_catalog
from gpuplan.solvers.greedy import BestFitScorer, FgdScorer, FirstFitScorer
from gpuplan.solvers.placement import Placer, Scorer, target_mix
from gpuplan.solvers.problem import NodeSpec, Request

#: Arrived GPU request the protocol inflates the trace to, as a share of GPU capacity.
TUNE_RATIO = 1.3

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


def per_gpu_milli(r: Request) -> int:
    """The pod's GPU request per GPU (the simulator's ``MilliGpu``), in milli-GPU."""
    s = r.shapes[0]
    return 1000 if s.kind == "whole" else s.milli


def total_milli(r: Request) -> int:
    """The pod's total GPU request, in milli-GPU."""
    return r.shapes[0].gpu_milli_total


def arrivals(
    pods: Sequence[Request], capacity_milli: int, n_nodes: int, seed: int
) -> tuple[list[Request], list[int]]:
    """The pods in arrival order for one seed, and the node tie-break ranks.

    Mirrors the simulator: shuffle the name-sorted list, then tune it to ``TUNE_RATIO`` times the capacity
    (resample while the next pod's per-GPU request still fits under the target, or drop random pods
    while above it), then draw the node ranks from the same generator.
    """
    rng = random.Random(seed)
    order = list(pods)
    rng.shuffle(order)
    total = sum(total_milli(p) for p in order)
    target = TUNE_RATIO * capacity_milli
    if total < target:
        while True:
            pod = pods[rng.randrange(len(pods))]
            if total + per_gpu_milli(pod) > target:
                break
            total += total_milli(pod)
            order.append(pod)
    while total > target:
        total -= total_milli(order.pop(rng.randrange(len(order))))
    rank = list(range(n_nodes))
    rng.shuffle(rank)
    return order, rank


def curve(records: Sequence[tuple[int, int]], capacity_milli: int) -> dict[int, float]:
    """Mean allocation (%) over the pods whose arrived request rounds to each percent."""
    frame = pd.DataFrame(records, columns=["arrived", "used"])
    frame["arrive"] = (frame["arrived"] * 100 / capacity_milli).round(0)
    frame["alloc"] = (frame["used"] * 100 / capacity_milli).round(2)
    out: dict[int, float] = {}
    for k in PERCENTS:
        rows = frame[frame["arrive"] == k]
        if rows.empty:
            rows = frame[(frame["arrive"] >= k - 1) & (frame["arrive"] <= k + 1)]
        if not rows.empty:
            out[k] = round(float(rows["alloc"].mean()), 2)
    return out


@cache
def _trace(trace: str) -> tuple[tuple[NodeSpec, ...], tuple[Request, ...]]:
    return load_nodes(), load_pods(trace)


def scorer_for(policy: str, nodes: Sequence[NodeSpec], pods: Sequence[Request]) -> Scorer:
    """The scorer of ``policy``; FGD's target mix comes from the trace's own (un-inflated) pods."""
    if policy == "greedy-fgd":
        return FgdScorer(target_mix(pods))
    if policy == "best-fit":
        return BestFitScorer.for_nodes(nodes)
    if policy == "first-fit":
        return FirstFitScorer()
    raise ValueError(f"unknown policy '{policy}' (choose best-fit, greedy-fgd or first-fit)")


def run(trace: str, policy: str, seed: int) -> Run:
    """Run the protocol once and time it (target-mix estimation and placement, not file loading)."""
    nodes, pods = _trace(trace)
    start = time.perf_counter()
    capacity = sum(1000 * len(n.gpus) for n in nodes)
    order, rank = arrivals(pods, capacity, len(nodes), seed)
    placer = Placer(nodes, default_catalog(), scorer_for(policy, nodes, pods), rank=rank)
    arrived = failed = 0
    records: list[tuple[int, int]] = []
    for pod in order:
        arrived += total_milli(pod)
        if placer.place(pod) is None:
            failed += 1
        records.append((arrived, placer.used_gpu_milli))
    wall = time.perf_counter() - start
    return Run(trace, policy, seed, curve(records, capacity), wall, len(order), failed)


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


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


def _markdown(summary: pd.DataFrame) -> str:
    head = (
        "| trace | policy | ours@100 | ref@100 | ours@130 | ref@130 | diff@100 | diff@130 | median wall s |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in summary.itertuples(index=False):
        lines.append(
            f"| {r.trace} | {r.policy} | {r.ours_100:.2f} | {r.ref_100:.2f} | {r.ours_130:.2f} | "
            f"{r.ref_130:.2f} | {r.diff_100:+.2f} | {r.diff_130:+.2f} | {r.median_wall_s:.1f} |"
        )
    return "\n".join(lines)


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
    tasks = [(t, p, s) for t in traces for p in policies for s in _seeds(args.seeds)]
    for t in traces:
        _trace(t)
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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary.to_csv(args.out, index=False)
    _curves(runs).to_csv(args.out.with_name(f"{args.out.stem}_curves.csv"), index=False)
    print(_markdown(summary))


if __name__ == "__main__":
    main()

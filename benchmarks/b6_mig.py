"""B6: MIG placement on the Alibaba openb trace, gpuplan's rounds against MIG-aware FGD and first-fit.

The setting (MIG cluster, pods as MIG profiles, arrival order) is :mod:`benchmarks.b6_setup`'s. gpuplan
plans rounds of 1% of the GPU capacity (in compute slices) through the executor on a simulated cluster
(``make_plan``; placed work stays; the executor applies the plan's MIG creates and destroys; a waiting
pod that fits nowhere is dropped); FGD (target mix of the MIG pods) and first-fit place the same
sequence one pod at a time, create instances only in free slices, never destroy, and drop what does
not fit.

Settings: ``keep`` (standard layouts, new instances only in free slices), ``repartition`` (same start,
gpuplan may also destroy idle instances) and ``empty`` (MIG on, no instances; everything is created on
demand).

Run ``python -m benchmarks.b6_mig --help``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchmarks.b6_setup import (
    build_cluster,
    capacity_slices,
    held_slices,
    mig_arrivals,
    mig_pods,
    slices,
    spec,
)
from benchmarks.common import (
    RoundsTrace,
    bench_policy,
    compile_nodes,
    compile_pods,
    counts,
    markdown,
    p99,
    parse_seeds,
    plan_rounds,
    rounds,
    write,
)
from gpuplan.models import Cluster, Policy, default_catalog
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.policy import MigPolicy
from gpuplan.planner.validation.occupancy import Holding, Key
from gpuplan.solvers.greedy import FgdScorer, FirstFitScorer
from gpuplan.solvers.placement import Placer, Scorer, target_mix
from gpuplan.solvers.problem import Request

log = logging.getLogger("benchmarks.b6")

#: Settings: (start layouts, gpuplan may destroy idle instances).
SETTINGS: dict[str, tuple[str, bool]] = {
    "keep": ("mixed", False),
    "repartition": ("mixed", True),
    "empty": ("empty", False),
}

#: Arrived percentages (of GPU capacity, in compute slices) at which results are reported.
REPORT_AT = (100, 130)

#: Round size, as a share of the GPU capacity in compute slices.
ROUND_STEP = 0.01


@dataclass(frozen=True)
class B6Run:
    """One (setting, seed): gpuplan's rounds and both greedy baselines on the same cluster and arrivals."""

    setting: str
    seed: int
    gpus: int
    capacity: int
    gpuplan: RoundsTrace
    fgd: RoundsTrace
    first_fit: RoundsTrace
    pods: int
    until: int

    @property
    def report_at(self) -> tuple[int, ...]:
        """The reported percentages the run reached."""
        return tuple(k for k in REPORT_AT if k <= self.until)


def greedy_rounds(
    cluster: Cluster,
    requests: Sequence[Request],
    sizes: Sequence[int],
    scorer: Scorer,
    rank: Sequence[int],
    catalog: HardwareCatalog,
) -> RoundsTrace:
    """Place the sequence one pod at a time (a pod that fits nowhere is dropped); record at the end of
    every round (``sizes``: pods per round). New instances only in free slices; nothing is destroyed."""
    placer = Placer(compile_nodes(cluster), catalog, scorer, allow_create=True, rank=rank)
    model = spec(catalog)
    out = RoundsTrace()
    arrived = held = done = 0
    for size in sizes:
        for req in requests[done : done + size]:
            profile = req.shapes[0].mig_profile
            need = 0 if profile is None else model.profile(profile).compute_slices
            arrived += need
            if placer.place(req) is not None:
                held += need
        done += size
        out.arrived.append(arrived)
        out.held.append(held)
    return out


def run(setting: str, seed: int, count: int | None, time_limit: float, until: int) -> B6Run:
    """One setting and seed: FGD and first-fit, then gpuplan's rounds, on the same cluster and arrivals
    (simulated up to ``until`` % of capacity arrived, plus one round)."""
    start, repartition = SETTINGS[setting]
    catalog = default_catalog()
    cluster = build_cluster(count, start, catalog)
    capacity = capacity_slices(cluster, catalog)
    pods, rank = mig_arrivals(seed, cluster, catalog, until / 100 + ROUND_STEP)
    batches = rounds(pods, lambda w: slices(w, catalog), ROUND_STEP * capacity)
    requests = compile_pods(pods)
    sizes = [len(b) for b in batches]
    mix = target_mix(compile_pods(mig_pods()))
    fgd = greedy_rounds(cluster, requests, sizes, FgdScorer(mix), rank, catalog)
    first = greedy_rounds(cluster, requests, sizes, FirstFitScorer(), rank, catalog)

    def policy(_running: int) -> Policy:
        return bench_policy(mig=MigPolicy(allow_create=True, allow_repartition=repartition))

    def held(running: Mapping[Key, Holding]) -> int:
        return held_slices(running, catalog)

    ours = plan_rounds(
        cluster,
        batches,
        policy=policy,
        size=lambda w: slices(w, catalog),
        held=held,
        time_limit=time_limit,
        seed=seed,
        on_round=lambda line: log.info("%s seed %d %s", setting, seed, line),
    )
    return B6Run(setting, seed, cluster.gpu_count, capacity, ours, fgd, first, len(pods), until)


def per_run(runs: Sequence[B6Run]) -> pd.DataFrame:
    """One row per (setting, seed): placed demand (% of capacity in compute slices) at each reported
    arrival percentage, gpuplan's MIG instances created and destroyed, round statistics."""
    rows = []
    for r in runs:
        row: dict[str, object] = {"setting": r.setting, "seed": r.seed, "gpus": r.gpus, "pods": r.pods}
        for k in r.report_at:
            for name, c in (("gpuplan", r.gpuplan), ("fgd", r.fgd), ("first_fit", r.first_fit)):
                row[f"{name}_{k}"] = c.at(r.capacity, k)
        row["gpuplan_created"] = sum(r.gpuplan.created)
        row["gpuplan_destroyed"] = sum(r.gpuplan.destroyed)
        row["gpuplan_dropped"] = sum(r.gpuplan.dropped)
        row["rounds"] = len(r.gpuplan.walls)
        row["round_wall_median_s"] = round(statistics.median(r.gpuplan.walls), 2)
        row["round_wall_max_s"] = round(max(r.gpuplan.walls), 2)
        row["statuses"] = counts(r.gpuplan.statuses)
        rows.append(row)
    return pd.DataFrame(rows)


def summarise(runs: Sequence[B6Run]) -> pd.DataFrame:
    """Per setting: means over seeds, differences and ratios, round statistics and instance counts."""
    frame = per_run(runs)
    rows = []
    for setting in dict.fromkeys(r.setting for r in runs):
        rs = [r for r in runs if r.setting == setting]
        f = frame[frame["setting"] == setting]
        start, repartition = SETTINGS[setting]
        row: dict[str, object] = {
            "setting": setting,
            "start": start,
            "repartition": repartition,
            "seeds": len(rs),
            "gpus": rs[0].gpus,
        }
        for k in rs[0].report_at:
            ours, fgd, ff = (float(f[f"{n}_{k}"].mean()) for n in ("gpuplan", "fgd", "first_fit"))
            row[f"gpuplan_{k}"] = round(ours, 2)
            row[f"fgd_{k}"] = round(fgd, 2)
            row[f"first_fit_{k}"] = round(ff, 2)
            row[f"diff_vs_fgd_{k}"] = round(ours - fgd, 2)
            row[f"diff_vs_ff_{k}"] = round(ours - ff, 2)
            row[f"ratio_vs_fgd_{k}"] = round(ours / fgd, 3) if fgd else None
        walls = [w for r in rs for w in r.gpuplan.walls]
        row["round_wall_median_s"] = round(statistics.median(walls), 2)
        row["round_wall_p99_s"] = round(p99(walls), 2)
        row["round_statuses"] = counts(sum((r.gpuplan.statuses for r in rs), Counter()))
        for name in ("gpuplan_created", "gpuplan_destroyed", "gpuplan_dropped"):
            row[f"{name}_per_run"] = round(float(f[name].mean()), 1)
        row["instances"] = f"{row['gpuplan_created_per_run']:.0f} / {row['gpuplan_destroyed_per_run']:.0f}"
        rows.append(row)
    return pd.DataFrame(rows)


#: README table at 100% arrived: (header, column, format).
TABLE = (
    ("setting", "setting", ""),
    ("gpuplan", "gpuplan_100", ".2f"),
    ("FGD", "fgd_100", ".2f"),
    ("first-fit", "first_fit_100", ".2f"),
    ("gpuplan - FGD", "diff_vs_fgd_100", "+.2f"),
    ("round wall median s", "round_wall_median_s", ".2f"),
    ("p99 s", "round_wall_p99_s", ".2f"),
    ("created / destroyed per run", "instances", ""),
    ("statuses", "round_statuses", ""),
)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--settings", default=",".join(SETTINGS), help="keep,repartition,empty")
    parser.add_argument("--seeds", default="42-44", help="e.g. 42-44 or 42,45")
    parser.add_argument(
        "--nodes", type=int, default=100, help="evenly sub-sample this many nodes (0: all 1,213)"
    )
    parser.add_argument("--time-limit", type=float, default=2.0, help="make_plan seconds per round")
    parser.add_argument("--until", type=int, default=max(REPORT_AT), help="last arrived %% simulated")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/b6.csv"))
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO if args.verbose else logging.WARNING)
    runs: list[B6Run] = []
    for setting in [s for s in args.settings.split(",") if s]:
        for seed in parse_seeds(args.seeds):
            t0 = time.perf_counter()
            r = run(setting, seed, args.nodes or None, args.time_limit, args.until)
            runs.append(r)
            k = min(100, args.until)
            ours, fgd, ff = (c.at(r.capacity, k) for c in (r.gpuplan, r.fgd, r.first_fit))
            print(
                f"{setting:12s} seed {seed}: placed at {k}% arrived: gpuplan {ours:.2f} "
                f"FGD {fgd:.2f} first-fit {ff:.2f}; "
                f"{len(r.gpuplan.walls)} rounds, {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
    summary = summarise(runs)
    write(summary, args.out)
    write(per_run(runs), args.out.with_name(f"{args.out.stem}_runs.csv"))
    print(summary.to_string(index=False))
    if "gpuplan_100" in summary.columns:
        summary["instances"] = [
            f"{c:.0f} / {d:.0f}"
            for c, d in zip(summary.gpuplan_created_per_run, summary.gpuplan_destroyed_per_run, strict=True)
        ]
        print(markdown(summary, TABLE))


if __name__ == "__main__":
    main()

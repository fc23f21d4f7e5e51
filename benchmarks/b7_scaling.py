"""B7 scaling: B2's periodic rounds on the openb cluster replicated 1x, 2x, 4x, 8x.

Scale k copies every node k times and every arriving pod k times in place (so the arrival mix and the
rounds, 1% of GPU capacity each, stay proportional). Fleets over ``solvers.cpsat.pools.POOL_GPUS`` GPUs
are split into parts solved in parallel processes, one per core; each round's time limit is the base
limit times k / cores (at least the base), so every part gets about the base limit.
Reported per scale: GPUs, allocation at 100% and 130% arrived, per-round wall time median / p99 and the
ratio to 1x, and the peak resident memory of the benchmark and its solver processes.

Each scale's run is appended to `b7.jsonl` next to the CSV; the table shows the newest run of each scale.

Run ``python -m benchmarks.b7_scaling --help``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd

from benchmarks.b1_online import _trace, arrivals
from benchmarks.b2_rounds import REPORT_AT, _at, plan_rounds
from gpuplan.solvers.cpsat.pools import part_count
from gpuplan.solvers.problem import NodeSpec, Request

log = logging.getLogger("benchmarks.b7")

#: Solver processes per round (``PlacementProblem.num_workers``' default): the machine's 2 cores.
CORES = 2


def replicate(
    nodes: Sequence[NodeSpec], order: Sequence[Request], k: int
) -> tuple[tuple[NodeSpec, ...], list[Request]]:
    """``k`` copies of every node, and every pod of the arrival order repeated ``k`` times in place."""
    big = tuple(replace(n, name=f"{n.name}#{j}") for j in range(k) for n in nodes)
    pods = [replace(p, workload=f"{p.workload}#{j}") for p in order for j in range(k)]
    return big, pods


def _rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants, KiB (Linux ``/proc``)."""
    total = 0
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        total += sum(_rss_kib(int(c)) for c in children)
    return total


@dataclass(frozen=True)
class ScaleRun:
    """One scale's rounds run."""

    scale: int
    gpus: int
    parts: int
    alloc: dict[int, float]
    walls: list[float]
    peak_rss_mib: float
    statuses: dict[str, int]
    wall_total_s: float


def run_scale(trace: str, seed: int, k: int, time_limit: float) -> ScaleRun:
    """The rounds run at scale ``k``."""
    nodes, pods = _trace(trace)
    capacity = sum(1000 * len(n.gpus) for n in nodes)
    order, _ = arrivals(pods, capacity, len(nodes), seed)
    order = [replace(p, workload=f"{p.workload}~{i}") for i, p in enumerate(order)]
    big, arriving = replicate(nodes, order, k)
    peak = [0]

    def sample() -> None:
        peak[0] = max(peak[0], _rss_kib(os.getpid()))

    t0 = time.perf_counter()
    limit = time_limit * max(1.0, k / CORES)
    out = plan_rounds(big, arriving, seed, limit, 0.0, on_round=sample)
    return ScaleRun(
        k,
        sum(len(n.gpus) for n in big),
        part_count(big),
        {p: _at(out.curve, p) for p in REPORT_AT},
        out.walls,
        round(peak[0] / 1024, 1),
        out.statuses,
        round(time.perf_counter() - t0, 1),
    )


def _p99(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def summarise(runs: Sequence[ScaleRun]) -> pd.DataFrame:
    """One row per scale, with ratios to the 1x run when it is present."""
    base = next((r for r in runs if r.scale == 1), None)
    rows = []
    for r in runs:
        med = statistics.median(r.walls)
        row: dict[str, object] = {"scale": r.scale, "gpus": r.gpus, "parts": r.parts}
        for p in REPORT_AT:
            row[f"alloc_{p}"] = r.alloc[p]
            if base is not None:
                row[f"alloc_{p}_vs_1x"] = round(r.alloc[p] - base.alloc[p], 2)
        row["round_wall_median_s"] = round(med, 2)
        row["round_wall_p99_s"] = round(_p99(r.walls), 2)
        if base is not None:
            row["median_vs_1x"] = round(med / statistics.median(base.walls), 2)
        row["peak_rss_mib"] = r.peak_rss_mib
        row["rounds"] = len(r.walls)
        row["statuses"] = " ".join(f"{s}:{n}" for s, n in sorted(r.statuses.items()))
        row["run_wall_s"] = r.wall_total_s
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trace", default="default")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--scales", default="1,2,4,8")
    parser.add_argument("--time-limit", type=float, default=3.0, help="CP-SAT seconds per round at 1x")
    parser.add_argument("--out", default="benchmarks/results/b7.csv")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    runs_file = Path(args.out).with_suffix(".jsonl")
    runs_file.parent.mkdir(parents=True, exist_ok=True)
    for k in (int(s) for s in args.scales.split(",")):
        run = run_scale(args.trace, args.seed, k, args.time_limit)
        with runs_file.open("a") as f:
            f.write(json.dumps({**asdict(run), "trace": args.trace, "seed": args.seed}) + "\n")
        table = summarise(_latest(runs_file, args.trace, args.seed))
        table.to_csv(args.out, index=False)
        print(table.to_string(index=False), flush=True)


def _latest(path: Path, trace: str, seed: int) -> list[ScaleRun]:
    """The newest recorded run of each scale for this trace and seed, by scale."""
    latest: dict[int, ScaleRun] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.pop("trace") != trace or row.pop("seed") != seed:
            continue
        row["alloc"] = {int(p): a for p, a in row["alloc"].items()}
        latest[row["scale"]] = ScaleRun(**row)
    return [latest[k] for k in sorted(latest)]


if __name__ == "__main__":
    main()

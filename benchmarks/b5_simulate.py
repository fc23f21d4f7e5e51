"""B5: gpuplan's rounds against FGD (tier-then-FIFO) and best-fit (FIFO) on simulated Poisson arrivals.

``gpuplan simulate`` runs the three policies on the same arrivals and run times at each load (every
option is passed to it unchanged; ``--out`` defaults to ``benchmarks/results/b5.csv``); this benchmark
then checks the targets at rho = 0.95: tier-weighted mean wait at most 0.6x the best baseline's,
latency-sensitive p95 wait at most 60 s, time-averaged allocation at most 0.5 point below the best
baseline's. With ``--admission greedy`` every policy also places each job at its arrival (the same
admission for all, each with its own node score).

Run ``python -m benchmarks.b5_simulate --rho-list 0.85,0.95,1.05 --admission greedy`` (``gpuplan
simulate --help`` lists the options).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import pandas as pd

from gpuplan.planner.cli import main as cli_main

DEFAULT_OUT = "benchmarks/results/b5.csv"

LS = "p95_wait_s[latency-sensitive]"
#: Target on the latency-sensitive p95 wait, seconds.
LS_TARGET_S = 60.0


def targets(rows: Sequence[dict[str, object]], rho: float) -> list[str]:
    """The three targets at ``rho``, each with its numbers and met/missed."""
    at = {
        str(r["policy"]): {k: v for k, v in r.items() if isinstance(v, int | float)}
        for r in rows
        if r["rho"] == rho
    }
    if "gpuplan" not in at:
        return []
    ours = at.pop("gpuplan")
    best_wait = min(float(m["tier_weighted_mean_wait_s"]) for m in at.values())
    best_alloc = max(float(m["alloc_pct"]) for m in at.values())
    wait, ls, alloc = float(ours["tier_weighted_mean_wait_s"]), float(ours[LS]), float(ours["alloc_pct"])
    ratio = wait / best_wait if best_wait else (float("inf") if wait else 1.0)
    floor = best_alloc - 0.5
    return [
        f"tier-weighted mean wait {wait:.0f} s vs best baseline {best_wait:.0f} s: {ratio:.2f}x "
        f"(target <= 0.6x) {'MET' if ratio <= 0.6 else 'MISSED'}",
        f"latency-sensitive p95 wait {ls:.0f} s (target <= {LS_TARGET_S:.0f} s) "
        f"{'MET' if ls <= LS_TARGET_S else 'MISSED'}",
        f"allocation {alloc:.2f}% vs best baseline {best_alloc:.2f}% (target >= {floor:.2f}%) "
        f"{'MET' if alloc >= floor else 'MISSED'}",
    ]


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: ``gpuplan simulate`` with the given options, then the targets."""
    args = list(sys.argv[1:] if argv is None else argv)
    known = argparse.ArgumentParser(add_help=False)
    known.add_argument("--out")
    seen, _ = known.parse_known_args(args)
    if seen.out is None:
        args += ["--out", DEFAULT_OUT]
    code = cli_main(["simulate", *args])
    if code:
        raise SystemExit(code)
    rows = [
        {str(k): v for k, v in r.items()} for r in pd.read_csv(seen.out or DEFAULT_OUT).to_dict("records")
    ]
    for line in targets(rows, 0.95):
        print(line)


if __name__ == "__main__":
    main()

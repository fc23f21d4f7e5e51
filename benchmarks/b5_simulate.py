"""B5: gpuplan's rounds against FGD (tier-then-FIFO) and best-fit (FIFO) on simulated Poisson arrivals.

Each load runs the three policies on the same arrivals and run times (``planner.simulate``) and checks
the targets at rho = 0.95: tier-weighted mean wait at most 0.6x the best baseline's, latency-sensitive
p95 wait at most one round, time-averaged allocation at most 0.5 point below the best baseline's.

Run ``python -m benchmarks.b5_simulate --help``.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from gpuplan.planner.simulate import SimConfig, simulate

log = logging.getLogger("benchmarks.b5")

LS = "p95_wait_s[latency-sensitive]"


def targets(rows: Sequence[dict[str, object]], rho: float, round_s: float) -> list[str]:
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
        f"latency-sensitive p95 wait {ls:.0f} s (target <= one round, {round_s:.0f} s) "
        f"{'MET' if ls <= round_s else 'MISSED'}",
        f"allocation {alloc:.2f}% vs best baseline {best_alloc:.2f}% (target >= {floor:.2f}%) "
        f"{'MET' if alloc >= floor else 'MISSED'}",
    ]


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rho", default="0.85,0.95,1.05")
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--hours", type=float, default=5.0)
    parser.add_argument("--warmup-hours", type=float, default=1.0)
    parser.add_argument("--round-s", type=float, default=300.0)
    parser.add_argument("--time-limit", type=float, default=2.0, help="CP-SAT seconds per round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/b5.csv")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR, format="%(message)s")
    rows: list[dict[str, object]] = []
    for rho in (float(r) for r in args.rho.split(",")):
        cfg = SimConfig(
            rho=rho,
            nodes=args.nodes,
            hours=args.hours,
            warmup_hours=args.warmup_hours,
            round_s=args.round_s,
            time_limit_s=args.time_limit,
            seed=args.seed,
        )
        result = simulate(cfg, progress=print)
        rows.extend({"rho": rho, "policy": name, **metrics} for name, metrics in result.items())
    table = pd.DataFrame(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    print(table.to_string(index=False))
    for line in targets(rows, 0.95, args.round_s):
        print(line)


if __name__ == "__main__":
    main()

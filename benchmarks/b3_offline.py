"""B3: the whole openb default pod list (98% of GPU capacity requested) planned at once.

gpuplan's CP-SAT engine (FGD start, then large-neighbourhood search with CP-SAT on fragmented nodes)
gets ``--time-limit`` seconds; FGD and best-fit place the same pods online in the same order, in the
same process. The upper bound is the GPU-capacity relaxation: every pod placed (min(request, capacity)).

Run ``python -m benchmarks.b3_offline --help``.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd

from benchmarks.b1_online import _seeds, _trace, scorer_for, total_milli
from benchmarks.b2_rounds import bench_policy
from gpuplan.models import Assignment, default_catalog
from gpuplan.solvers.cpsat import CpSat
from gpuplan.solvers.placement import Placer
from gpuplan.solvers.problem import PlacementProblem

log = logging.getLogger("benchmarks.b3")


def _used(assignments: Sequence[Assignment]) -> int:
    """Allocated GPU milli of a plan without MIG."""
    return sum(1000 if g.milli is None else g.milli for a in assignments for g in a.gpus)


def run_offline(trace: str, seed: int, time_limit: float) -> dict[str, object]:
    """One seed: gpuplan offline against FGD and best-fit online on the same shuffled pods."""
    nodes, pods = _trace(trace)
    catalog = default_catalog()
    capacity = sum(1000 * len(n.gpus) for n in nodes)
    order = list(pods)
    random.Random(seed).shuffle(order)
    order = [replace(p, workload=f"{p.workload}~{i}") for i, p in enumerate(order)]
    row: dict[str, object] = {"trace": trace, "seed": seed, "pods": len(order)}
    request = sum(total_milli(p) for p in order)
    row["requested_pct"] = round(100 * request / capacity, 2)
    row["bound_pct"] = round(100 * min(request, capacity) / capacity, 2)
    for policy in ("greedy-fgd", "best-fit"):
        placer = Placer(nodes, catalog, scorer_for(policy, nodes, pods))
        for pod in order:
            placer.place(pod)
        row[f"{policy}_pct"] = round(100 * placer.used_gpu_milli / capacity, 2)
    problem = PlacementProblem(
        nodes=nodes, requests=tuple(order), catalog=catalog, policy=bench_policy(0),
        time_limit_s=time_limit, seed=seed,
    )  # fmt: skip
    t0 = time.perf_counter()
    result = CpSat().solve(problem)
    row["gpuplan_wall_s"] = round(time.perf_counter() - t0, 1)
    row["gpuplan_pct"] = round(100 * _used(result.assignments) / capacity, 2)
    row["gpuplan_status"] = result.status.value
    row["lns_steps"] = int(result.terms.get("lns_steps", 0))
    row["gain_vs_fgd"] = round(float(row["gpuplan_pct"]) - float(row["greedy-fgd_pct"]), 2)  # type: ignore[arg-type]
    log.info("%s", row)
    return row


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", default="default")
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--out", default="benchmarks/results/b3.csv")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    rows = [run_offline(t, s, args.time_limit) for t in args.traces.split(",") for s in _seeds(args.seeds)]
    frame = pd.DataFrame(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False)
    print(frame.to_string(index=False))
    for col in ("gpuplan_pct", "greedy-fgd_pct", "best-fit_pct", "gain_vs_fgd"):
        print(f"median {col}: {statistics.median(frame[col])}")


if __name__ == "__main__":
    main()

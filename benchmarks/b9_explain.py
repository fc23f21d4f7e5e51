"""B9: why-not explanations with verified counterfactuals for 100 waiting workloads on the openb cluster.

The openb GPU nodes (FGD paper's Alibaba trace) receive a seeded shuffle of the default pod list until
110% of GPU capacity has arrived (pods as the openb importer reads them, with their QoS tiers and the
default policy); FGD plans it (not timed), and gpuplan explains the first ``--count``
waiting workloads: a reason code and sentence for each, and up to ``--counterfactuals`` changes, each
verified by re-solving its neighbourhood with the change applied (CP-SAT by default). The wall time
covers building the plan state, diagnosing and verifying.

Run ``python -m benchmarks.b9_explain --help``.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from benchmarks.common import openb_cluster, openb_pods, total_milli, write
from gpuplan.models import PlanningInput, Workload
from gpuplan.planner.explain.reasons import explain_all
from gpuplan.planner.planning import make_plan

log = logging.getLogger("benchmarks.b9")

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def openb_input(trace: str, seed: int, arrived: float) -> PlanningInput:
    """The openb cluster and a seeded shuffle of the pods until ``arrived`` x GPU capacity is asked."""
    cluster = openb_cluster()
    capacity = 1000 * cluster.gpu_count
    pods = list(openb_pods(trace))
    random.Random(seed).shuffle(pods)
    workloads: list[Workload] = []
    asked = 0
    for w in pods:
        if asked >= arrived * capacity:
            break
        asked += total_milli(w)
        workloads.append(w)
    return PlanningInput(cluster=cluster, workloads=tuple(workloads))


def run(
    trace: str, seed: int, arrived: float, count: int, counterfactuals: int, solver: str
) -> dict[str, object]:
    """One seed: plan with FGD, then explain ``count`` waiting workloads and time it."""
    inp = openb_input(trace, seed, arrived)
    plan = make_plan(inp, solver="greedy-fgd", now=NOW)
    waiting = list(dict.fromkeys(u.workload for u in plan.unplaced))[:count]
    t0, c0 = time.perf_counter(), time.process_time()
    found = explain_all(
        inp,
        plan,
        now=NOW,
        counterfactuals=counterfactuals,
        solver=solver,
        only=set(waiting),
        time_limit_s=2.0,
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    codes = Counter(e.code for e in found)
    kinds = Counter(c.kind for e in found for c in e.counterfactuals)
    with_cf = sum(1 for e in found if e.counterfactuals)
    row: dict[str, object] = {
        "trace": trace,
        "seed": seed,
        "nodes": len(inp.cluster.nodes),
        "workloads": len(inp.workloads),
        "waiting": len(plan.unplaced),
        "explained": len(found),
        "with_counterfactual": with_cf,
        "counterfactuals": sum(len(e.counterfactuals) for e in found),
        "verifier": solver,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "codes": " ".join(f"{c}={n}" for c, n in codes.most_common()),
        "changes": " ".join(f"{k}={n}" for k, n in kinds.most_common()),
    }
    log.info("%s", row)
    return row


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trace", default="default")
    parser.add_argument("--seeds", default="42,43,44", help="comma-separated seeds")
    parser.add_argument("--arrived", type=float, default=1.10, help="demand as a fraction of GPU capacity")
    parser.add_argument("--count", type=int, default=100, help="waiting workloads to explain")
    parser.add_argument("--counterfactuals", type=int, default=3, help="verified changes per workload")
    parser.add_argument("--solver", default="cpsat", help="re-solve back-end that verifies counterfactuals")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/b9.csv"))
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = [run(args.trace, s, args.arrived, args.count, args.counterfactuals, args.solver) for s in seeds]
    frame = pd.DataFrame(rows)
    write(frame, args.out)
    print(frame.to_string(index=False))
    for col in ("wall_s", "cpu_s"):
        print(f"{col}: median {statistics.median(frame[col])}, worst {max(frame[col])}")


if __name__ == "__main__":
    main()

"""B17: MIG mode on and off as an action (issue 24, item 8).

Inputs: seeded H100 fleets (``--nodes`` 8-GPU nodes; each GPU in MIG mode with two idle 3g.40gb
instances with probability ``--mig-share``, else plain) and a waiting demand of whole-GPU jobs (1-4
GPUs, 4 replicas each) and 3g.40gb MIG services, about twice what the fleet holds; the policy allows
re-partitioning. Each input is planned side by side in one run by ``make_plan`` on one solver:

- ``switch``: as shipped: the MIG-mode pre-pass may turn MIG off (or on) on idle GPUs;
- ``fixed``: the same with the pre-pass choosing nothing (every GPU keeps its MIG mode, as before).

For each: the queue objective, replicas placed, GPUs switched and wall time; the summary gives the
medians over seeds and the median ratio switch/fixed of the queue and the wall time.

Run ``python -m benchmarks.b17_mig_mode --help``.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pandas as pd

from benchmarks.common import NOW, markdown, parse_seeds, write
from gpuplan.models.inputs import PlanningInput
from gpuplan.planner import planning

log = logging.getLogger("benchmarks.b17")


def fleet_input(seed: int, nodes: int, mig_share: float) -> PlanningInput:
    """The seeded fleet and its waiting demand."""
    rng = random.Random(seed)
    mig = {"instances": [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]}
    cluster = [
        {
            "name": f"n{k:03d}",
            "cpu_milli": 256_000,
            "memory_mib": 2_097_152,
            "gpus": [
                {"index": i, "model": "H100-80GB", **({"mig": mig} if rng.random() < mig_share else {})}
                for i in range(8)
            ],
        }
        for k in range(nodes)
    ]
    gpus = 8 * nodes
    work: list[dict[str, Any]] = []
    for j in range(gpus // 4):
        work.append({"id": f"job{j}", "gpus": rng.randint(1, 4), "replicas": 2})
    for j in range(gpus // 4):
        work.append({"id": f"svc{j}", "mig_profile": "3g.40gb", "replicas": 4})
    rng.shuffle(work)
    return PlanningInput.model_validate(
        {"cluster": {"nodes": cluster}, "workloads": work, "policy": {"mig": {"allow_repartition": True}}}
    )


def run(seed: int, args: argparse.Namespace) -> list[dict[str, object]]:
    """One row per variant for one seed."""
    inp = fleet_input(seed, args.nodes, args.mig_share)
    rows: list[dict[str, object]] = []
    for variant in ("switch", "fixed"):
        # ``fixed``: the pre-pass chooses no switch, so the solve sees every GPU in its own MIG mode.
        keep: AbstractContextManager[object] = (
            nullcontext()
            if variant == "switch"
            else patch.object(planning, "choose_mig_modes", return_value=())
        )
        with keep:
            t = time.perf_counter()
            plan = planning.make_plan(
                inp, solver=args.solver, now=NOW, time_limit_s=args.limit, deterministic=True
            )
            wall = time.perf_counter() - t
        rows.append(
            {
                "seed": seed,
                "variant": variant,
                "queue": plan.solver.objective,
                "placed": len(plan.assignments),
                "replicas": sum(w.replicas for w in inp.workloads),
                "switched": len(plan.mig_modes),
                "status": plan.status.value,
                "wall_s": round(wall, 2),
            }
        )
        log.info("seed %d %s: %s", seed, variant, rows[-1])
    return rows


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Medians per variant and the median ratios switch/fixed (queue, wall) over seeds."""
    out = []
    for variant, group in frame.groupby("variant", sort=False):
        out.append(
            {
                "variant": variant,
                "queue": statistics.median(group["queue"]),
                "placed": statistics.median(group["placed"]),
                "switched": statistics.median(group["switched"]),
                "wall_s": statistics.median(group["wall_s"]),
            }
        )
    pivot = frame.pivot(index="seed", columns="variant")
    out.append(
        {
            "variant": "ratio switch/fixed",
            "queue": statistics.median(pivot["queue"]["switch"] / pivot["queue"]["fixed"]),
            "placed": statistics.median(pivot["placed"]["switch"] / pivot["placed"]["fixed"]),
            "switched": float("nan"),
            "wall_s": statistics.median(pivot["wall_s"]["switch"] / pivot["wall_s"]["fixed"]),
        }
    )
    return pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="42-46")
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--mig-share", type=float, default=0.5)
    parser.add_argument("--solver", default="cpsat")
    parser.add_argument("--limit", type=float, default=30.0)
    parser.add_argument("--out", default="benchmarks/results/b17.csv")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    frame = pd.DataFrame([row for seed in parse_seeds(args.seeds) for row in run(seed, args)])
    write(frame, Path(args.out))
    columns = [
        ("variant", "variant", ""),
        ("queue (median)", "queue", ".3g"),
        ("placed (median)", "placed", ".3g"),
        ("GPUs switched", "switched", ".0f"),
        ("wall s (median)", "wall_s", ".3g"),
    ]
    print(markdown(summary(frame), columns))


if __name__ == "__main__":
    main()

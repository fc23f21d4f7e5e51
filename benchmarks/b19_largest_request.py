"""B19 the largest request the API admits by default: 2,000 DGX H100 nodes and 20,000 workloads of 5
replicas (100,000 replicas), planned as an API job plans it (``api.solver_process.solve``, input parsing
included) at a time limit; prints the wall time, how far past the limit it ran, and what was placed.

Issue 27 item 6: at ``time_limit_s`` 20 such a job ran 30 s past its limit and was killed by the runner
(``solve_grace_s`` 30) without a plan. Run it from two trees (``PYTHONPATH``) side by side to compare.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

from gpuplan.api import solver_process
from gpuplan.models.inputs import PlanningInput

NOW = "2026-11-29T12:00:00+00:00"


def largest_input(seed: int) -> PlanningInput:
    """2,000 DGX H100 nodes; 20,000 workloads of 5 replicas over 20 teams and the three tiers: half whole
    GPUs (1, 2 or 4), 30% fractions (250 or 500 milli), 20% MIG slices (1g.10gb or 3g.40gb)."""
    rng = random.Random(seed)
    gpus = [{"index": g, "model": "H100-80GB"} for g in range(8)]
    node = {"topology": "dgx-h100", "cpu_milli": 224000, "memory_mib": 2_000_000, "gpus": gpus}
    nodes = [{"name": f"dgx-{i:04d}", **node} for i in range(2000)]
    teams = [f"team-{t}" for t in range(20)]
    work: list[dict[str, Any]] = []
    for i in range(20000):
        kind = rng.random()
        w: dict[str, Any] = {
            "id": f"w-{i:05d}",
            "team": rng.choice(teams),
            "tier": rng.choice(["latency-sensitive", "standard", "background"]),
            "replicas": 5,
            "cpu_milli": 4000,
            "memory_mib": 32768,
        }
        if kind < 0.5:
            w["gpus"] = rng.choice([1, 1, 2, 4])
        elif kind < 0.8:
            w["gpu_milli"] = rng.choice([250, 500])
        else:
            w["mig_profile"] = rng.choice(["1g.10gb", "3g.40gb"])
        work.append(w)
    return PlanningInput.model_validate({"cluster": {"nodes": nodes}, "workloads": work})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--label", default="", help="a name for the tree measured")
    args = parser.parse_args()
    text = largest_input(args.seed).model_dump_json()
    options = {"time_limit_s": args.time_limit, "solver": "cpsat", "now": NOW, "num_workers": 1}
    start = time.monotonic()
    plan_json, status, _ = solver_process.solve(text, options)
    wall = time.monotonic() - start
    plan = json.loads(plan_json)
    row = {
        "label": args.label,
        "time_limit_s": args.time_limit,
        "wall_s": round(wall, 1),
        "past_limit_s": round(wall - args.time_limit, 1),
        "status": status,
        "placed": len(plan["assignments"]),
        "waiting": len(plan["unplaced"]),
    }
    print(json.dumps(row))


if __name__ == "__main__":
    main()

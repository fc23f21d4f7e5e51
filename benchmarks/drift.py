"""Drifted current states: how many plans of random small instances whose running work already breaks a
quota, an isolation rule or a topology need end in an error instead of a valid plan, per solver, and how
many reported a bound above their own plan's objective (dropped: not a valid bound), and how many plans
keep a broken rule (``stays_broken``).

    python -m benchmarks.drift --instances 60 --time-limit 2

The instances are those of ``tests._factories.drifted_inputs`` (1-3 nodes, running work placed on free
GPUs regardless of the rules), drawn the same way every run so that runs compare.
"""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from gpuplan.models import PlanningInput
from gpuplan.planner.planning import make_plan
from tests._factories import drifted_inputs

SOLVERS = ("cpsat", "milp-highs", "greedy-fgd", "best-fit", "first-fit")
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def instances(count: int) -> list[dict[str, Any]]:
    """``count`` drifted inputs, the same every run (hypothesis derandomised, no example database)."""
    out: list[dict[str, Any]] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )
    @given(drifted_inputs())
    def collect(data: dict[str, Any]) -> None:
        out.append(data)

    collect()
    return out[:count]


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: counts per solver."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=60)
    parser.add_argument("--time-limit", type=float, default=2.0)
    args = parser.parse_args(argv)
    logging.disable(logging.ERROR)
    drawn = instances(args.instances)
    errors: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    failing: set[int] = set()
    for i, data in enumerate(drawn):
        inp = PlanningInput.model_validate(data)
        for solver in SOLVERS:
            try:
                plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=args.time_limit)
            except Exception:  # the figure counts every error, whatever its kind
                errors[solver] += 1
                failing.add(i)
                continue
            kept[solver] += bool(getattr(plan, "stays_broken", ()))
            dropped[solver] += "invalid_bound_dropped" in plan.solver.terms
    print(f"{len(drawn)} drifted instances, {sum(errors.values())} errors on {len(failing)} instances")
    for solver in SOLVERS:
        print(
            f"  {solver:<12} errors {errors[solver]:>4}   bounds dropped {dropped[solver]:>4}   "
            f"plans keeping a broken rule {kept[solver]:>4}"
        )


if __name__ == "__main__":
    main()

"""CPU per phase of one small plan: B8's request (64 GPUs, 100 workloads) through the whole pipeline.

The phases are what a ``POST /v1/plans`` costs outside the HTTP layer and the store: the server's parse
(body to the stored input JSON, as ``api.jobs`` does), the solver process's parse, then ``make_plan``'s
own steps (compile, place, predicted starts, repair, report, assemble, validate) and the plan's JSON.
``make_plan`` is timed as it runs: its steps are wrapped where ``planner.planning`` calls them, so the
table cannot drift from the code. Each figure is the median CPU time (``time.process_time``) over
``--runs`` bodies (B8's seeds, distinct demands); ``--cprofile`` prints the top functions instead.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from benchmarks.b8_api_load import body
from gpuplan.api.schemas import PlanRequest
from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.planner import planning
from gpuplan.solvers.base import get_solver

F = TypeVar("F", bound=Callable[..., Any])

#: ``make_plan``'s steps as ``planner.planning`` names them, with the phase each is counted in.
STEPS = {
    "compile_problem": "compile",
    "with_reservations": "predicted starts",
    "without_idle_moves": "repair",
    "reported": "report",
    "validate_plan": "validate",
    "build_plan": "assemble",
}
PHASES = (
    "parse (server)",
    "parse (solver process)",
    "compile",
    "place",
    "predicted starts",
    "repair",
    "report",
    "assemble",
    "validate",
    "make_plan other",
    "plan JSON",
)


class Clock:
    """CPU seconds per phase of the current run; nested steps are taken out of their caller."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.inner = 0.0

    def wrap(self, phase: str, fn: F) -> F:
        """``fn`` charging its own CPU time (less that of wrapped steps inside it) to ``phase``."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            outer, self.inner = self.inner, 0.0
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                took = time.process_time() - t0
                self.spent[phase] = self.spent.get(phase, 0.0) + took - self.inner
                self.inner = outer + took

        return timed  # type: ignore[return-value]


def instrument(clock: Clock) -> None:
    """Wrap ``make_plan``'s steps (and the solver's ``solve``) where ``planner.planning`` calls them."""
    for name, phase in STEPS.items():
        setattr(planning, name, clock.wrap(phase, getattr(planning, name)))

    def solver(name: str) -> Any:
        found = get_solver(name)

        class Timed:
            def solve(self, problem: Any, options: Any) -> Any:
                return clock.wrap("place", found.solve)(problem, options)

        return Timed()

    setattr(planning, "get_solver", solver)  # noqa: B010 (the module does not export it)


def one(raw: bytes, solver: str, clock: Clock) -> float:
    """Run the pipeline once on a body; its ``make_plan`` CPU seconds (phases go to ``clock``)."""
    catalog = default_catalog()
    t0 = time.process_time()
    req = PlanRequest.model_validate_json(raw)
    inp = PlanningInput.model_validate(
        {"cluster": req.cluster, "workloads": req.workloads, "policy": req.policy}
    )
    input_json = inp.model_dump_json()
    t1 = time.process_time()
    stored = PlanningInput.model_validate_json(input_json, context={"catalog": catalog})
    t2 = time.process_time()
    clock.spent = {"parse (server)": t1 - t0, "parse (solver process)": t2 - t1}
    plan = planning.make_plan(
        stored, solver=solver, catalog=catalog, time_limit_s=req.options.time_limit_s or 10.0
    )
    t3 = time.process_time()
    plan.model_dump_json(by_alias=True, exclude_none=True)
    clock.spent["plan JSON"] = time.process_time() - t3
    clock.spent["make_plan other"] = (t3 - t2) - sum(clock.spent.get(p, 0.0) for p in PHASES[2:9])
    return t3 - t2


def main() -> None:
    """Print the per-phase table (median CPU ms) for each solver."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--solvers", default="first-fit,greedy-fgd")
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--cprofile", action="store_true", help="print cProfile's top functions instead")
    args = p.parse_args()
    clock = Clock()
    instrument(clock)
    for solver in args.solvers.split(","):
        bodies = [body(seed, solver, 1.0) for seed in range(args.runs)]
        for raw in bodies[: args.warmup]:
            one(raw, solver, clock)
        if args.cprofile:
            prof = cProfile.Profile()
            for raw in bodies:
                prof.runcall(one, raw, solver, clock)
            pstats.Stats(prof).sort_stats("tottime").print_stats(30)
            continue
        runs: dict[str, list[float]] = {phase: [] for phase in PHASES}
        plans: list[float] = []
        pipeline: list[float] = []
        for raw in bodies:
            plans.append(one(raw, solver, clock))
            for phase in PHASES:
                runs[phase].append(clock.spent.get(phase, 0.0))
            pipeline.append(sum(clock.spent.get(phase, 0.0) for phase in PHASES))
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
        print(f"\n{solver}: median CPU ms over {args.runs} bodies ({stamp} UTC)")
        print("| phase | CPU ms |\n|---|---:|")
        for phase in PHASES:
            print(f"| {phase} | {1000 * statistics.median(runs[phase]):.2f} |")
        print(f"| **make_plan** | {1000 * statistics.median(plans):.2f} |")
        print(f"| **whole pipeline** | {1000 * statistics.median(pipeline):.2f} |")
        print(
            json.dumps(
                {
                    "solver": solver,
                    "pipeline_ms_p90": round(1000 * sorted(pipeline)[int(0.9 * len(pipeline))], 2),
                }
            )
        )


if __name__ == "__main__":
    main()

"""Small plans (B8's request) after the speed work: what the faster passes keep, checked independently.

The passes memoise within a plan and across plans of one process (a plan's fragmentation, link graphs
per topology, MIG placements per slots); a plan must not depend on what was planned before it. FGD's
measure skips targets a node cannot use and shares work between targets; it must still be the
definition: the popularity-weighted free capacity that the targets cannot use.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from benchmarks.b8_api_load import cluster, workloads
from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.planning import make_plan
from gpuplan.solvers.greedy import FgdScorer
from gpuplan.solvers.placement import Fragmentation, Placer, target_mix
from gpuplan.solvers.placement.fragmentation import usable

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _input(seed: int) -> PlanningInput:
    """B8's request (64 GPUs, 100 workloads); odd seeds give every workload a duration, so that what
    waits gets reservations at later times."""
    rng = random.Random(seed)
    demand = workloads(seed)
    if seed % 2:
        for w in demand:
            w["duration_s"] = rng.choice([600, 3600, 7200])
    return PlanningInput.model_validate({"cluster": cluster(), "workloads": demand})


def _plan(inp: PlanningInput, solver: str) -> dict[str, Any]:
    plan = make_plan(inp, solver=solver, catalog=default_catalog(), now=NOW, time_limit_s=10.0)
    # Wall times are not part of what a plan decides: the solve's time share gives up what the sharing
    # pre-pass took (a non-deterministic solve), so it is left out with the solve's wall time.
    out: dict[str, Any] = plan.model_dump(
        mode="json", exclude={"solver": {"wall_s"}, "provenance": {"solve_time_limit_s"}}
    )
    return out


def test_a_plan_does_not_depend_on_what_was_planned_before() -> None:
    inputs = [_input(seed) for seed in range(4)]
    for solver in ("first-fit", "greedy-fgd"):
        forward = [_plan(inp, solver) for inp in inputs]
        backward = [_plan(inp, solver) for inp in reversed(inputs)][::-1]
        assert forward == backward
        assert any(u.get("predicted_start") for p in forward for u in p["unplaced"])


def test_fgd_fragmentation_is_the_weighted_capacity_the_targets_cannot_use() -> None:
    catalog = default_catalog()
    problem = compile_problem(_input(3), catalog, NOW)
    targets = target_mix(problem.requests)
    assert any(t.shape.kind == "cpu" for t in targets)  # targets that no GPU serves are part of the mix
    measure = Fragmentation(targets)
    placer = Placer(problem.nodes, catalog, FgdScorer(targets), policy=problem.policy)
    checked = 0
    for req in problem.queue_order():
        placer.place(req)
        for info, state in zip(placer.infos, placer.cluster.states, strict=True):
            free = sum(state.free)
            used = sum(t.weight * usable(info, state, t.shape) for t in targets)
            wanted = free * sum(t.weight for t in targets) - used if free else 0.0
            assert measure(info, state) == pytest.approx(wanted, rel=1e-12, abs=1e-9)
            checked += 1
    assert checked == len(problem.requests) * len(problem.nodes)

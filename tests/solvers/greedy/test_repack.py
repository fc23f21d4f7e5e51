"""The re-pack of shared GPUs: the fractions a plan starts are placed again, largest first, with the
waiting ones; kept only when more queue penalty is placed, never moving running work or gang members."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import PlanningInput, default_catalog
from gpuplan.models.plan import GpuUse, PlanStatus
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.greedy import Fgd
from gpuplan.solvers.greedy.repack import repack_shared
from gpuplan.solvers.placement import Placer
from gpuplan.solvers.problem import PlacementProblem, Running
from gpuplan.solvers.run_options import RunOptions

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def _problem(gpus: int, work: list[dict[str, Any]]) -> PlacementProblem:
    node = {
        "name": "n0",
        "cpu_milli": 64000,
        "memory_mib": 1_000_000,
        "gpus": [{"index": g, "model": "L40S-48GB"} for g in range(gpus)],
    }
    inp = PlanningInput.model_validate({"cluster": {"nodes": [node]}, "workloads": work})
    return compile_problem(inp, default_catalog(), NOW)


def _started(problem: PlacementProblem, spots: dict[str, int]) -> tuple[Placer, SolveResult]:
    """A plan that starts each replica of ``spots`` (workload -> GPU) there, the others waiting, and a
    placer holding it."""
    placer = Fgd().placer(problem)
    assignments = []
    for q in problem.requests:
        if q.workload in spots:
            shape = q.shapes[0]
            where = Running("n0", (GpuUse(index=spots[q.workload], milli=shape.milli),), 0)
            placer.hold(q, where)
            assignments.append(q.assignment(where))
    waiting = tuple(placer.unplaced(q) for q in problem.requests if q.workload not in spots)
    return placer, SolveResult(PlanStatus.FEASIBLE, "test", tuple(assignments), waiting)


def _milli_per_gpu(plan: SolveResult) -> dict[int, int]:
    used: dict[int, int] = defaultdict(int)
    for a in plan.assignments:
        for g in a.gpus:
            used[g.index] += g.milli or 1000
    return used


def test_two_spread_fractions_make_room_for_a_larger_one() -> None:
    # 0.4 and 0.4 started on GPUs 0 and 1: a 0.7 waits although 0.4 + 0.4 fit one GPU beside it.
    work = [{"id": w, "gpu_milli": m, "cpu_milli": 100} for w, m in (("a", 400), ("b", 400), ("c", 700))]
    problem = _problem(2, work)
    placer, start = _started(problem, {"a": 0, "b": 1})
    out = repack_shared(problem, placer, start)
    assert sorted(a.workload for a in out.assignments) == ["a", "b", "c"]
    assert out.unplaced == ()
    assert max(_milli_per_gpu(out).values()) <= 1000
    # The placer holds the plan returned: the 0.6 GPU left can take no 0.7 more.
    assert placer.used_gpu_milli == 1500


def test_a_plan_packed_tight_is_returned_as_it_is() -> None:
    work = [{"id": w, "gpu_milli": m, "cpu_milli": 100} for w, m in (("a", 500), ("b", 500), ("c", 700))]
    problem = _problem(1, work)
    placer, start = _started(problem, {"a": 0, "b": 0})
    assert repack_shared(problem, placer, start) is start


def test_running_fractions_never_move() -> None:
    # The running 0.4s keep their GPUs: nothing the re-pack may move makes room for the 0.7.
    work: list[dict[str, Any]] = [
        {"id": "a", "gpu_milli": 400, "cpu_milli": 100, "running_on": "n0:0=400"},
        {"id": "b", "gpu_milli": 400, "cpu_milli": 100, "running_on": "n0:1=400"},
        {"id": "c", "gpu_milli": 700, "cpu_milli": 100},
    ]
    problem = _problem(2, work)
    placers: list[Placer] = []
    start = Fgd().place(problem, RunOptions(), on_kept=placers.append)
    assert repack_shared(problem, placers[0], start) is start


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gpus=st.integers(1, 3),
    sizes=st.lists(st.sampled_from([100, 250, 300, 400, 500, 600, 700]), min_size=1, max_size=9),
    hours=st.lists(st.integers(0, 48), min_size=9, max_size=9),
)
def test_the_queue_never_gets_worse_and_no_gpu_overflows(
    gpus: int, sizes: list[int], hours: list[int]
) -> None:
    work = [
        {
            "id": f"w{i}",
            "gpu_milli": m,
            "cpu_milli": 100,
            "queued_since": f"2026-11-{27 + hours[i] // 24}T{hours[i] % 24:02d}:00:00Z",
        }
        for i, m in enumerate(sizes)
    ]
    problem = _problem(gpus, work)
    placers: list[Placer] = []
    start = Fgd().place(problem, RunOptions(), on_kept=placers.append)
    out = repack_shared(problem, placers[0], start)
    penalty = {q.key: queue_penalty(q, problem) for q in problem.requests}

    def placed(plan: SolveResult) -> int:
        return sum(penalty[(a.workload, a.replica)] for a in plan.assignments)

    assert placed(out) >= placed(start)
    assert out is start or placed(out) > placed(start)
    assert max(_milli_per_gpu(out).values(), default=0) <= 1000
    keys = sorted(
        [(a.workload, a.replica) for a in out.assignments] + [(u.workload, u.replica) for u in out.unplaced]
    )
    assert keys == sorted(q.key for q in problem.requests)
    assert placers[0].used_gpu_milli == sum(_milli_per_gpu(out).values())

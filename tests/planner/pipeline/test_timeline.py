"""Predicted start times: conservative backfill, and exact agreement with the simulator."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuplan.models import Cluster, Plan, PlanningInput, Policy, Workload, default_catalog
from gpuplan.models.policy import Tier
from gpuplan.planner.executor import Executor, SimCluster
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.validate import validate_plan
from gpuplan.solvers.run_options import RunOptions
from tests._factories import node_data

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
TIERS = (
    Tier(name="latency-sensitive", weight=10, may_be_preempted=False),
    Tier(name="standard", weight=3, default_duration_s=100),
    Tier(name="background", weight=1),
)


def _w(wid: str, tier: str, queued: int, **fields: Any) -> Workload:
    return Workload.model_validate(
        {
            "id": wid,
            "tier": tier,
            "cpu_milli": 1000,
            "queued_since": NOW - timedelta(seconds=queued),
            **fields,
        }
    )


def test_lower_tiers_backfill_only_where_no_reservation_is_delayed() -> None:
    """Two GPUs; A holds one for 100 s more (its tier's default duration). H (two GPUs) is reserved at
    +100 s; L (500 s) would delay it and waits until H is done; S (50 s) fits before A ends and starts."""
    cluster = Cluster.model_validate({"nodes": [node_data("n", "H100-80GB", 2)]})
    work = [
        _w("A", "standard", 500, gpus=1, running_on="n:0", started_at=NOW),
        _w("H", "latency-sensitive", 10, gpus=2, duration_s=100),
        _w("L", "background", 300, gpus=1, duration_s=500),
        _w("S", "background", 200, gpus=1, duration_s=50),
    ]
    inp = PlanningInput(cluster=cluster, workloads=tuple(work), policy=Policy(tiers=TIERS))
    plan = make_plan(inp, solver="greedy-fgd", now=NOW)
    assert not validate_plan(plan, inp)
    assert {a.workload for a in plan.assignments} == {"A", "S"}
    waiting = {u.workload: u for u in plan.unplaced}
    assert waiting["H"].predicted_start == (NOW + timedelta(seconds=100)).isoformat()
    assert waiting["H"].reserved_node == "n" and {g.index for g in waiting["H"].reserved_gpus} == {0, 1}
    assert waiting["L"].predicted_start == (NOW + timedelta(seconds=200)).isoformat()
    # The greedy solver started L now; it would have delayed H, so it waits and S took the GPU: on the
    # state the plan leaves there is no room for L, and its reason names its reservation.
    assert waiting["L"].code == "NO_CAPACITY"
    assert "the plan reserves n GPU 0 for it from 2026-" in waiting["L"].reason


def test_work_that_never_ends_leaves_the_start_unknown() -> None:
    cluster = Cluster.model_validate({"nodes": [node_data("n", "H100-80GB", 1)]})
    work = [
        _w("forever", "background", 100, gpus=1, running_on="n:0"),
        _w("next", "background", 10, gpus=1, duration_s=60),
    ]
    inp = PlanningInput(cluster=cluster, workloads=tuple(work), policy=Policy(tiers=TIERS))
    plan = make_plan(inp, solver="greedy-fgd", now=NOW)
    assert [(u.workload, u.predicted_start) for u in plan.unplaced] == [("next", None)]


def _demand() -> list[Workload]:
    """More work than two nodes hold, of mixed shapes, tiers and exact durations."""
    shapes: list[dict[str, Any]] = [
        {"gpus": 1},
        {"gpus": 2},
        {"gpu_milli": 500},
        {"mig_profile": "3g.40gb"},
        {"gpus": 4},
        {"mig_profile": "1g.10gb"},
        {"gpu_milli": 300},
    ]
    tiers = ["background", "standard", "latency-sensitive"]
    return [
        _w(f"j{i:02d}", tiers[i % 3], 1000 - i, duration_s=100 * (1 + (i * 7) % 5), **shapes[i % len(shapes)])
        for i in range(24)
    ]


@pytest.mark.parametrize("solver", ["greedy-fgd", "cpsat"])
def test_predicted_starts_match_the_simulator_when_durations_are_exact(solver: str) -> None:
    cluster = Cluster.model_validate(
        {"nodes": [node_data("a", "H100-80GB", 4, mig={0: []}), node_data("b", "H100-80GB", 4)]}
    )
    demand = _demand()
    durations = {(w.id, 0): w.duration_s for w in demand}
    sim = SimCluster(cluster, default_catalog(), NOW, duration_of=durations.get)
    last: list[Plan] = []

    def planner(inp: PlanningInput, now: datetime) -> Plan:
        plan = make_plan(
            inp,
            solver=solver,
            now=now,
            time_limit_s=2,
            deterministic=True,
            previous=last[-1] if last else None,
        )
        last.append(plan)
        return plan

    ex = Executor(sim, planner, Policy(tiers=TIERS))
    ex.round(demand)
    predicted = {
        (u.workload, u.replica): datetime.fromisoformat(u.predicted_start)
        for u in last[0].unplaced
        if u.predicted_start
    }
    assert len(predicted) == len(last[0].unplaced) > 5
    actual = dict.fromkeys(sim.started, sim.now)
    total = len(demand)
    while len(actual) < total:
        end = sim.next_end()
        assert end is not None
        finished = sim.advance((end - sim.now).total_seconds())
        demand = [w for w in demand if (w.id, 0) not in finished]
        ex.round(demand)
        actual.update({k: sim.now for k in sim.started if k not in actual})
    assert {k: actual[k] for k in predicted} == predicted


def test_a_timeline_cut_by_the_deadline_keeps_the_solver_plan() -> None:
    """Past its deadline the predicted-start pass changes nothing it has not reached: the solver's
    starts stay (here S would otherwise wait for H's reservation) and the cut is reported."""
    from gpuplan.planner.pipeline.compile import compile_problem
    from gpuplan.planner.pipeline.deadline import Deadline
    from gpuplan.planner.pipeline.timeline import with_reservations
    from gpuplan.solvers.greedy import Fgd

    cluster = Cluster.model_validate({"nodes": [node_data("n", "H100-80GB", 2)]})
    work = [
        _w("A", "standard", 500, gpus=1, running_on="n:0", started_at=NOW),
        _w("H", "latency-sensitive", 10, gpus=2, duration_s=100),
        _w("L", "background", 300, gpus=1, duration_s=500),
    ]
    inp = PlanningInput(cluster=cluster, workloads=tuple(work), policy=Policy(tiers=TIERS))
    problem = compile_problem(inp, default_catalog(), NOW)
    solved = Fgd().solve(problem, RunOptions())
    assert {a.workload for a in solved.assignments} == {"A", "L"}
    expired = Deadline(end=0.0, clock=lambda: 1.0)
    cut = with_reservations(inp, problem, solved, default_catalog(), NOW, None, expired)
    assert cut.assignments == solved.assignments and cut.terms["timeline_cut"] == 1
    full = with_reservations(inp, problem, solved, default_catalog(), NOW)
    assert {a.workload for a in full.assignments} == {"A"}  # L would delay H's reserved start


def test_a_replica_the_solver_left_waiting_in_favour_of_a_start_does_not_take_its_room_later() -> None:
    """n has two GPUs: R holds GPU 1 for 100 s more, GPU 0 is free. Y (priority 10) is ahead of X in
    the queue, but the solver started X on GPU 0 and left Y waiting, though Y fits there now: that was the
    objective's choice. So Y's reservation keeps off X's GPU (GPU 1 from +100 s) and X starts now; were
    Y given GPU 0 at +100 s, X would wait for nothing and GPU 0 would stay idle until then."""
    from gpuplan.models.plan import Assignment, GpuUse, PlanStatus
    from gpuplan.planner.pipeline.compile import compile_problem
    from gpuplan.planner.pipeline.timeline import with_reservations
    from gpuplan.solvers.base import SolveResult

    cluster = Cluster.model_validate({"nodes": [node_data("n", "H100-80GB", 2)]})
    work = [
        _w("R", "standard", 500, gpus=1, running_on="n:1", started_at=NOW),
        _w("X", "background", 300, gpus=1),
        _w("Y", "background", 10, gpus=1, priority=10),
    ]
    inp = PlanningInput(cluster=cluster, workloads=tuple(work), policy=Policy(tiers=TIERS))
    problem = compile_problem(inp, default_catalog(), NOW)
    assert [r.workload for r in problem.queue_order()][1:] == ["Y", "X"]

    def on(wid: str, gpu: int) -> Assignment:
        return Assignment(workload=wid, replica=0, node="n", gpus=(GpuUse(index=gpu),), cpu_milli=1000)

    solved = SolveResult(status=PlanStatus.FEASIBLE, solver="hand", assignments=(on("R", 1), on("X", 0)))
    timed = with_reservations(inp, problem, solved, default_catalog(), NOW)
    assert {(a.workload, a.gpus[0].index) for a in timed.assignments} == {("R", 1), ("X", 0)}
    (y,) = timed.unplaced
    assert y.workload == "Y" and y.predicted_start == (NOW + timedelta(seconds=100)).isoformat()
    assert y.reserved_node == "n" and [g.index for g in y.reserved_gpus] == [1]

"""The idle-move repair undoes swaps, chains and cycles, not only moves whose old place is still free.

Every plan below is built by hand and handed to the repair directly, so the expectation (each runner
back where it runs, each newcomer on a place a runner left, zero moves) is written out independently.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import Plan, PlanningInput, PlanStatus
from gpuplan.models.catalog import default_catalog
from gpuplan.models.plan import Assignment, GpuUse, MigLayout, SolverReport, Unplaced
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.repair import without_idle_moves
from gpuplan.planner.pipeline.verdict import result_violations
from gpuplan.planner.presentation.summary import render
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.evaluate import evaluate

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
STARTED = (NOW - timedelta(days=1)).isoformat()
QUEUED = (NOW - timedelta(hours=2)).isoformat()
CATALOG = default_catalog()


def _nodes(count: int) -> list[dict[str, Any]]:
    """``count`` identical nodes of one L40S each."""
    return [
        {
            "name": f"n{i}",
            "cpu_milli": 64000,
            "memory_mib": 262144,
            "gpus": [{"index": 0, "model": "L40S-48GB"}],
        }
        for i in range(count)
    ]


def _runner(name: str, node: str) -> dict[str, Any]:
    return {"id": name, "gpus": 1, "cpu_milli": 4000, "memory_mib": 16384, "running_on": f"{node}:0",
            "started_at": STARTED}  # fmt: skip


def _newcomer(name: str) -> dict[str, Any]:
    return {"id": name, "gpus": 1, "cpu_milli": 4000, "memory_mib": 16384, "queued_since": QUEUED}


def _input(nodes: int, work: list[dict[str, Any]], moves: int = 8) -> PlanningInput:
    return PlanningInput.model_validate(
        {"cluster": {"nodes": _nodes(nodes)}, "workloads": work,
         "policy": {"disruption": {"max_moves_per_round": moves, "max_preemptions_per_round": moves}}}
    )  # fmt: skip


def _on(workload: str, node: str) -> Assignment:
    return Assignment(
        workload=workload, replica=0, node=node, gpus=(GpuUse(index=0),), cpu_milli=4000, memory_mib=16384
    )


def _repair(inp: PlanningInput, *placed: Assignment, layouts: tuple[MigLayout, ...] = ()) -> SolveResult:
    problem = compile_problem(inp, CATALOG, NOW)
    result = SolveResult(status=PlanStatus.FEASIBLE, solver="test", assignments=placed, mig_layouts=layouts)
    return without_idle_moves(inp, problem, result, CATALOG)


def _where(result: SolveResult) -> dict[str, str]:
    return {a.workload: a.node for a in result.assignments}


def _moves(inp: PlanningInput, result: SolveResult) -> int:
    return evaluate(compile_problem(inp, CATALOG, NOW), result.assignments, result.mig_layouts).moves


def _valid(inp: PlanningInput, result: SolveResult, *, moves: bool = False) -> list[str]:
    """The validator's complaints about a plan without its actions (they are derived later, so the
    actions it would ask for are not counted); ``moves``: a plan that still moves running work."""
    broken = result_violations(result, inp, CATALOG)
    return [v.message for v in broken if not (moves and v.rule.startswith("disruption"))]


def test_a_swap_of_a_runner_and_a_newcomer_of_the_same_shape_is_undone() -> None:
    """``r`` runs on n0; the plan moves it to n1 and starts ``w`` on n0: ``w`` on n1 does the same."""
    inp = _input(2, [_runner("r", "n0"), _newcomer("w")])
    repaired = _repair(inp, _on("r", "n1"), _on("w", "n0"))
    assert _where(repaired) == {"r": "n0", "w": "n1"}
    assert _moves(inp, repaired) == 0
    assert repaired.terms["idle_moves_undone"] == 1
    assert _valid(inp, repaired) == []


def test_a_cycle_of_three_runners_is_undone() -> None:
    """r0, r1, r2 run on n0, n1, n2; the plan rotates them (n1, n2, n0): every one goes back."""
    inp = _input(3, [_runner("r0", "n0"), _runner("r1", "n1"), _runner("r2", "n2")])
    repaired = _repair(inp, _on("r0", "n1"), _on("r1", "n2"), _on("r2", "n0"))
    assert _where(repaired) == {"r0": "n0", "r1": "n1", "r2": "n2"}
    assert _moves(inp, repaired) == 0
    assert repaired.terms["idle_moves_undone"] == 3
    assert _valid(inp, repaired) == []


def test_a_chain_that_ends_on_a_free_node_gives_the_newcomer_that_node() -> None:
    """r0 n0 -> n1, r1 n1 -> n2 (free), w starts on n0: both runners back, w on n2."""
    inp = _input(3, [_runner("r0", "n0"), _runner("r1", "n1"), _newcomer("w")])
    repaired = _repair(inp, _on("r0", "n1"), _on("r1", "n2"), _on("w", "n0"))
    assert _where(repaired) == {"r0": "n0", "r1": "n1", "w": "n2"}
    assert _moves(inp, repaired) == 0
    assert _valid(inp, repaired) == []


def test_a_newcomer_of_another_shape_keeps_the_move() -> None:
    """``w`` asks for 2 GPUs of the two-GPU node the runner left; the runner's new place has one: the
    move made room, it stays."""
    nodes = [
        {"name": "big", "cpu_milli": 64000, "memory_mib": 262144,
         "gpus": [{"index": 0, "model": "L40S-48GB"}, {"index": 1, "model": "L40S-48GB"}]},
        *_nodes(1),
    ]  # fmt: skip
    work = [_runner("r", "big"), {**_newcomer("w"), "gpus": 2}]
    inp = PlanningInput.model_validate(
        {"cluster": {"nodes": nodes}, "workloads": work, "policy": {"disruption": {"max_moves_per_round": 1}}}
    )
    wide = Assignment(
        workload="w", replica=0, node="big", gpus=(GpuUse(index=0), GpuUse(index=1)),
        cpu_milli=4000, memory_mib=16384,
    )  # fmt: skip
    repaired = _repair(inp, _on("r", "n0"), wide)
    assert _where(repaired) == {"r": "n0", "w": "big"}
    assert "idle_moves_undone" not in repaired.terms


def test_a_newcomer_is_not_pushed_onto_a_gpu_model_it_does_not_accept() -> None:
    """The runner moved from an L40S to an L4 and ``w`` (L40S only) took the L40S: the swap would put
    ``w`` on the L4, so the move stays."""
    nodes = [
        {
            "name": "n0",
            "cpu_milli": 64000,
            "memory_mib": 262144,
            "gpus": [{"index": 0, "model": "L40S-48GB"}],
        },
        {"name": "n1", "cpu_milli": 64000, "memory_mib": 262144, "gpus": [{"index": 0, "model": "L4-24GB"}]},
    ]
    work = [_runner("r", "n0"), {**_newcomer("w"), "gpu_models": ["L40S-48GB"]}]
    inp = PlanningInput.model_validate({"cluster": {"nodes": nodes}, "workloads": work, "policy": {}})
    repaired = _repair(inp, _on("r", "n1"), _on("w", "n0"))
    assert _where(repaired) == {"r": "n1", "w": "n0"}


def test_mig_runners_swapped_with_newcomers_of_their_profile_go_back() -> None:
    """As on the demo: runners on three 1g.10gb instances of one H100 are moved to new instances of
    another H100 while newcomers of the same profile take their instances; undone, the new instances
    serve the newcomers."""
    node = {"name": "h", "cpu_milli": 64000, "memory_mib": 262144,
            "gpus": [{"index": 0, "model": "H100-80GB",
                      "mig": {"instances": [{"profile": "1g.10gb", "start": s} for s in range(3)]}},
                     {"index": 1, "model": "H100-80GB", "mig": {"instances": []}}]}  # fmt: skip
    work = [
        {"id": "run", "replicas": 3, "mig_profile": "1g.10gb", "cpu_milli": 1000, "memory_mib": 8192,
         "running_on": ";".join(f"h:0/1g.10gb@{s}" for s in range(3)), "started_at": STARTED},
        {"id": "new", "replicas": 3, "mig_profile": "1g.10gb", "cpu_milli": 1000, "memory_mib": 8192,
         "queued_since": QUEUED},
    ]  # fmt: skip
    inp = PlanningInput.model_validate(
        {"cluster": {"nodes": [node]}, "workloads": work,
         "policy": {"mig": {"allow_create": True}, "disruption": {"max_moves_per_round": 4}}}
    )  # fmt: skip

    def at(workload: str, r: int, gpu: int, start: int) -> Assignment:
        use = GpuUse(index=gpu, mig_profile="1g.10gb", mig_start=start)
        return Assignment(
            workload=workload, replica=r, node="h", gpus=(use,), cpu_milli=1000, memory_mib=8192
        )

    created = MigLayout.model_validate(
        {"node": "h", "gpu": 1, "instances": [{"profile": "1g.10gb", "start": s} for s in range(3)]}
    )
    kept = MigLayout.model_validate(
        {"node": "h", "gpu": 0, "instances": [{"profile": "1g.10gb", "start": s} for s in range(3)]}
    )
    plan = [at("run", r, 1, r) for r in range(3)] + [at("new", r, 0, r) for r in range(3)]
    repaired = _repair(inp, *plan, layouts=(kept, created))
    gpu_of = {(a.workload, a.replica): a.gpus[0].index for a in repaired.assignments}
    assert gpu_of == {("run", r): 0 for r in range(3)} | {("new", r): 1 for r in range(3)}
    assert _moves(inp, repaired) == 0
    assert _valid(inp, repaired) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_shuffle_of_runners_and_newcomers_over_identical_nodes_is_undone(data: st.DataObject) -> None:
    """Runners and newcomers of one shape spread over identical one-GPU nodes in any order: the repair
    puts every runner back, keeps every newcomer placed, and the validator accepts the plan."""
    nodes = data.draw(st.integers(2, 6), label="nodes")
    runners = data.draw(st.integers(1, nodes), label="runners")
    newcomers = data.draw(st.integers(0, nodes - runners), label="newcomers")
    order = data.draw(st.permutations(range(nodes)), label="places")
    work = [_runner(f"r{i}", f"n{i}") for i in range(runners)] + [
        _newcomer(f"w{j}") for j in range(newcomers)
    ]
    names = [w["id"] for w in work]
    inp = _input(nodes, work)
    repaired = _repair(inp, *(_on(name, f"n{order[i]}") for i, name in enumerate(names)))
    where = _where(repaired)
    assert sorted(where) == sorted(names)
    assert all(where[f"r{i}"] == f"n{i}" for i in range(runners))
    assert len(set(where.values())) == len(names)
    assert _moves(inp, repaired) == 0
    assert _valid(inp, repaired) == []


def test_a_preempted_runner_goes_back_and_the_newcomer_takes_a_free_gpu_of_the_node() -> None:
    """``r`` runs on GPU 0 of a two-GPU node; the plan preempts it and starts ``w`` on GPU 0 while GPU 1
    stays free: ``r`` keeps GPU 0 and ``w`` gets GPU 1."""
    nodes = [{"name": "n", "cpu_milli": 64000, "memory_mib": 262144,
              "gpus": [{"index": 0, "model": "L40S-48GB"}, {"index": 1, "model": "L40S-48GB"}]}]  # fmt: skip
    work = [{**_runner("r", "n"), "preemptible": True, "tier": "background"}, _newcomer("w")]
    inp = PlanningInput.model_validate(
        {
            "cluster": {"nodes": nodes},
            "workloads": work,
            "policy": {"disruption": {"max_preemptions_per_round": 1}},
        }
    )
    repaired = _repair(inp, _on("w", "n"))
    gpus = {a.workload: [g.index for g in a.gpus] for a in repaired.assignments}
    assert gpus == {"r": [0], "w": [1]}
    assert evaluate(compile_problem(inp, CATALOG, NOW), repaired.assignments, ()).preemptions == 0
    assert _valid(inp, repaired) == []


def _halves(extra: list[dict[str, Any]]) -> PlanningInput:
    """Two one-L40S nodes; ``ls`` (latency-sensitive, half a GPU) runs on n0; two background halves
    wait; background and latency-sensitive never share a GPU."""
    nodes = [
        {
            "name": f"n{i}",
            "cpu_milli": 64000,
            "memory_mib": 262144,
            "gpus": [{"index": 0, "model": "L40S-48GB"}],
        }
        for i in range(2)
    ]
    work = [
        {"id": "ls", "tier": "latency-sensitive", **HALF, "running_on": "n0:0=500", "started_at": STARTED},
        {"id": "b0", "tier": "background", **HALF, "queued_since": QUEUED},
        {"id": "b1", "tier": "background", **HALF, "queued_since": QUEUED},
        *extra,
    ]
    policy = {"isolation": [{"kind": "tiers-no-share", "tiers": ["latency-sensitive", "background"]}],
              "disruption": {"max_moves_per_round": 1}}  # fmt: skip
    return PlanningInput.model_validate({"cluster": {"nodes": nodes}, "workloads": work, "policy": policy})


HALF = {"gpu_milli": 500, "cpu_milli": 1000, "memory_mib": 4096}


def _half_on(workload: str, node: str) -> Assignment:
    return Assignment(workload=workload, replica=0, node=node, gpus=(GpuUse(index=0, milli=500),),
                      cpu_milli=1000, memory_mib=4096)  # fmt: skip


def test_two_newcomer_halves_share_the_gpu_a_runner_half_leaves() -> None:
    """The plan moves ``ls`` to n1 and starts both background halves on n0: both fit on n1 instead."""
    inp = _halves([])
    repaired = _repair(inp, _half_on("ls", "n1"), _half_on("b0", "n0"), _half_on("b1", "n0"))
    assert _where(repaired) == {"ls": "n0", "b0": "n1", "b1": "n1"}
    assert _moves(inp, repaired) == 0
    assert _valid(inp, repaired) == []


def test_a_runner_does_not_go_back_beside_a_tier_it_is_kept_apart_from() -> None:
    """As above, but n1 also runs a latency-sensitive half ``ls2``: a background half can only go beside
    a latency-sensitive one, so the move stays."""
    other = {
        "id": "ls2",
        "tier": "latency-sensitive",
        **HALF,
        "running_on": "n1:0=500",
        "started_at": STARTED,
    }
    inp = _halves([other])
    plan = (_half_on("ls", "n1"), _half_on("ls2", "n1"), _half_on("b0", "n0"), _half_on("b1", "n0"))
    repaired = _repair(inp, *plan)
    assert _where(repaired) == {"ls": "n1", "ls2": "n1", "b0": "n0", "b1": "n0"}
    assert _valid(inp, repaired, moves=True) == []


def test_the_summary_says_how_many_idle_moves_were_undone() -> None:
    inp = _input(1, [_runner("r", "n0")])
    solver = SolverReport(name="cpsat", terms={"idle_moves_undone": 2.0})
    plan = Plan(status=PlanStatus.FEASIBLE, solver=solver, assignments=(_on("r", "n0"),))
    assert "undone: 2 move(s) or preemption(s) that bought nothing" in render(plan, inp)
    plain = plan.model_copy(update={"solver": SolverReport(name="cpsat")})
    assert "undone" not in render(plain, inp)


@pytest.mark.parametrize(("hours", "undone"), [(10, False), (1, True)])
def test_a_swap_onto_a_gpu_reserved_for_a_predicted_start_needs_an_end_as_early(
    hours: int, undone: bool
) -> None:
    """The plan reserves n1's GPU for ``later`` from when ``r`` (moved there, 3 hours left) ends. The swap
    puts ``w`` there instead: with 10 hours to run it would hold the GPU past the reserved start, so
    the move stays; with 1 hour the reservation still holds and the swap is undone."""
    runner = {**_runner("r", "n0"), "duration_s": (24 + 3) * 3600}
    inp = _input(2, [runner, {**_newcomer("w"), "duration_s": hours * 3600}, _newcomer("later")])
    problem = compile_problem(inp, CATALOG, NOW)
    wait = Unplaced(
        workload="later", replica=0, code="RESERVED_FOR_EARLIER", reason="x",
        predicted_start=(NOW + timedelta(hours=3)).isoformat(), reserved_node="n1",
        reserved_gpus=(GpuUse(index=0),),
    )  # fmt: skip
    result = SolveResult(
        status=PlanStatus.FEASIBLE,
        solver="test",
        assignments=(_on("r", "n1"), _on("w", "n0")),
        unplaced=(wait,),
    )
    repaired = without_idle_moves(inp, problem, result, CATALOG)
    assert _where(repaired) == ({"r": "n0", "w": "n1"} if undone else {"r": "n1", "w": "n0"})


def test_a_whole_gpu_newcomer_takes_free_gpus_of_the_node_a_runner_leaves() -> None:
    """``train`` (4 GPUs) moved from d0 to d1 while ``svc`` (8 GPUs) took d0: d1 is empty once ``train``
    goes back, so ``svc`` runs there and nothing moves (the shapes differ: not a plain swap)."""
    nodes = [
        {"name": f"d{i}", "cpu_milli": 224000, "memory_mib": 2097152, "topology": "dgx-h100"}
        for i in range(2)
    ]
    work = [
        {"id": "train", "gpus": 4, "topology": "nvlink", "running_on": "d0:0,1,2,3", "started_at": STARTED},
        {"id": "svc", "gpus": 8, "queued_since": QUEUED},
    ]
    inp = PlanningInput.model_validate(
        {"cluster": {"nodes": nodes}, "workloads": work, "policy": {"disruption": {"max_moves_per_round": 1}}}
    )
    moved = Assignment(workload="train", replica=0, node="d1", gpus=tuple(GpuUse(index=g) for g in range(4)))
    svc = Assignment(workload="svc", replica=0, node="d0", gpus=tuple(GpuUse(index=g) for g in range(8)))
    repaired = _repair(inp, moved, svc)
    gpus = {a.workload: (a.node, [g.index for g in a.gpus]) for a in repaired.assignments}
    assert gpus == {"train": ("d0", [0, 1, 2, 3]), "svc": ("d1", list(range(8)))}
    assert _valid(inp, repaired) == []


def test_an_undoing_the_validator_refuses_is_left_out_and_the_others_kept() -> None:
    """Two swaps: ``r``/``w`` across an L4 and an L40S node, where team b may use no L40S (quota 0),
    and ``r2``/``w2`` across two identical L40S nodes. Undoing the first would put ``w`` on the L40S,
    which the validator refuses (a rule the repair does not check itself): that one stays, the other is
    undone."""
    nodes = [
        {"name": "l4", "cpu_milli": 64000, "memory_mib": 262144, "gpus": [{"index": 0, "model": "L4-24GB"}]},
        *_nodes(3),
    ]
    work = [
        {**_runner("r", "l4"), "team": "a"},
        {**_newcomer("w"), "team": "b"},
        {**_runner("r2", "n1"), "team": "a"},
        {**_newcomer("w2"), "team": "a"},
    ]
    policy = {
        "teams": ["a", "b"],
        "quotas": [{"team": "b", "gpu_model": "L40S-48GB", "gpus": 0}],
        "disruption": {"max_moves_per_round": 2},
    }
    inp = PlanningInput.model_validate({"cluster": {"nodes": nodes}, "workloads": work, "policy": policy})
    repaired = _repair(inp, _on("r", "n0"), _on("w", "l4"), _on("r2", "n2"), _on("w2", "n1"))
    assert _where(repaired) == {"r": "n0", "w": "l4", "r2": "n1", "w2": "n2"}
    assert repaired.terms["idle_moves_undone"] == 1
    assert _valid(inp, repaired, moves=True) == []

"""The expected arrival mix: one rule for the target mix of every fragmentation measure, and what it
changes (and does not change) in a plan."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuplan.models import Cluster, PlanningInput, Policy, Workload, default_catalog
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.planning import inputs_digest, make_plan
from gpuplan.solvers.base import get_solver
from gpuplan.solvers.evaluate import fragmented_milli
from gpuplan.solvers.greedy import FgdScorer
from gpuplan.solvers.placement import Placer, problem_mix, target_mix
from gpuplan.solvers.run_options import RunOptions
from tests._factories import node_data

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _input(
    nodes: list[dict[str, Any]], workloads: list[dict[str, Any]], arrivals: Sequence[dict[str, Any]] = ()
) -> PlanningInput:
    return PlanningInput(
        cluster=Cluster.model_validate({"nodes": nodes}),
        workloads=tuple(Workload.model_validate(w) for w in workloads),
        policy=Policy(),
        arrivals=tuple(Workload.model_validate(w) for w in arrivals),
    )


DEMAND = [
    {"id": "a", "gpu_milli": 500, "replicas": 90},
    {"id": "b", "gpus": 1, "replicas": 6},
    {"id": "c", "cpu_milli": 1000, "replicas": 4},
]


def _mix(inp: PlanningInput) -> list[tuple[str, int, float]]:
    problem = compile_problem(inp, default_catalog(), NOW)
    # A fraction by its milli-GPU; a whole-GPU shape has 0 there.
    return [(t.shape.kind, t.shape.milli, round(t.weight, 4)) for t in problem_mix(problem)]


def test_without_arrivals_the_mix_is_the_demands_own() -> None:
    # 90 halves, 6 whole GPUs, 4 CPU-only: the halves and wholes cover 96% >= 95%; renormalised 90/96, 6/96.
    inp = _input([node_data("n", "A10", 1)], DEMAND)
    assert _mix(inp) == [("fraction", 500, 0.9375), ("whole", 0, 0.0625)]


def test_arrivals_replace_the_demands_mix_counting_replicas() -> None:
    # 3 whole-GPU replicas and one 300-milli one arrived: 75% + 25%, whatever the demand holds.
    arrived = [{"id": "w", "gpus": 1, "replicas": 3}, {"id": "f", "gpu_milli": 300}]
    inp = _input([node_data("n", "A10", 1)], DEMAND, arrived)
    assert _mix(inp) == [("whole", 0, 0.75), ("fraction", 300, 0.25)]


def test_an_arrival_with_alternatives_counts_half_for_each() -> None:
    arrived: list[dict[str, Any]] = [
        {"id": "either", "alternatives": [{"gpus": 1}, {"gpu_milli": 400}]},
        {"id": "w", "gpus": 1},
    ]
    inp = _input([node_data("n", "A10", 1)], DEMAND, arrived)
    # whole: 1/2 + 1 = 1.5 of 2 (75%, below 95%), then the 400-milli fraction: 0.5 of 2.
    assert _mix(inp) == [("whole", 0, 0.75), ("fraction", 400, 0.25)]


def test_the_demands_mix_is_target_mix_of_its_requests() -> None:
    inp = _input([node_data("n", "A10", 1)], DEMAND)
    problem = compile_problem(inp, default_catalog(), NOW)
    assert problem.arrivals == () and problem_mix(problem) == target_mix(problem.requests)


# Node b runs a 300-milli share (700 free); a 200-milli pod arrives. Against whole-GPU work, any share
# on the empty node a strands its GPU, so FGD joins b; against 700-milli work, b's 500 left would be
# too small, so FGD takes the empty node.
NODES = [node_data("a", "A10", 1), node_data("b", "A10", 1)]
ROUND = [
    {"id": "run", "gpu_milli": 300, "running_on": "b:0=300", "cpu_milli": 1000},
    {"id": "new", "gpu_milli": 200, "cpu_milli": 1000},
]


@pytest.mark.parametrize(
    ("arrived", "node"),
    [
        ({"id": "w", "gpus": 1, "cpu_milli": 1000, "replicas": 4}, "b"),
        ({"id": "f", "gpu_milli": 700, "cpu_milli": 1000, "replicas": 4}, "a"),
    ],
)
def test_fgd_leaves_room_for_the_expected_arrivals(arrived: dict[str, Any], node: str) -> None:
    problem = compile_problem(_input(NODES, ROUND, [arrived]), default_catalog(), NOW)
    result = get_solver("greedy-fgd").solve(problem, RunOptions())
    assert [(a.workload, a.node) for a in result.assignments if a.workload == "new"] == [("new", node)]


def test_the_measured_fragmentation_uses_the_arrival_mix() -> None:
    """With ``new`` on b, a keeps 1000 free and b 500: whole-GPU arrivals can use a's GPU but not b's
    500, 400-milli ones both; half of each strands half of b's 500."""
    whole = {"id": "w", "gpus": 1, "cpu_milli": 1000}
    share = {"id": "s", "gpu_milli": 400, "cpu_milli": 1000}
    on_b = compile_problem(_input(NODES, ROUND, [whole]), default_catalog(), NOW)
    placed = get_solver("greedy-fgd").solve(on_b, RunOptions()).assignments
    assert {a.workload: a.node for a in placed}["new"] == "b"
    for arrived, fragmented in (([whole], 500.0), ([share], 0.0), ([whole, share], 250.0)):
        problem = compile_problem(_input(NODES, ROUND, arrived), default_catalog(), NOW)
        assert fragmented_milli(problem, placed, ()) == (fragmented, 1500)


def test_an_input_without_arrivals_is_dumped_and_digested_as_before() -> None:
    inp = _input(NODES, ROUND)
    assert "arrivals" not in inp.model_dump(mode="json")
    with_them = _input(NODES, ROUND, [{"id": "w", "gpus": 1}])
    assert with_them.model_dump(mode="json")["arrivals"][0]["id"] == "w"
    assert inputs_digest(with_them) != inputs_digest(inp)
    assert PlanningInput.model_validate_json(with_them.model_dump_json()) == with_them


def test_a_plan_without_arrivals_is_unchanged() -> None:
    """The demand's own workloads given as the arrivals make the same mix, hence the same plan, as no
    arrivals; only the provenance says which mix was used."""
    inp = _input([*NODES, node_data("c", "A10", 2)], [*ROUND, {"id": "two", "gpus": 1, "replicas": 2}])
    same = inp.model_copy(update={"arrivals": inp.workloads})
    plans = [
        make_plan(i, solver=s, now=NOW, deterministic=True)
        for i in (inp, same)
        for s in ("greedy-fgd", "cpsat")
    ]
    for a, b in ((plans[0], plans[2]), (plans[1], plans[3])):
        assert a.assignments == b.assignments and a.metrics == b.metrics
        assert "arrival_replicas" not in a.provenance and b.provenance["arrival_replicas"] == 4


def test_an_arrival_with_an_unknown_gpu_model_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="arrival 'x' field gpu_models: unknown GPU model 'B9000'"):
        _input(NODES, ROUND, [{"id": "x", "gpus": 1, "gpu_models": ["B9000"]}])


def test_a_placer_given_another_scorer_scores_afresh() -> None:
    """The same state and pod, first against whole-GPU work (b, as above), then against 700-milli work
    (a): scores memoised for the first mix are not reused."""
    arrived = [{"id": "w", "gpus": 1, "cpu_milli": 1000}]
    problem = compile_problem(_input(NODES, ROUND, arrived), default_catalog(), NOW)
    placer = Placer(problem.nodes, problem.catalog, FgdScorer(problem_mix(problem)))
    run, new = problem.requests
    placer.keep(run)
    assert [placer.infos[n].name for n in placer.ranked(new, 1)] == ["b"]
    shares = [{"id": "f", "gpu_milli": 700, "cpu_milli": 1000}]
    other = compile_problem(_input(NODES, ROUND, shares), default_catalog(), NOW)
    placer.use_scorer(FgdScorer(problem_mix(other)))
    assert [placer.infos[n].name for n in placer.ranked(new, 1)] == ["a"]

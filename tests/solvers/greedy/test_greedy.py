"""Behaviour of the greedy back-ends (first-fit, best-fit, FGD) on small hand-made instances."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import (
    Cluster,
    GpuUse,
    MigInstance,
    MigPolicy,
    PlanningInput,
    PlanStatus,
    Policy,
    TimeSliced,
    TopologyNeed,
    Workload,
    check_mig_layout,
    default_catalog,
)
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.solvers.base import SolveResult, get_solver
from gpuplan.solvers.greedy import BestFit, Fgd, FirstFit, FirstFitScorer, fgd_score
from gpuplan.solvers.placement import NEVER_FITS, NO_CAPACITY, Placer, target_mix
from gpuplan.solvers.problem import NodeSpec, PlacementProblem, ShapeSpec
from gpuplan.solvers.run_options import RunOptions
from tests._factories import node_data

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SOLVERS = ["first-fit", "best-fit", "greedy-fgd"]


def gpus(model: str, count: int, numa: list[int] | None = None) -> list[dict[str, Any]]:
    """``count`` GPUs of one model."""
    return [{"index": i, "model": model, "numa": (numa or [0] * count)[i]} for i in range(count)]


def problem(
    nodes: list[dict[str, Any]], workloads: list[dict[str, Any]], policy: Policy | None = None
) -> PlacementProblem:
    """Validate and compile a planning input."""
    inp = PlanningInput(
        cluster=Cluster.model_validate({"nodes": nodes}),
        workloads=tuple(Workload.model_validate(w) for w in workloads),
        policy=policy or Policy(),
    )
    return compile_problem(inp, default_catalog(), NOW)


def solve(name: str, prob: PlacementProblem) -> SolveResult:
    """Solve and check every capacity invariant of the result."""
    result = get_solver(name).solve(prob, RunOptions())
    check_result(prob, result)
    return result


def placed(result: SolveResult) -> dict[tuple[str, int], tuple[str, tuple[Any, ...]]]:
    """(workload, replica) -> (node, GPU entries as tuples)."""
    return {
        (a.workload, a.replica): (
            a.node,
            tuple((g.index, g.milli, g.mig_profile, g.mig_start) for g in a.gpus),
        )
        for a in result.assignments
    }


def check_result(prob: PlacementProblem, result: SolveResult) -> None:
    """No GPU (milli-GPU or GPU memory), CPU or memory over-committed; MIG only at valid, non-overlapping,
    listed instances."""
    catalog = default_catalog()
    specs = {n.name: n for n in prob.nodes}
    whole: dict[tuple[str, int], int] = defaultdict(int)
    shared: dict[tuple[str, int], int] = defaultdict(int)
    gpu_memory: dict[tuple[str, int], int] = defaultdict(int)
    mig_uses: dict[tuple[str, int], list[tuple[str, int]]] = defaultdict(list)
    cpu: dict[str, int] = defaultdict(int)
    mem: dict[str, int] = defaultdict(int)
    seen = set()
    requests = {r.key: r for r in prob.requests}
    for a in result.assignments:
        assert (a.workload, a.replica) not in seen
        seen.add((a.workload, a.replica))
        check_topology(specs[a.node], requests[(a.workload, a.replica)].shapes[a.alternative], a.gpus)
        cpu[a.node] += a.cpu_milli
        mem[a.node] += a.memory_mib
        for g in a.gpus:
            key = (a.node, g.index)
            if g.mig_profile is not None:
                assert g.mig_start is not None
                mig_uses[key].append((g.mig_profile, g.mig_start))
            elif g.milli is not None:
                shared[key] += g.milli
                gpu_memory[key] += a.gpu_memory_mib
            else:
                whole[key] += 1
    for (node, index), held in gpu_memory.items():
        slot = next(g for g in specs[node].gpus if g.index == index)
        assert held <= slot.memory_mib, f"GPU {(node, index)} holds {held} MiB of {slot.memory_mib}"
    layouts = {(m.node, m.gpu): m.instances for m in result.mig_layouts}
    mig_gpus = {(n.name, g.index) for n in prob.nodes for g in n.gpus if g.mig is not None}
    assert set(layouts) == mig_gpus
    modes = {(n.name, g.index): g.sharing for n in prob.nodes for g in n.gpus}
    for key in set(whole) | set(shared):
        assert key not in mig_gpus, f"whole/fractional use of MIG-enabled GPU {key}"
        assert not (whole[key] and isinstance(modes[key], TimeSliced)), f"whole use of time-sliced GPU {key}"
        assert not (shared[key] and modes[key] == "exclusive"), f"fractional use of exclusive GPU {key}"
        assert whole[key] <= 1 and (whole[key] == 0 or shared[key] == 0), f"GPU {key} shared with a whole use"
        assert shared[key] <= 1000, f"GPU {key} has {shared[key]} milli"
    for key, instances in layouts.items():
        model = next(g.model for g in specs[key[0]].gpus if g.index == key[1])
        assert check_mig_layout(model, instances, catalog) == []
        starts = [i.start for i in instances]
        assert starts == sorted(starts)
        uses = mig_uses.get(key, [])
        assert len(uses) == len(set(uses)), f"MIG instance used twice on {key}"
        assert set(uses) <= {(i.profile, i.start) for i in instances}
    for key in mig_uses:
        assert key in mig_gpus, f"MIG use of a MIG-disabled GPU {key}"
    for name, spec in specs.items():
        assert cpu[name] <= spec.cpu_milli and mem[name] <= spec.memory_mib
    assert len(result.assignments) + len(result.unplaced) == len(prob.requests)


def check_topology(spec: NodeSpec, shape: ShapeSpec, uses: tuple[GpuUse, ...]) -> None:
    """Whole multi-GPU requests honour their NVLink / NUMA need."""
    indices = {g.index for g in uses}
    if shape.kind != "whole" or len(indices) < 2:
        return
    assert len(indices) == shape.gpus
    if shape.topology is TopologyNeed.NVLINK:
        assert any(indices <= clique for clique in spec.nvlink_cliques), f"{indices} not one NVLink clique"
    if shape.topology is TopologyNeed.NUMA:
        assert len({g.numa for g in spec.gpus if g.index in indices}) == 1, f"{indices} span NUMA nodes"


def test_registry_names_the_greedy_solvers() -> None:
    assert isinstance(get_solver("first-fit"), FirstFit)
    assert isinstance(get_solver("best-fit"), BestFit)
    assert isinstance(get_solver("greedy-fgd"), Fgd)


@pytest.mark.parametrize("name", SOLVERS)
def test_everything_that_trivially_fits_is_placed(name: str) -> None:
    prob = problem(
        [node_data("a", gpus=gpus("A10", 4)), node_data("b", gpus=gpus("T4", 2))],
        [
            {"id": "two", "gpus": 2, "cpu_milli": 4000, "memory_mib": 8192},
            {"id": "share", "gpu_milli": 300, "replicas": 3, "cpu_milli": 1000},
            {"id": "cpu", "cpu_milli": 2000, "memory_mib": 1024},
        ],
    )
    result = solve(name, prob)
    # Everything placed: nothing waits, so the queue term, the bound and the gap are all zero.
    assert result.status is PlanStatus.FEASIBLE and result.objective == 0 and result.best_bound == 0
    assert result.gap == 0
    assert result.unplaced == ()
    assert len(result.assignments) == 5
    assert result.terms["placed"] == 5 and result.terms["queue"] == 0
    share = [a for a in result.assignments if a.workload == "share"]
    assert all(len(a.gpus) == 1 and a.gpus[0].milli == 300 for a in share)
    assert next(a for a in result.assignments if a.workload == "cpu").gpus == ()


@pytest.mark.parametrize("name", SOLVERS)
def test_whole_gpus_are_exclusive_and_fractions_share(name: str) -> None:
    prob = problem(
        [node_data("a", gpus=gpus("A10", 2))],
        [
            {"id": "w", "gpus": 1, "priority": 9},
            {"id": "f6", "gpu_milli": 600, "priority": 8},
            {"id": "f4", "gpu_milli": 400, "priority": 7},
            {"id": "f1", "gpu_milli": 100, "priority": 6},
            {"id": "w2", "gpus": 1, "priority": 5},
        ],
    )
    result = solve(name, prob)
    where = placed(result)
    assert ("w", 0) in where and ("f6", 0) in where and ("f4", 0) in where
    assert {u.workload: u.code for u in result.unplaced} == {"f1": NO_CAPACITY, "w2": NO_CAPACITY}


@pytest.mark.parametrize("name", SOLVERS)
def test_mig_instances_are_created_at_valid_starts(name: str) -> None:
    catalog = default_catalog()
    prob = problem(
        [node_data("a", gpus=[{"index": 0, "model": "A100-SXM4-40GB", "mig": {"instances": []}}])],
        [{"id": "m", "mig_profile": "3g.20gb", "replicas": 3}],
    )
    result = solve(name, prob)
    starts = sorted(a.gpus[0].mig_start for a in result.assignments if a.gpus[0].mig_start is not None)
    assert starts == [0, 4]
    assert set(starts) <= catalog.model("A100-SXM4-40GB").profile("3g.20gb").starts
    assert [(u.workload, u.code) for u in result.unplaced] == [("m", NO_CAPACITY)]
    (layout,) = result.mig_layouts
    assert layout.instances == (
        MigInstance(profile="3g.20gb", start=0),
        MigInstance(profile="3g.20gb", start=4),
    )


@pytest.mark.parametrize("name", SOLVERS)
def test_mig_not_created_when_the_policy_forbids_it(name: str) -> None:
    no_create = Policy(mig=MigPolicy(allow_create=False))
    existing = {
        "index": 0,
        "model": "A100-SXM4-40GB",
        "mig": {"instances": [{"profile": "1g.5gb", "start": 2}]},
    }
    prob = problem(
        [node_data("a", gpus=[existing])],
        [{"id": "small", "mig_profile": "1g.5gb", "replicas": 2}, {"id": "big", "mig_profile": "3g.20gb"}],
        no_create,
    )
    result = solve(name, prob)
    assert placed(result) == {("small", 0): ("a", ((0, None, "1g.5gb", 2),))}
    codes = {(u.workload, u.replica): u.code for u in result.unplaced}
    assert codes == {("small", 1): NO_CAPACITY, ("big", 0): NEVER_FITS}
    assert result.mig_layouts[0].instances == (MigInstance(profile="1g.5gb", start=2),)


@pytest.mark.parametrize("name", SOLVERS)
def test_a_free_existing_mig_instance_is_used_before_creating_one(name: str) -> None:
    existing = {
        "index": 0,
        "model": "A100-SXM4-40GB",
        "mig": {"instances": [{"profile": "3g.20gb", "start": 4}]},
    }
    prob = problem([node_data("a", gpus=[existing])], [{"id": "m", "mig_profile": "3g.20gb"}])
    result = solve(name, prob)
    assert placed(result) == {("m", 0): ("a", ((0, None, "3g.20gb", 4),))}
    assert result.mig_layouts[0].instances == (MigInstance(profile="3g.20gb", start=4),)


@pytest.mark.parametrize("name", SOLVERS)
def test_mig_and_plain_gpus_are_never_mixed(name: str) -> None:
    prob = problem(
        [
            node_data(
                "a",
                gpus=[
                    {"index": 0, "model": "A100-SXM4-40GB", "mig": {"instances": []}},
                    {"index": 1, "model": "A100-SXM4-40GB"},
                ],
            )
        ],
        [
            {"id": "frac", "gpu_milli": 500, "priority": 3},
            {"id": "mig", "mig_profile": "1g.5gb", "priority": 2},
            {"id": "whole", "gpus": 1, "priority": 1},
        ],
    )
    result = solve(name, prob)
    where = placed(result)
    assert where[("frac", 0)][1][0][0] == 1
    assert where[("mig", 0)][1][0][0] == 0
    assert [(u.workload, u.code) for u in result.unplaced] == [("whole", NO_CAPACITY)]


@pytest.mark.parametrize("name", SOLVERS)
def test_nvlink_requests_take_a_bridged_pair(name: str) -> None:
    bridged = node_data("h", topology="pcie-4x-h100-nvl-bridged")
    prob = problem(
        [bridged],
        [
            {"id": "p1", "gpus": 2, "topology": "nvlink", "priority": 5},
            {"id": "p2", "gpus": 2, "topology": "nvlink", "priority": 4},
            {"id": "three", "gpus": 3, "topology": "nvlink", "priority": 3},
        ],
    )
    result = solve(name, prob)
    pairs = {frozenset(g[0] for g in uses) for _, uses in placed(result).values()}
    assert pairs == {frozenset({0, 1}), frozenset({2, 3})}
    assert [(u.workload, u.code) for u in result.unplaced] == [("three", NEVER_FITS)]


@pytest.mark.parametrize("name", SOLVERS)
def test_nvlink_pair_needs_both_bridged_gpus_free(name: str) -> None:
    prob = problem(
        [node_data("h", topology="pcie-4x-h100-nvl-bridged")],
        [
            {"id": "r0", "gpus": 1, "running_on": "h:0"},
            {"id": "r2", "gpus": 1, "running_on": "h:3"},
            {"id": "pair", "gpus": 2, "topology": "nvlink"},
            {"id": "any", "gpus": 2, "topology": "any"},
        ],
    )
    result = solve(name, prob)
    assert placed(result)[("any", 0)] == ("h", ((1, None, None, None), (2, None, None, None)))
    assert [(u.workload, u.code) for u in result.unplaced] == [("pair", NO_CAPACITY)]


@pytest.mark.parametrize("name", SOLVERS)
def test_numa_requests_stay_on_one_numa_node(name: str) -> None:
    prob = problem(
        [node_data("a", gpus=gpus("A10", 4, numa=[0, 1, 0, 1]))],
        [{"id": "n", "gpus": 2, "topology": "numa", "replicas": 2}],
    )
    result = solve(name, prob)
    sets = sorted(sorted(g[0] for g in uses) for _, uses in placed(result).values())
    assert sets == [[0, 2], [1, 3]]


@pytest.mark.parametrize("name", SOLVERS)
def test_gang_is_all_or_nothing(name: str) -> None:
    prob = problem(
        [node_data("a", gpus=gpus("A10", 2)), node_data("b", gpus=gpus("A10", 2))],
        [
            {"id": "big", "gpus": 2, "replicas": 3, "gang": "true", "priority": 5},
            {"id": "fits", "gpus": 1, "replicas": 2, "gang": "g2", "priority": 4},
            {"id": "also", "gpus": 1, "replicas": 2, "gang": "g2", "priority": 3},
            {"id": "solo", "gpus": 1, "priority": 1},
        ],
    )
    result = solve(name, prob)
    where = placed(result)
    assert not any(w == "big" for w, _ in where)
    # Three 2-GPU replicas on two 2-GPU nodes: the gang can never be placed whole, even on empty nodes.
    assert {u.code for u in result.unplaced if u.workload == "big"} == {NEVER_FITS}
    assert len([u for u in result.unplaced if u.workload == "big"]) == 3
    assert {("fits", 0), ("fits", 1), ("also", 0), ("also", 1)} <= set(where)
    assert [(u.workload, u.code) for u in result.unplaced if u.workload != "big"] == [("solo", NO_CAPACITY)]


@pytest.mark.parametrize("name", SOLVERS)
def test_running_work_is_kept_where_it_runs(name: str) -> None:
    prob = problem(
        [node_data("a", gpus=gpus("A10", 2))],
        [
            {"id": "run", "gpus": 1, "running_on": "a:1", "cpu_milli": 1000},
            {"id": "shared", "gpu_milli": 500, "running_on": "a:0=500"},
            {"id": "new", "gpu_milli": 600},
            {"id": "fits", "gpu_milli": 500},
        ],
    )
    result = solve(name, prob)
    where = placed(result)
    assert where[("run", 0)] == ("a", ((1, None, None, None),))
    assert where[("shared", 0)] == ("a", ((0, 500, None, None),))
    assert where[("fits", 0)] == ("a", ((0, 500, None, None),))
    assert [(u.workload, u.code) for u in result.unplaced] == [("new", NO_CAPACITY)]
    assert result.terms["kept"] == 2
    assert result.assignments[0].workload in ("run", "shared")


@pytest.mark.parametrize("name", SOLVERS)
def test_team_exclusive_nodes_host_only_their_team(name: str) -> None:
    policy = Policy.model_validate({"isolation": [{"kind": "team-exclusive", "team": "a", "pool": "p1"}]})
    prob = problem(
        [
            node_data("mine", gpus=gpus("A10", 2), pool="p1"),
            node_data("open", gpus=gpus("A10", 1), pool="p2"),
        ],
        [
            {"id": "b1", "team": "b", "gpus": 1, "priority": 5},
            {"id": "b2", "team": "b", "gpus": 1, "priority": 4},
            {"id": "a1", "team": "a", "gpus": 2, "priority": 3},
        ],
        policy,
    )
    result = solve(name, prob)
    where = placed(result)
    assert where[("b1", 0)][0] == "open" and where[("a1", 0)][0] == "mine"
    assert [(u.workload, u.code) for u in result.unplaced] == [("b2", NO_CAPACITY)]


@pytest.mark.parametrize("name", SOLVERS)
def test_no_gpu_is_shared_across_teams_or_isolated_tiers(name: str) -> None:
    policy = Policy.model_validate(
        {
            "isolation": [
                {"kind": "no-shared-gpu-across-teams"},
                {"kind": "tiers-no-share", "tiers": ["latency-sensitive", "background"]},
            ]
        }
    )
    prob = problem(
        [node_data("a", gpus=gpus("A10", 2))],
        [
            {"id": "a-ls", "team": "a", "tier": "latency-sensitive", "gpu_milli": 300, "priority": 9},
            {"id": "b", "team": "b", "gpu_milli": 300, "priority": 8},
            {"id": "a-bg", "team": "a", "tier": "background", "gpu_milli": 300, "priority": 7},
            {"id": "a-std", "team": "a", "tier": "standard", "gpu_milli": 300, "priority": 6},
        ],
        policy,
    )
    result = solve(name, prob)
    where = placed(result)
    assert where[("a-ls", 0)][1][0][0] != where[("b", 0)][1][0][0]
    assert where[("a-std", 0)][1][0][0] == where[("a-ls", 0)][1][0][0]
    assert [(u.workload, u.code) for u in result.unplaced] == [("a-bg", NO_CAPACITY)]


@pytest.mark.parametrize("name", SOLVERS)
def test_quotas_hold_and_only_preemptible_work_borrows(name: str) -> None:
    policy = Policy.model_validate(
        {"quotas": [{"team": "a", "gpus": 1.5, "borrow": True}, {"team": "b", "gpus": 1}]}
    )
    prob = problem(
        [node_data("a", gpus=gpus("A10", 8))],
        [
            {"id": "a-firm", "team": "a", "gpus": 1, "priority": 9},
            {"id": "a-half", "team": "a", "gpu_milli": 500, "priority": 8},
            {"id": "a-more", "team": "a", "gpu_milli": 100, "priority": 7},
            {"id": "a-spot", "team": "a", "gpus": 2, "preemptible": True, "priority": 6},
            {"id": "b-two", "team": "b", "gpus": 2, "priority": 5},
            {"id": "b-one", "team": "b", "gpus": 1, "priority": 4},
        ],
        policy,
    )
    result = solve(name, prob)
    assert set(placed(result)) == {("a-firm", 0), ("a-half", 0), ("a-spot", 0), ("b-one", 0)}
    assert {u.workload for u in result.unplaced} == {"a-more", "b-two"}


@pytest.mark.parametrize("name", SOLVERS)
def test_gang_stays_inside_one_domain_value(name: str) -> None:
    prob = problem(
        [
            node_data("r1a", gpus=gpus("A10", 1), labels={"rack": "r1"}),
            node_data("r2a", gpus=gpus("A10", 1), labels={"rack": "r2"}),
            node_data("r2b", gpus=gpus("A10", 1), labels={"rack": "r2"}),
        ],
        [{"id": "g", "gpus": 1, "replicas": 2, "gang": "true", "gang_domain": "rack"}],
    )
    result = solve(name, prob)
    assert {where[0] for where in placed(result).values()} == {"r2a", "r2b"}


def test_best_fit_packs_where_first_fit_takes_the_first_node() -> None:
    prob = problem(
        [node_data("big", gpus=gpus("A10", 8)), node_data("small", gpus=gpus("A10", 1))],
        [{"id": "one", "gpus": 1, "cpu_milli": 1000}],
    )
    assert placed(solve("first-fit", prob))[("one", 0)][0] == "big"
    assert placed(solve("best-fit", prob))[("one", 0)][0] == "small"


def test_best_fit_takes_the_tightest_shared_gpu() -> None:
    prob = problem(
        [node_data("a", gpus=gpus("A10", 3))],
        [
            {"id": "r0", "gpu_milli": 200, "running_on": "a:0=200"},
            {"id": "r1", "gpu_milli": 600, "running_on": "a:1=600"},
            {"id": "new", "gpu_milli": 300},
        ],
    )
    assert placed(solve("best-fit", prob))[("new", 0)] == ("a", ((1, 300, None, None),))
    assert placed(solve("first-fit", prob))[("new", 0)] == ("a", ((0, 300, None, None),))


@settings(max_examples=30, deadline=None)
@given(
    order=st.permutations(range(6)),
    sizes=st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=6),
)
def test_fgd_and_best_fit_place_the_same_whatever_the_order_of_the_node_rows(
    order: list[int], sizes: list[int]
) -> None:
    """Six identical nodes listed in any order: every tie between them goes to the same node names, so
    each replica lands on the same node, while first-fit takes the first node listed."""
    nodes = [node_data(f"node-{i}", gpus=gpus("A10", 4)) for i in range(6)]
    work = [{"id": f"w{k}", "gpus": g, "cpu_milli": 1000} for k, g in enumerate(sizes)]
    listed = problem(nodes, work)
    shuffled = problem([nodes[i] for i in order], work)
    for name in ("greedy-fgd", "best-fit"):
        assert placed(solve(name, listed)) == placed(solve(name, shuffled))
    first = {a.node for a in solve("first-fit", shuffled).assignments if a.workload == "w0"}
    assert first == {f"node-{order[0]}"}


def test_fgd_leaves_less_fragmentation_than_first_fit() -> None:
    # The demand is dominated by 2-GPU requests: a shared slice belongs on the 1-GPU node.
    prob = problem(
        [node_data("pair", gpus=gpus("T4", 2)), node_data("single", gpus=gpus("T4", 1))],
        [
            {"id": "slice", "gpu_milli": 500, "priority": 9},
            {"id": "duo", "gpus": 2, "replicas": 3},
        ],
    )
    fgd = solve("greedy-fgd", prob)
    first = solve("first-fit", prob)
    assert placed(fgd)[("slice", 0)][0] == "single"
    assert placed(fgd)[("duo", 0)][0] == "pair"
    assert placed(first)[("slice", 0)][0] == "pair"
    assert not any(w == "duo" for w, _ in placed(first))


def test_fgd_prefers_filling_a_fragment_over_opening_a_whole_gpu() -> None:
    prob = problem(
        [node_data("a", gpus=gpus("T4", 2)), node_data("b", gpus=gpus("T4", 2))],
        [
            {"id": "old", "gpu_milli": 500, "running_on": "b:1=500"},
            {"id": "half", "gpu_milli": 500},
            {"id": "one", "gpus": 1, "replicas": 3},
        ],
    )
    result = solve("greedy-fgd", prob)
    assert placed(result)[("half", 0)] == ("b", ((1, 500, None, None),))
    assert result.unplaced == ()


def test_target_mix_covers_95_percent_of_the_demand() -> None:
    prob = problem(
        [node_data("a", gpus=gpus("A10", 1))],
        [
            {"id": "a", "gpu_milli": 500, "replicas": 90},
            {"id": "b", "gpus": 1, "replicas": 6},
            {"id": "c", "cpu_milli": 1000, "replicas": 4},
        ],
    )
    mix = target_mix(prob.requests)
    assert [(t.shape.kind, round(t.weight, 4)) for t in mix] == [("fraction", 0.9375), ("whole", 0.0625)]


def test_fgd_score_is_the_quantised_sigmoid() -> None:
    assert fgd_score(0.0) == 50
    assert fgd_score(1000.0) == 73
    assert fgd_score(-1e9) == 0


def test_placer_places_one_request_at_a_time() -> None:
    prob = problem([node_data("a", gpus=gpus("A10", 2))], [{"id": "x", "gpus": 1, "replicas": 3}])
    placer = Placer(prob.nodes, prob.catalog, FirstFitScorer())
    first, second, third = prob.requests
    assert placer.place(first) is not None
    assert placer.used_gpu_milli == 1000 and placer.capacity_gpu_milli == 2000
    assert placer.place(second) is not None
    assert placer.place(third) is None
    assert placer.unplaced(third).code == NO_CAPACITY


def test_placer_rank_breaks_ties() -> None:
    prob = problem(
        [node_data("a", gpus=gpus("A10", 1)), node_data("b", gpus=gpus("A10", 1))], [{"id": "x", "gpus": 1}]
    )
    placer = Placer(prob.nodes, prob.catalog, FirstFitScorer(), rank=[1, 0])
    assignment = placer.place(prob.requests[0])
    assert assignment is not None and assignment.node == "b"


MODELS = ["A100-SXM4-40GB", "T4", "A10"]
PROFILES = ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]


@st.composite
def instances(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A random small cluster and demand."""
    nodes = []
    for n in range(draw(st.integers(1, 3))):
        reference = draw(st.sampled_from([None, None, "pcie-4x-h100-nvl-bridged", "dgx-h100"]))
        if reference is not None:
            nodes.append(node_data(f"n{n}", topology=reference))
            continue
        gpu_list = []
        for i in range(draw(st.integers(1, 4))):
            model = draw(st.sampled_from(MODELS))
            entry: dict[str, Any] = {"index": i, "model": model, "numa": draw(st.integers(0, 1))}
            if model == "A100-SXM4-40GB" and draw(st.booleans()):
                layout = draw(st.sampled_from([[], [("3g.20gb", 4)], [("1g.5gb", 0), ("2g.10gb", 2)]]))
                entry["mig"] = {"instances": [{"profile": p, "start": s} for p, s in layout]}
            gpu_list.append(entry)
        sharing = draw(st.sampled_from([None, "exclusive", {"time-slicing": {"replicas": 2}}]))
        extra: dict[str, Any] = {} if sharing is None else {"sharing": sharing}
        nodes.append(
            node_data(f"n{n}", gpus=gpu_list, cpu_milli=draw(st.sampled_from([8000, 32000])), **extra)
        )
    has_mig = any(g["model"] == "A100-SXM4-40GB" for n in nodes for g in n.get("gpus", []))
    kinds = ["whole", "fraction", "cpu"] + (["mig"] if has_mig else [])
    workloads = []
    for w in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(kinds))
        spec: dict[str, Any] = {
            "id": f"w{w}",
            "replicas": draw(st.integers(1, 3)),
            "cpu_milli": draw(st.sampled_from([0, 1000, 6000])),
            "priority": draw(st.integers(0, 3)),
        }
        if kind == "whole":
            spec["gpus"] = draw(st.integers(1, 3))
            spec["topology"] = draw(st.sampled_from(["any", "numa", "same-node", "nvlink"]))
        elif kind == "fraction":
            spec["gpu_milli"] = draw(st.sampled_from([100, 250, 500, 900]))
            if draw(st.booleans()):  # T4 has 16 GiB, A10 24 GiB, A100 40 GiB
                spec["gpu_memory_mib"] = draw(st.sampled_from([6144, 12288, 20000]))
        elif kind == "mig":
            spec["mig_profile"] = draw(st.sampled_from(PROFILES))
        if draw(st.booleans()):
            spec["gang"] = "true"
        workloads.append(spec)
    return nodes, workloads


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_random_instances_never_overcommit(case: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    nodes, workloads = case
    prob = problem(nodes, workloads)
    for name in SOLVERS:
        solve(name, prob)

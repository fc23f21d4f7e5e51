"""The aggregated configuration LP (solvers/fleet/relaxation.py): its bound is never below what a plan
can place (brute force on one node, the exact model on small fleets) and is exact where the fills
make the packing exact."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import PlanStatus, default_catalog
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.planning import make_plan
from gpuplan.solvers.cpsat import pools, solver
from gpuplan.solvers.fleet.classes import NodeClass, RequestClass, node_classes, request_classes
from gpuplan.solvers.fleet.engine import _placer
from gpuplan.solvers.fleet.relaxation import aggregated_bound
from tests._factories import node_data
from tests.solvers.fleet.test_fleet import (
    NOW,
    _best_pattern_by_brute_force,
    _inp,
    _one_node_items,
    _openb_like,
)


def _classes(
    nodes: list[dict[str, Any]], work: list[dict[str, Any]]
) -> tuple[tuple[NodeClass, ...], tuple[RequestClass, ...], dict[str, int]]:
    problem = compile_problem(_inp(nodes, work), default_catalog(), NOW)
    classes = request_classes(problem, range(len(problem.requests)))
    by_workload = {problem.requests[c.members[0]].workload: c.index for c in classes}
    return node_classes(_placer(problem)), classes, by_workload


def _bound(nodes: list[dict[str, Any]], work: list[dict[str, Any]]) -> float:
    found = aggregated_bound(*_classes(nodes, work)[:2], time.perf_counter() + 30)
    assert found is not None
    return found.bound


def test_whole_gpus_bound_exactly_what_the_nodes_hold() -> None:
    """Two one-GPU nodes and three one-GPU replicas of equal value: two can be placed, no more."""
    nodes, classes, _ = _classes(
        [node_data(f"n{i}", "L40S-48GB", 1, cpu_milli=16000, memory_mib=1_000_000) for i in range(2)],
        [{"id": "w", "gpus": 1, "replicas": 3}],
    )
    (cls,) = classes
    found = aggregated_bound(nodes, classes, time.perf_counter() + 30)
    assert found is not None
    assert found.bound == pytest.approx(2 * cls.value)


def test_fractions_that_do_not_share_a_gpu_count_once_per_gpu() -> None:
    """Two 0.6-GPU replicas on one GPU: only one fits (the GPU's fills hold one 600); a bound on GPU
    capacity alone would allow 1.67 of them."""
    nodes, classes, _ = _classes(
        [node_data("n", "L40S-48GB", 1, cpu_milli=16000, memory_mib=1_000_000)],
        [{"id": "w", "gpu_milli": 600, "replicas": 2}],
    )
    found = aggregated_bound(nodes, classes, time.perf_counter() + 30)
    assert found is not None
    assert found.bound == pytest.approx(classes[0].value)


def test_cpu_left_on_one_node_does_not_serve_another() -> None:
    """The bound counts CPU per node class: nodes of different classes do not pool their CPU. A node
    with 2 GPUs and 4 cores and a node with 1 GPU and 16 cores; one-GPU replicas asking 4 cores: the
    first node hosts one, the second one, so two in all (GPU count alone would allow three)."""
    nodes = [
        node_data("a", "L40S-48GB", 2, cpu_milli=4000, memory_mib=1_000_000),
        node_data("b", "L40S-48GB", 1, cpu_milli=16000, memory_mib=1_000_000),
    ]
    ns, classes, _ = _classes(nodes, [{"id": "w", "gpus": 1, "cpu_milli": 4000, "replicas": 3}])
    found = aggregated_bound(ns, classes, time.perf_counter() + 30)
    assert found is not None
    assert found.bound == pytest.approx(2 * classes[0].value)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_bound_is_never_below_the_best_pattern_of_one_node(data: st.DataObject) -> None:
    """On one node, every multiset of replicas the node can hold (brute force: fractions packed GPU by
    GPU, whole GPUs exclusive, CPU within the node's) is worth at most the bound."""
    gpus, cpu, kinds, caps = _one_node_items(data)
    work = []
    for i, (kind, size, c) in enumerate(kinds):
        shape = {"gpu_milli": size} if kind == "fraction" else {"gpus": size}
        work.append({"id": f"w{i}", "replicas": caps[i], "cpu_milli": c, **shape})
    nodes, classes, by_workload = _classes(
        [node_data("n", "L40S-48GB", gpus, cpu_milli=cpu, memory_mib=1_000_000)], work
    )
    values = [float(classes[by_workload[f"w{i}"]].value) for i in range(len(kinds))]
    found = aggregated_bound(nodes, classes, time.perf_counter() + 30)
    assert found is not None
    best = _best_pattern_by_brute_force(gpus, cpu, list(kinds), caps, values)
    assert found.bound >= best - 1e-6
    assert found.bound <= sum(v * n for v, n in zip(values, caps, strict=True)) + 1e-6
    assert all(p >= 0 for p in found.prices)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_a_fleet_planned_in_parts_reports_the_aggregated_bound_below_the_proved_optimum(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet split into parts (POP) reports the aggregated LP's bound over the whole fleet, never above
    the optimum the full CP-SAT model proves on the same small instance, nor above the parts' plan."""
    rng = random.Random(seed)
    nodes, work = _openb_like(rng, rng.randint(5, 9))
    inp = _inp(nodes, work)
    exact = make_plan(inp, now=NOW, time_limit_s=30)
    assert exact.status is PlanStatus.OPTIMAL and exact.solver.objective is not None
    monkeypatch.setattr(solver, "MONOLITHIC_REPLICAS", 0)
    monkeypatch.setattr(solver, "one_configuration_lp", lambda problem, parts: False)
    # Two parts, each with fewer GPUs than the limit (the nodes are dealt across them): none is split again.
    monkeypatch.setattr(pools, "POOL_GPUS", sum(len(n["gpus"]) for n in nodes) - 1)
    split = make_plan(inp, now=NOW, time_limit_s=10)
    assert split.solver.terms.get("parts") == 2
    assert split.solver.bound_source in ("configuration LP", "knapsack")
    assert split.solver.best_bound is not None and split.solver.objective is not None
    assert split.solver.best_bound <= exact.solver.objective <= split.solver.objective

"""Patterns from the aggregated LP's solution (solvers/fleet/guided.py): each one a node of its class can
host (checked by brute force), never more replicas of a class than wait, and where the aggregated LP's
solution is whole the master over them alone reaches its bound."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.solvers.fleet.guided import guided_patterns
from gpuplan.solvers.fleet.master import Master
from gpuplan.solvers.fleet.relaxation import aggregated_bound
from tests._factories import node_data
from tests.solvers.fleet.test_fleet import _one_node_items
from tests.solvers.fleet.test_fleet_relaxation import _classes


def _fits(gpus: int, cpu: int, shapes: Sequence[tuple[str, int, int]], counts: Sequence[int]) -> bool:
    """Whether one node holds ``counts`` of each item: whole GPUs exclusive, fractions packed GPU by GPU
    (every assignment of the fraction items to the GPUs left tried), CPU within the node's."""
    if sum(n * shapes[i][2] for i, n in enumerate(counts)) > cpu:
        return False
    whole = sum(n * shapes[i][1] for i, n in enumerate(counts) if shapes[i][0] == "whole")
    if whole > gpus:
        return False
    pieces = [shapes[i][1] for i, n in enumerate(counts) if shapes[i][0] == "fraction" for _ in range(n)]
    free = gpus - whole
    return any(
        all(sum(p for p, g in zip(pieces, where, strict=True) if g == b) <= 1000 for b in range(free))
        for where in itertools.product(range(free), repeat=len(pieces))
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_guided_pattern_fits_one_node_and_the_queue(data: st.DataObject) -> None:
    """1-3 nodes of one kind and 1-3 kinds of item: every pattern packed from the aggregated LP's
    solution fits one node by brute force and takes no more replicas of a kind than wait."""
    gpus, cpu, kinds, caps = _one_node_items(data)
    count = data.draw(st.integers(1, 3))
    work = []
    for i, (kind, size, c) in enumerate(kinds):
        shape = {"gpu_milli": size} if kind == "fraction" else {"gpus": size}
        work.append({"id": f"w{i}", "replicas": caps[i], "cpu_milli": c, **shape})
    nodes, classes, by_workload = _classes(
        [node_data(f"n{k}", "L40S-48GB", gpus, cpu_milli=cpu, memory_mib=1_000_000) for k in range(count)],
        work,
    )
    relaxed = aggregated_bound(nodes, classes, time.perf_counter() + 30)
    assert relaxed is not None
    guided = guided_patterns(nodes, classes, relaxed, time.perf_counter() + 30)
    assert not guided.cut
    kind_of = {by_workload[f"w{i}"]: i for i in range(len(kinds))}
    for pattern in guided.patterns:
        per_class = pattern.per_class()
        counts = [0] * len(kinds)
        for c, n in per_class.items():
            counts[kind_of[c]] = n
            assert n <= classes[c].demand
        assert _fits(gpus, cpu, kinds, counts), (pattern, kinds)


def test_the_master_over_guided_patterns_reaches_the_bound_when_everything_fits() -> None:
    """Two nodes of two GPUs; two one-GPU replicas and four half-GPU replicas fill the four GPUs
    exactly: the patterns packed from the aggregated LP alone place everything."""
    nodes, classes, _ = _classes(
        [node_data(f"n{k}", "L40S-48GB", 2, cpu_milli=16000, memory_mib=1_000_000) for k in range(2)],
        [{"id": "whole", "gpus": 1, "replicas": 2}, {"id": "half", "gpu_milli": 500, "replicas": 4}],
    )
    relaxed = aggregated_bound(nodes, classes, time.perf_counter() + 30)
    assert relaxed is not None
    everything = sum(c.value * c.demand for c in classes)
    assert relaxed.bound == pytest.approx(everything)
    master = Master(nodes, classes)
    for pattern in guided_patterns(nodes, classes, relaxed, time.perf_counter() + 30).patterns:
        master.add(pattern)
    assert master.solve().value == pytest.approx(everything)


def test_no_time_left_packs_nothing_and_says_so() -> None:
    """A deadline already past: no pattern, and the packing reports it was cut."""
    nodes, classes, _ = _classes(
        [node_data("n", "L40S-48GB", 1, cpu_milli=16000, memory_mib=1_000_000)],
        [{"id": "w", "gpu_milli": 300, "replicas": 3}],
    )
    relaxed = aggregated_bound(nodes, classes, time.perf_counter() + 30)
    assert relaxed is not None
    guided = guided_patterns(nodes, classes, relaxed, time.perf_counter() - 1)
    assert guided.patterns == () and guided.cut

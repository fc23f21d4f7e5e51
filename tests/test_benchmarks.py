"""The benchmarks' shared helpers, and the rule that benchmarks reach gpuplan only through its product
entry points (``make_plan``, the executor, the importer) or the greedy placement kernel of the FGD
protocol, never through the exact engine's internals."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from benchmarks.b3_offline import cut
from benchmarks.common import arrivals, openb_pods, openb_trace, parse_seeds, rounds, total_milli, unique

ROOT = Path(__file__).resolve().parents[1]

#: Engine internals no benchmark may import (the engine is replaced behind ``make_plan``).
INTERNALS = ("gpuplan.solvers.cpsat", "gpuplan.solvers.formulation", "gpuplan.solvers.milp")


@pytest.mark.parametrize("path", sorted((ROOT / "benchmarks").glob("*.py")), ids=lambda p: p.name)
def test_benchmarks_do_not_import_engine_internals(path: Path) -> None:
    imported = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.append(node.module)
        elif isinstance(node, ast.Import):
            imported.extend(a.name for a in node.names)
    assert not [m for m in imported if m.startswith(INTERNALS)]


def test_parse_seeds_takes_ranges_and_lists() -> None:
    assert parse_seeds("42-44,50") == [42, 43, 44, 50]


def test_rounds_split_the_sequence_at_each_step() -> None:
    assert rounds([3, 3, 3, 5, 1], int, 6) == [[3, 3], [3, 5], [1]]


def test_arrivals_follow_the_fgd_protocol_and_repeat_per_seed() -> None:
    nodes, pods = openb_trace("default")
    capacity = sum(1000 * len(n.gpus) for n in nodes)
    order, rank = arrivals(pods, capacity, len(nodes), 42)
    assert (order, rank) == arrivals(pods, capacity, len(nodes), 42)
    assert sorted(rank) == list(range(len(nodes)))
    arrived = sum(total_milli(pods[i]) for i in order)
    assert capacity < arrived <= 1.3 * capacity
    workloads = unique([openb_pods("default")[i] for i in order])
    assert len({w.id for w in workloads}) == len(order)
    first = cut(workloads, capacity)
    assert sum(total_milli(w) for w in first[:-1]) < capacity <= sum(total_milli(w) for w in first)

"""The make-room search with moves: a waiting replica gets a node by moving running work, chained
across nodes, never beyond the disruption budget, never dropping running work."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import PlanningInput, default_catalog
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.greedy import Fgd, make_room, moved_running, room
from gpuplan.solvers.placement import Placer
from gpuplan.solvers.problem import PlacementProblem, Request, ShapeSpec
from gpuplan.solvers.run_options import RunOptions

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def _problem(
    gpus_per_node: list[int],
    work: list[dict[str, Any]],
    budget: int,
    models: dict[int, str] | None = None,
    labels: dict[int, dict[str, str]] | None = None,
) -> PlacementProblem:
    nodes = [
        {
            "name": f"n{i}",
            "cpu_milli": 64000,
            "memory_mib": 1_000_000,
            "gpus": [{"index": g, "model": (models or {}).get(i, "L40S-48GB")} for g in range(k)],
            "labels": (labels or {}).get(i, {}),
        }
        for i, k in enumerate(gpus_per_node)
    ]
    inp = PlanningInput.model_validate(
        {
            "cluster": {"nodes": nodes},
            "workloads": work,
            "policy": {"disruption": {"max_moves_per_round": budget}},
        }
    )
    return compile_problem(inp, default_catalog(), NOW)


def _roomed(problem: PlacementProblem) -> tuple[SolveResult, SolveResult]:
    placers: list[Placer] = []
    start = Fgd().place(problem, RunOptions(), on_kept=placers.append)
    out, _ = make_room(problem, placers[0], start, time.perf_counter() + 30)
    return start, out


def _running(name: str, milli: int, node: str, gpu: int = 0) -> dict[str, Any]:
    return {"id": name, "gpu_milli": milli, "cpu_milli": 1000, "running_on": f"{node}:{gpu}={milli}"}


def _drawn_work(sizes: list[int], running: list[tuple[int, int]], waiting: list[int]) -> list[dict[str, Any]]:
    """Running replicas (milli, spot) put on the GPU their spot names unless it is full, then the
    waiting replicas (milli; whole GPUs from 1000)."""
    work: list[dict[str, Any]] = []
    used: dict[tuple[int, int], int] = {}
    for i, (milli, spot) in enumerate(running):
        n = spot % len(sizes)
        g = (spot // len(sizes)) % sizes[n]
        if used.get((n, g), 0) + milli > 1000:
            continue
        used[(n, g)] = used.get((n, g), 0) + milli
        if milli == 1000:
            work.append({"id": f"r{i}", "gpus": 1, "cpu_milli": 1000, "running_on": f"n{n}:{g}"})
        else:
            work.append(_running(f"r{i}", milli, f"n{n}", g))
    for j, milli in enumerate(waiting):
        shape = {"gpus": milli // 1000} if milli >= 1000 else {"gpu_milli": milli}
        work.append({"id": f"w{j}", "cpu_milli": 1000, **shape})
    return work


WHOLE = {"id": "whole", "gpus": 1, "cpu_milli": 1000}


@pytest.mark.parametrize("budget", [0, 1])
def test_two_halves_on_one_node_make_a_whole_gpu(budget: int) -> None:
    """A two-GPU node runs a half on each GPU: one half moved next to the other frees a GPU for the
    waiting whole GPU, which takes one move."""
    work = [_running("h0", 500, "n0", 0), _running("h1", 500, "n0", 1), WHOLE]
    start, out = _roomed(_problem([2], work, budget))
    assert "whole" not in {a.workload for a in start.assignments}
    where = {a.workload: a for a in out.assignments}
    if budget:
        assert "whole" in where and moved_running(_problem([2], work, budget), out) == 1
        assert {g.index for g in where["h0"].gpus} == {g.index for g in where["h1"].gpus}
    else:
        assert "whole" not in where and set(where) == {"h0", "h1"}


@pytest.mark.parametrize("budget", [1, 2])
def test_a_chain_of_two_moves_frees_a_node(budget: int) -> None:
    """n0 (an L4, the only model the waiting whole GPU accepts) runs 700 milli, n1 400, n2 600. Only
    a chain frees n0: the 400 goes to n2 (full then), the 700 to n1, the whole GPU to n0. That is two
    moves: one is not enough."""
    work = [
        _running("a", 700, "n0"),
        _running("b", 400, "n1"),
        _running("c", 600, "n2"),
        {**WHOLE, "gpu_models": ["L4-24GB"]},
    ]
    problem = _problem([1, 1, 1], work, budget, {0: "L4-24GB"})
    _, out = _roomed(problem)
    where = {a.workload: a.node for a in out.assignments}
    if budget == 2:
        assert where == {"whole": "n0", "a": "n1", "b": "n2", "c": "n2"}
        assert moved_running(problem, out) == 2
    else:
        assert "whole" not in where and moved_running(problem, out) == 0


def test_running_work_in_a_chain_may_displace_a_newcomer_worth_as_much() -> None:
    """n0 (an L4, the only model the waiting job accepts) runs ``r``; FGD gives the newcomer ``fresh``
    the other node. Room for the job: ``r`` moves to n1 and ``fresh``, worth exactly what ``r`` is,
    waits. That step of the chain gains nothing by itself, but running work must find a place and the
    change as a whole gains what the job is worth over ``fresh``."""
    hours = timedelta(hours=1)
    work = [
        {"id": "r", "gpus": 1, "cpu_milli": 1000, "running_on": "n0:0"},
        {"id": "fresh", "gpus": 1, "cpu_milli": 1000, "queued_since": NOW.isoformat()},
        {**WHOLE, "id": "job", "gpu_models": ["L4-24GB"], "queued_since": (NOW - 5 * hours).isoformat()},
    ]
    problem = _problem([1, 1], work, 1, {0: "L4-24GB"})
    by = {q.key[0]: q for q in problem.requests}
    assert queue_penalty(by["r"], problem) == queue_penalty(by["fresh"], problem)
    start, out = _roomed(problem)
    assert {a.workload: a.node for a in start.assignments} == {"r": "n0", "fresh": "n1"}
    assert {a.workload: a.node for a in out.assignments} == {"job": "n0", "r": "n1"}
    assert moved_running(problem, out) == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=4),
    st.lists(st.tuples(st.sampled_from([250, 500, 700, 1000]), st.integers(0, 15)), max_size=10),
    st.lists(st.sampled_from([300, 500, 1000, 2000]), min_size=1, max_size=4),
    st.integers(0, 3),
)
def test_room_never_drops_running_work_nor_exceeds_the_budget(
    sizes: list[int], running: list[tuple[int, int]], waiting: list[int], budget: int
) -> None:
    """Whatever the cluster: every running replica stays placed, at most ``budget`` of them move, no
    replica is placed twice, GPUs are never over-committed and the queue term never grows (fewer large
    replicas may wait in place of more small ones)."""
    work = _drawn_work(sizes, running, waiting)
    problem = _problem(sizes, work, budget)
    start, out = _roomed(problem)
    keys = [(a.workload, a.replica) for a in out.assignments]
    assert len(keys) == len(set(keys))
    assert {k for k in keys if k[0].startswith("r")} == {
        (w["id"], 0) for w in work if w["id"].startswith("r")
    }
    assert moved_running(problem, out) <= budget
    by_key = {q.key: q for q in problem.requests}

    def queue(res: SolveResult) -> int:
        return sum(queue_penalty(by_key[(u.workload, u.replica)], problem) for u in res.unplaced)

    assert queue(out) <= queue(start)
    load: dict[tuple[str, int], int] = {}
    for a in out.assignments:
        for use in a.gpus:
            slot = (a.node, use.index)
            load[slot] = load.get(slot, 0) + (1000 if use.milli is None else use.milli)
    assert all(v <= 1000 for v in load.values())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.integers(1, 4), min_size=2, max_size=5),
    st.lists(st.tuples(st.sampled_from([250, 500, 500, 700]), st.integers(0, 19)), min_size=2, max_size=16),
    st.lists(st.sampled_from([500, 1000, 1000, 2000]), min_size=2, max_size=6),
    st.integers(1, 4),
)
def test_ranked_candidates_kept_up_to_date_equal_a_fresh_ranking(
    sizes: list[int], running: list[tuple[int, int]], waiting: list[int], budget: int
) -> None:
    """On a ranked fleet (every fleet here) the eviction estimates a search keeps from trial to trial,
    updated only on the nodes that changed, are at every call those of every host node computed
    afresh."""
    kept = room._Search.known
    calls: list[tuple[str, int]] = []

    def checked(self: room._Search, req: Request, shape: ShapeSpec) -> dict[int, int]:
        found = dict(kept(self, req, shape))
        fresh = {n: e for n in self.hosts(req) if (e := self.estimate(n, shape)) is not None}
        assert found == fresh
        calls.append(req.key)
        return found

    work = _drawn_work(sizes, running, waiting)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(room, "RANKED_ABOVE", 0)
        patch.setattr(room._Search, "known", checked)
        _roomed(_problem(sizes, work, budget))


@pytest.mark.parametrize("budget", [0, 1])
def test_a_waiting_gang_takes_two_nodes_from_a_single_job_worth_less(budget: int) -> None:
    """FGD places the 8-GPU job that waited longest on the empty node; the gang of two 8-GPU replicas,
    worth twice as much waiting, then fits nowhere: n1 runs a 4-GPU job. With one move the job goes to
    n2 (4 GPUs), the gang takes n0 and n1 and the single job waits; without it nothing changes."""
    hours = timedelta(hours=1)
    work = [
        {"id": "solo", "gpus": 8, "cpu_milli": 1000, "queued_since": (NOW - 3 * hours).isoformat()},
        {
            "id": "pair", "gpus": 8, "replicas": 2, "gang": "pair", "cpu_milli": 1000,
            "queued_since": (NOW - 2 * hours).isoformat(),
        },
        {"id": "run", "gpus": 4, "cpu_milli": 1000, "running_on": "n1:0,1,2,3"},
    ]  # fmt: skip
    problem = _problem([8, 8, 4], work, budget)
    start, out = _roomed(problem)
    assert {a.workload for a in start.assignments} == {"solo", "run"}
    where = {(a.workload, a.replica): a.node for a in out.assignments}
    if budget:
        assert where == {("pair", 0): "n0", ("pair", 1): "n1", ("run", 0): "n2"} or where == {
            ("pair", 0): "n1",
            ("pair", 1): "n0",
            ("run", 0): "n2",
        }
        assert moved_running(problem, out) == 1
    else:
        assert where == {("solo", 0): "n0", ("run", 0): "n1"}


def test_a_gang_with_a_domain_label_gets_room_inside_one_value() -> None:
    """The gang must sit in one rack: r0 holds n0 (free) and n1 (where the single job runs, movable),
    r1 holds only n2 (free). Room is made in r0 (n0 and n1), never across racks."""
    hours = timedelta(hours=1)
    work = [
        {"id": "solo", "gpus": 8, "cpu_milli": 1000, "running_on": "n1:0,1,2,3,4,5,6,7"},
        {
            "id": "pair", "gpus": 8, "replicas": 2, "gang": "pair", "gang_domain": "rack",
            "cpu_milli": 1000, "queued_since": (NOW - 2 * hours).isoformat(),
        },
    ]  # fmt: skip
    problem = _problem([8, 8, 8], work, 1, labels={0: {"rack": "r0"}, 1: {"rack": "r0"}, 2: {"rack": "r1"}})
    start, out = _roomed(problem)
    racks = {"n0": "r0", "n1": "r0", "n2": "r1"}
    placed = {a.workload: a.node for a in start.assignments}
    assert set(placed) == {"solo"}
    pair = [a.node for a in out.assignments if a.workload == "pair"]
    assert len(pair) == 2 and len({racks[n] for n in pair}) == 1
    assert {a.node for a in out.assignments if a.workload == "solo"} == {"n2"}

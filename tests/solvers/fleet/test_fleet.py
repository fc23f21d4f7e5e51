"""The fleet engine (target configurations): fills, exact pricing, a bound no plan beats, order
independence, and valid plans whatever the policy (make_plan validates every plan)."""

from __future__ import annotations

import itertools
import random
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import Node, PlanningInput, PlanStatus, default_catalog
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.planning import make_plan
from gpuplan.solvers.cpsat import solver
from gpuplan.solvers.fleet.classes import node_classes, request_classes
from gpuplan.solvers.fleet.engine import _placer
from gpuplan.solvers.fleet.pricing import fills, price
from gpuplan.solvers.run_options import RunOptions
from tests._factories import node_data

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(10, 600), min_size=1, max_size=5, unique=True),
    st.integers(100, 1000),
)
def test_fills_are_exactly_the_maximal_multisets(sizes: list[int], capacity: int) -> None:
    ordered = tuple(sorted(sizes))
    found = set(fills(capacity, ordered))
    expected = set()
    ranges = [range(capacity // s + 1) for s in ordered]
    for counts in itertools.product(*ranges):
        used = sum(k * s for k, s in zip(counts, ordered, strict=True))
        if any(counts) and used <= capacity and capacity - used < ordered[0]:
            expected.add(counts)
    assert found == expected


def _inp(
    nodes: list[dict[str, Any]], work: list[dict[str, Any]], policy: dict[str, Any] | None = None
) -> PlanningInput:
    return PlanningInput.model_validate(
        {"cluster": {"nodes": nodes}, "workloads": work, "policy": policy or {}}
    )


def _best_pattern_by_brute_force(
    gpus: int, cpu: int, shapes: list[tuple[str, int, int]], caps: list[int], values: list[float]
) -> float:
    """The most valuable multiset of items one node holds: whole GPUs exclusive, fractions packed GPU by
    GPU (every assignment of the fraction items to GPUs tried), CPU within the node's."""
    best = 0.0
    for counts in itertools.product(*(range(c + 1) for c in caps)):
        if sum(n * shapes[i][2] for i, n in enumerate(counts)) > cpu:
            continue
        whole = sum(n * shapes[i][1] for i, n in enumerate(counts) if shapes[i][0] == "whole")
        if whole > gpus:
            continue
        pieces = [shapes[i][1] for i, n in enumerate(counts) if shapes[i][0] == "fraction" for _ in range(n)]
        free = gpus - whole
        fits = any(
            all(sum(p for p, g in zip(pieces, where, strict=True) if g == b) <= 1000 for b in range(free))
            for where in itertools.product(range(free), repeat=len(pieces))
        ) if pieces else True  # fmt: skip
        if fits:
            best = max(best, sum(n * values[i] for i, n in enumerate(counts)))
    return best


def _one_node_items(data: st.DataObject) -> tuple[int, int, list[tuple[str, int, int]], list[int]]:
    """One node's GPUs and CPU, and 1-3 kinds of item (``whole`` GPUs or a ``fraction`` in milli-GPU, its
    CPU) with how many replicas of each: the cases :func:`_best_pattern_by_brute_force` solves."""
    gpus = data.draw(st.integers(1, 3))
    cpu = data.draw(st.sampled_from([4000, 8000, 16000]))
    kinds = data.draw(
        st.lists(
            st.one_of(
                st.tuples(
                    st.just("fraction"),
                    st.sampled_from([200, 300, 450, 600, 700]),
                    st.sampled_from([0, 1000, 2000]),
                ),
                st.tuples(st.just("whole"), st.integers(1, 2), st.sampled_from([0, 2000])),
            ),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    caps = [data.draw(st.integers(1, 3)) for _ in kinds]
    return gpus, cpu, kinds, caps


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_pricing_finds_the_best_pattern_of_a_node(data: st.DataObject) -> None:
    gpus, cpu, kinds, caps = _one_node_items(data)
    values = [float(data.draw(st.integers(1, 50))) for _ in kinds]
    # The node's sharing mode: none, or one that offers only whole GPUs or only fractions.
    offered = data.draw(st.sampled_from([None, "whole", "fraction"]))
    work = []
    for i, (kind, size, c) in enumerate(kinds):
        shape = {"gpu_milli": size} if kind == "fraction" else {"gpus": size}
        work.append({"id": f"w{i}", "replicas": caps[i], "cpu_milli": c, **shape})
    n = node_data("n", "L40S-48GB", gpus, cpu_milli=cpu, memory_mib=1_000_000)
    if offered is not None:
        n["sharing"] = "exclusive" if offered == "whole" else {"time-slicing": {"replicas": 4}}
        caps = [cap if kinds[i][0] == offered else 0 for i, cap in enumerate(caps)]
    inp = _inp([n], work)
    problem = compile_problem(inp, default_catalog(), NOW)
    classes = request_classes(problem, range(len(problem.requests)))
    (nc,) = node_classes(_placer(problem))
    by_workload = {problem.requests[c.members[0]].workload: c.index for c in classes}
    reduced = {by_workload[f"w{i}"]: values[i] for i in range(len(kinds))}
    priced = price(nc, classes, reduced, time_limit_s=10)
    expected = _best_pattern_by_brute_force(gpus, cpu, [(k, s, c) for k, s, c in kinds], caps, values)
    assert priced.proved and priced.best == pytest.approx(expected)
    assert priced.upper == pytest.approx(expected)


def _openb_like(rng: random.Random, pods: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [
        node_data(
            f"n{i}",
            "L40S-48GB",
            rng.choice([1, 2, 4]),
            cpu_milli=rng.choice([8000, 16000, 32000]),
            memory_mib=1_000_000,
        )
        for i in range(rng.randint(2, 4))
    ]
    sizes = [{"gpus": 1}, {"gpus": 2}, {"gpu_milli": 500}, {"gpu_milli": 300}, {"gpu_milli": 700}, {}]
    work = [
        {"id": f"p{i}", "cpu_milli": rng.choice([1000, 2000, 4000]), **rng.choice(sizes)} for i in range(pods)
    ]
    return nodes, work


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_the_configuration_bound_is_never_above_the_proved_optimum(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fleet engine's queue bound (from its configuration LP) never exceeds the optimum that the
    full CP-SAT model proves on the same small instance."""
    rng = random.Random(seed)
    nodes, work = _openb_like(rng, rng.randint(6, 14))
    inp = _inp(nodes, work)
    exact = make_plan(inp, now=NOW, time_limit_s=30)
    assert exact.status is PlanStatus.OPTIMAL
    monkeypatch.setattr(solver, "MONOLITHIC_REPLICAS", 0)
    fleet = make_plan(inp, now=NOW, time_limit_s=10)
    assert fleet.solver.bound_source in ("configuration LP", "knapsack")
    assert fleet.solver.best_bound is not None and exact.solver.objective is not None
    assert fleet.solver.best_bound <= exact.solver.objective
    assert fleet.solver.objective is not None and fleet.solver.objective >= exact.solver.objective


def test_the_plan_does_not_depend_on_the_input_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(solver, "MONOLITHIC_REPLICAS", 0)
    rng = random.Random(7)
    nodes, work = _openb_like(rng, 40)
    allocations = set()
    cpu_first = sorted(work, key=lambda w: "gpus" in w or "gpu_milli" in w)
    shuffled = list(work)
    rng.shuffle(shuffled)
    for order in (work, list(reversed(work)), cpu_first, shuffled):
        plan = make_plan(
            _inp(list(reversed(nodes)) if order is shuffled else nodes, order), now=NOW, time_limit_s=10
        )
        allocations.add((plan.metrics["gpus_allocated"], plan.solver.objective))
    assert len(allocations) == 1, allocations


RUNNING_POLICIES: list[dict[str, Any]] = [
    {},
    {"teams": ["a", "b"], "quotas": [{"team": "a", "gpus": 2}]},
    {"isolation": [{"kind": "no-shared-gpu-across-teams"}]},
    {"disruption": {"max_moves_per_round": 2, "max_preemptions_per_round": 1}},
]


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@pytest.mark.slow
@given(seed=st.integers(0, 10_000), policy=st.sampled_from(RUNNING_POLICIES))
def test_fleet_plans_are_valid_with_running_work_gangs_and_policies(
    seed: int, policy: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """make_plan validates every plan: the fleet path must survive running work, gangs, quotas,
    isolation and disruption budgets (any violation raises). Its bound is below the objective of every
    valid plan of the same input, here those of the MILP and the greedy back-ends (a bound above its own
    plan's objective would have been dropped, so it must be there at all)."""
    monkeypatch.setattr(solver, "MONOLITHIC_REPLICAS", 0)
    rng = random.Random(seed)
    nodes, work = _openb_like(rng, rng.randint(5, 25))
    for w in work:
        w["team"] = rng.choice(["a", "b"])
        w["preemptible"] = rng.random() < 0.3
    work.append({"id": "gang", "team": "a", "gpus": 1, "replicas": 2, "gang": "g"})
    first = nodes[0]
    work.append({"id": "run", "team": "b", "gpus": 1, "running_on": f"{first['name']}:0"})
    inp = _inp(nodes, work, policy)
    plan = make_plan(inp, now=NOW, time_limit_s=5)
    assert len(plan.assignments) + len(plan.unplaced) == sum(w.get("replicas", 1) for w in work)
    bound = plan.solver.best_bound
    assert bound is not None and plan.solver.objective is not None
    for other in ("milp-highs", "greedy-fgd", "best-fit"):
        found = make_plan(inp, solver=other, now=NOW, time_limit_s=5)
        assert found.solver.objective is not None
        assert bound <= found.solver.objective, f"bound {bound} above {other}'s valid plan"


def test_the_fleet_path_finds_and_bounds_a_hand_computed_optimum(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two nodes of one L40S and three standard one-GPU replicas waiting 2 h: one must wait, at tier
    weight 3 x 100 hundredths of a GPU x (8 + 2) steps = 3000, so the objective and the bound are 3000."""
    monkeypatch.setattr(solver, "MONOLITHIC_REPLICAS", 0)
    work = [{"id": "w", "gpus": 1, "replicas": 3, "cpu_milli": 1000, "queued_since": "2026-11-29T10:00:00Z"}]
    plan = make_plan(
        _inp(
            [node_data(f"n{i}", "L40S-48GB", 1, cpu_milli=16000, memory_mib=1_000_000) for i in range(2)],
            work,
        ),
        now=NOW,
        time_limit_s=5,
    )
    assert "lns_steps" in plan.solver.terms  # planned by target configurations, then the search
    assert len(plan.assignments) == 2
    assert plan.solver.objective == 3000
    assert plan.solver.best_bound == 3000


def test_purchase_by_configuration_is_exact_per_node() -> None:
    """Three 600-milli replicas on one-GPU nodes: two share no GPU, so three nodes are needed (a
    pooled count of shared GPU capacity would say two). The cheaper two-GPU node holds two of them,
    one per GPU: the best buy is one of each (15 + 10); the bound is the LP's, 3 replicas at 7.5 each
    (half of a two-GPU node)."""
    from gpuplan.planner.pipeline.compile import compile_node
    from gpuplan.solvers.fleet.purchase import Offer, configure_purchase

    work = [{"id": "f", "gpu_milli": 600, "replicas": 3, "cpu_milli": 1000}]
    problem = compile_problem(_inp([], work), default_catalog(), NOW)
    one = compile_node(
        Node.model_validate(node_data("one", "L40S-48GB", 1, cpu_milli=64000, memory_mib=1_000_000)),
        default_catalog(),
    )
    two = compile_node(
        Node.model_validate(node_data("two", "L40S-48GB", 2, cpu_milli=64000, memory_mib=1_000_000)),
        default_catalog(),
    )
    offers = [Offer("one", 10.0, one), Offer("two", 15.0, two)]
    found = configure_purchase(problem, RunOptions(num_workers=1), offers, time.perf_counter() + 20)
    assert found is not None
    assert found.counts == {"one": 1, "two": 1} and found.cost == 25
    assert found.converged and found.lower_bound == pytest.approx(22.5)


@pytest.mark.parametrize("budget", [0, 1])
def test_transition_moves_running_work_towards_the_target_within_the_budget(budget: int) -> None:
    """Two one-GPU nodes each run a half GPU; a whole GPU is wanted. Moving one half next to the other
    frees a GPU: with one move allowed the whole GPU is placed, with none nothing changes."""
    from gpuplan.solvers.fleet.transition import transition
    from gpuplan.solvers.greedy import Fgd
    from gpuplan.solvers.placement import Placer

    running = [
        {"id": f"half{i}", "gpu_milli": 500, "cpu_milli": 1000, "running_on": f"n{i}:0=500"} for i in range(2)
    ]
    wanted = {"id": "whole", "gpus": 1, "cpu_milli": 1000}
    policy = {"disruption": {"max_moves_per_round": budget}}
    problem = compile_problem(
        _inp(
            [node_data(f"n{i}", "L40S-48GB", 1, cpu_milli=16000, memory_mib=1_000_000) for i in range(2)],
            [*running, wanted],
            policy,
        ),
        default_catalog(),
        NOW,
    )
    placers: list[Placer] = []
    start = Fgd().place(problem, RunOptions(), on_kept=placers.append)
    assert "whole" not in {a.workload for a in start.assignments}
    moved, report = transition(
        problem, RunOptions(), placers[0], start, time.perf_counter() + 20, moves=budget
    )
    where = {a.workload: a.node for a in moved.assignments}
    if budget:
        assert report.moved == 1 and "whole" in where and where["half0"] == where["half1"]
    else:
        assert report.moved == 0 and "whole" not in where

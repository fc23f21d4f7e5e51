"""The greedy loop run on the best of several queue orders (``solvers.greedy.orders``)."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings

from gpuplan.models import Policy
from gpuplan.models.policy import Tier
from gpuplan.solvers.evaluate import queue_term
from gpuplan.solvers.greedy import Fgd
from gpuplan.solvers.greedy.orders import shuffled
from gpuplan.solvers.run_options import RunOptions
from tests._factories import node_data
from tests.solvers.greedy.test_greedy import check_result, gpus, instances, problem

TIERS = Policy(tiers=(Tier(name="high", weight=2), Tier(name="low", weight=1)))


def test_a_later_order_places_the_larger_replica() -> None:
    # One node with two GPUs: in the given order the 1-GPU replica takes a GPU and the 2-GPU one
    # waits; the other order places the 2-GPU replica and leaves less demand waiting.
    prob = problem(
        [node_data("n0", gpus=gpus("A100-SXM4-40GB", 2))],
        [{"id": "small", "gpus": 1}, {"id": "large", "gpus": 2}],
    )
    one = Fgd().place(prob, RunOptions())
    assert {a.workload for a in one.assignments} == {"small"}
    best = Fgd().place(prob, RunOptions(), orders=8)
    check_result(prob, best)
    assert {a.workload for a in best.assignments} == {"large"}
    assert [u.workload for u in best.unplaced] == ["small"]


def test_orders_never_put_a_lower_tier_first() -> None:
    # The same pair, the small replica in the better tier: no order may let the large one go first.
    prob = problem(
        [node_data("n0", gpus=gpus("A100-SXM4-40GB", 2))],
        [{"id": "small", "gpus": 1, "tier": "high"}, {"id": "large", "gpus": 2, "tier": "low"}],
        TIERS,
    )
    best = Fgd().place(prob, RunOptions(), orders=8)
    assert {a.workload for a in best.assignments} == {"small"}


def test_shuffle_keeps_the_policy_order_between_groups() -> None:
    prob = problem(
        [node_data("n0", gpus=gpus("A100-SXM4-40GB", 1))],
        [{"id": f"w{i}", "gpu_milli": 100, "tier": "high" if i < 5 else "low"} for i in range(10)],
        TIERS,
    )
    queue = prob.queue_order()
    out = shuffled(queue, random.Random(3))
    assert sorted(r.key for r in out) == sorted(r.key for r in queue)
    assert [r.tier for r in out] == ["high"] * 5 + ["low"] * 5


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_best_of_orders_waits_no_more_than_the_given_order(
    case: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    nodes, workloads = case
    prob = problem(nodes, workloads)
    best = Fgd().place(prob, RunOptions(), orders=4)
    check_result(prob, best)
    assert queue_term(prob, best) <= queue_term(prob, Fgd().place(prob, RunOptions()))
    placed = {(a.workload, a.replica) for a in best.assignments}
    assert placed.isdisjoint((u.workload, u.replica) for u in best.unplaced)
    assert len(placed) + len(best.unplaced) == len(prob.requests)

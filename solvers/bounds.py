"""Lower bounds on the objective that are valid for the full problem, whatever model produced a plan.

A plan from a restricted model (candidate nodes, movable work or a part of the fleet) cannot use that
model's own bound; these relaxations only drop rules, so they hold for every valid plan of the full
problem.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import replace

from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.policy import ObjectiveMode
from gpuplan.models.rules.quota import fleet_wide, limit_units
from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.placement import Placer, never
from gpuplan.solvers.problem import PlacementProblem, admitting, disturbable


def never_fitting(problem: PlacementProblem, placer: Placer | None = None) -> frozenset[tuple[str, int]]:
    """The replicas (by key) that never fit, checked against the whole fleet, empty
    (:func:`~gpuplan.solvers.placement.never.never_fitting`: a replica whose alternatives fit no node,
    or a member of a gang that can never be placed whole)."""
    return frozenset(never.never_fitting(problem, placer))


def _team_caps(problem: PlacementProblem) -> dict[str, int]:
    """Milli-GPU each team's non-borrowing work may take at most, from quotas that name neither a GPU
    model nor a pool (those nest inside the fleet's capacity, so the greedy relaxation stays exact). A
    team whose running work is over its quota may keep that work (the validator keeps the violation),
    so its cap is at least what that work holds now. The relaxation counts MIG shapes as free, so a
    quota's limit in milli-GPU (:func:`~gpuplan.models.rules.quota.limit_units` with a unit of
    :data:`MILLI_PER_GPU`) caps it."""
    running: dict[str, int] = {}
    for r in problem.requests:
        if r.running is not None:
            running[r.team] = running.get(r.team, 0) + r.shapes[r.running.alternative].gpu_milli_total
    caps: dict[str, int] = {}
    for q in problem.policy.quotas:
        limit = limit_units(q.gpus, MILLI_PER_GPU)
        if fleet_wide(q) and not q.borrow and limit is not None:
            cap = max(limit, running.get(q.team, 0))
            caps[q.team] = min(cap, caps.get(q.team, cap))
    return caps


def queue_lower_bound(problem: PlacementProblem, never_fit: Collection[tuple[str, int]]) -> int:
    """Fractional-knapsack bound on the queue term: GPU capacity goes to the highest penalty per
    milli-GPU first.

    Replicas in ``never_fit`` (no node could host them even empty) always wait; running replicas the
    policy lets neither move nor be preempted keep their GPUs; every other replica, running ones that
    may be preempted included, competes for the rest. A team quota without model or pool caps its
    team's share. Only GPU capacity and those quotas limit the relaxation (MIG and CPU-only shapes count
    as free), so the bound is valid but ignores CPU, memory, MIG and topology.
    """
    capacity = sum(MILLI_PER_GPU * len(n.gpus) for n in problem.nodes)
    caps = _team_caps(problem)
    bound = 0
    items: list[tuple[int, int, str]] = []
    held = 0
    for q in problem.requests:
        demand = min(s.gpu_milli_total for s in q.shapes)
        if q.running is not None and not disturbable(problem.policy, q):
            used = q.shapes[q.running.alternative].gpu_milli_total
            held += used
            if q.team in caps:
                caps[q.team] -= used
            continue
        penalty = queue_penalty(q, problem)
        if q.key in never_fit:
            bound += penalty
        elif demand > 0:
            items.append((demand, penalty, q.team))
    # Exact integer arithmetic over a common denominator (every demand divides it): the penalty per
    # milli-GPU of an item is ``penalty * scale // demand`` units of 1/scale. As fast as floats, and
    # unlike fractions no slower (100,000 fractions took seconds to sort).
    scale = math.lcm(*{demand for demand, _, _ in items}) if items else 1
    room = max(0, capacity - held)
    left = 0  # the waiting part of the items, in units of 1/scale
    for demand, penalty, team in sorted(items, key=lambda x: -(x[1] * scale // x[0])):
        take = min(demand, room, max(0, caps.get(team, demand)))
        room -= take
        if team in caps:
            caps[team] -= take
        left += penalty * (demand - take) * (scale // demand)
    # The queue term is an integer: round the relaxation's value up.
    return bound - (-left // scale)


def objective_bound(problem: PlacementProblem, queue_bound: int) -> int:
    """A bound on the policy's objective from a bound on the queue term (the other terms are never
    negative, so the weighted sum is at least its queue part)."""
    if problem.policy.objective is ObjectiveMode.WEIGHTED:
        return problem.policy.weights.queue * queue_bound
    return queue_bound


def placed_value_bound(problem: PlacementProblem, value_bound: float) -> int:
    """The bound on the objective from ``value_bound``, an upper bound on the queue penalty any plan
    places (the configuration LP's): the rest of the waiting replicas' penalty still waits."""
    waiting = sum(queue_penalty(q, problem) for q in problem.requests if q.running is None)
    return objective_bound(problem, max(0, math.ceil(waiting - value_bound - 1e-6)))


def knapsack_bound(problem: PlacementProblem) -> int:
    """The knapsack bound on the policy's objective (:func:`queue_lower_bound` over the replicas that
    fit somewhere), valid for the whole problem."""
    return objective_bound(problem, queue_lower_bound(problem, never_fitting(problem)))


def with_modes_free(problem: PlacementProblem, nodes: Collection[str]) -> PlacementProblem:
    """``problem`` with the non-MIG GPUs of ``nodes`` in no sharing mode: whole GPUs and fractions alike,
    no share count. Every mode those nodes may be given is a restriction of it, so its bounds hold
    whichever modes a plan gives them."""
    free = set(nodes)
    return replace(
        problem,
        nodes=tuple(
            replace(n, gpus=tuple(replace(g, sharing=None) for g in n.gpus)) if n.name in free else n
            for n in problem.nodes
        ),
        requests=admitting(problem.requests, free),  # another mode advertises other resources
    )


def with_mig_free(problem: PlacementProblem, gpus: Collection[tuple[str, int]]) -> PlacementProblem:
    """``problem`` with the GPUs ``gpus`` (node, index) out of MIG mode and in no sharing mode: whole GPUs
    and fractions alike. A MIG shape is never counted as never fitting when re-partitioning is allowed
    (:func:`never_fitting`), which a MIG mode change needs, so its bounds hold whichever MIG modes a plan
    gives those GPUs."""
    free = set(gpus)
    return replace(
        problem,
        nodes=tuple(
            replace(
                n,
                gpus=tuple(
                    replace(g, mig=None, sharing=None) if (n.name, g.index) in free else g for g in n.gpus
                ),
            )
            if any(key[0] == n.name for key in free)
            else n
            for n in problem.nodes
        ),
        requests=admitting(problem.requests, {node for node, _ in free}),
    )

"""A lower bound on the queue term for plans solved without one monolithic model (LNS)."""

from __future__ import annotations

from fractions import Fraction

from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.problem import PlacementProblem


def queue_lower_bound(problem: PlacementProblem, never_fit: set[tuple[str, int]]) -> int:
    """Fractional-knapsack bound: the GPU capacity goes to the highest penalty per milli-GPU first.

    Replicas in ``never_fit`` (no node could host them even empty) always wait. Only GPU capacity
    limits the relaxation, so the bound is valid but ignores CPU, memory, MIG and topology.
    """
    capacity = sum(1000 * len(n.gpus) for n in problem.nodes)
    bound = Fraction(0)
    items: list[tuple[Fraction, int, int]] = []
    for q in problem.requests:
        penalty = queue_penalty(q, problem)
        if q.key in never_fit:
            bound += penalty
            continue
        demand = min(s.gpu_milli_total for s in q.shapes)
        if demand == 0 or q.running is not None:
            continue
        items.append((Fraction(penalty, demand), demand, penalty))
    used = sum(min(s.gpu_milli_total for s in q.shapes) for q in problem.requests if q.running is not None)
    room = max(0, capacity - used)
    for _, demand, penalty in sorted(items, key=lambda x: -x[0]):
        take = min(demand, room)
        room -= take
        bound += Fraction(penalty * (demand - take), demand)
    return int(bound)

"""From the configuration LP to a plan: round the pattern counts down, give the patterns to concrete
nodes, realise them replica by replica on the placement kernel, then fill what is left greedily.

Every replica goes through :class:`~gpuplan.solvers.placement.Placer`, which keeps every rule of a
single placement (exact GPUs, MIG starts, topology, isolation, quotas): a pattern that the pricing
relaxation over-estimated simply realises partly, and its leftovers are placed by the fill.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuplan.models.plan import Assignment, Unplaced
from gpuplan.solvers.fleet.classes import NodeClass, RequestClass
from gpuplan.solvers.fleet.pricing import Item, Pattern
from gpuplan.solvers.placement import Placer
from gpuplan.solvers.problem import PlacementProblem, ShapeSpec

#: Pattern counts within this of an integer are taken as that integer.
INTEGRAL = 1e-6


def realisation_order(shape: ShapeSpec) -> tuple[int, int, int]:
    """Order of realisation inside a node: whole GPUs (most first), MIG, fractions (largest first),
    CPU-only last: big pieces first, as first-fit decreasing does."""
    rank = {"whole": 0, "mig": 1, "fraction": 2, "cpu": 3}[shape.kind]
    return (rank, -shape.gpus, -shape.milli)


def assign_patterns(
    nodes: Sequence[NodeClass], patterns: Sequence[Pattern], x: Sequence[float]
) -> list[tuple[int, Pattern]]:
    """(node position, pattern) for pattern counts ``x`` rounded down, patterns with the most nodes
    first, nodes of each class in name order."""
    taken: dict[int, int] = {nc.index: 0 for nc in nodes}
    out: list[tuple[int, Pattern]] = []
    order = sorted(range(len(patterns)), key=lambda i: (-x[i], patterns[i].node_class, patterns[i].counts))
    for i in order:
        p = patterns[i]
        nc = nodes[p.node_class]
        count = math.floor(x[i] + INTEGRAL)
        for _ in range(min(count, nc.count - taken[nc.index])):
            out.append((nc.members[taken[nc.index]], p))
            taken[nc.index] += 1
    return out


def realise(
    problem: PlacementProblem,
    placer: Placer,
    classes: Sequence[RequestClass],
    plan: Sequence[tuple[int, Pattern]],
) -> tuple[list[Assignment], set[int]]:
    """Place each pattern's replicas on its node (class members in queue order); the assignments and
    the request positions placed."""
    nxt = {c.index: 0 for c in classes}
    placed: list[Assignment] = []
    done: set[int] = set()
    for n, pattern in plan:
        items: list[tuple[Item, int]] = sorted(
            pattern.counts, key=lambda it: realisation_order(classes[it[0][0]].shapes[it[0][1]])
        )
        for (c, k), count in items:
            cls = classes[c]
            for _ in range(count):
                if nxt[c] >= cls.demand:
                    break
                r = cls.members[nxt[c]]
                a = placer.place_on(problem.requests[r], n, k)
                if a is None:
                    break
                nxt[c] += 1
                placed.append(a)
                done.add(r)
    return placed, done


def fill(
    problem: PlacementProblem, placer: Placer, waiting: Sequence[int]
) -> tuple[list[Assignment], list[Unplaced]]:
    """Place the remaining replicas greedily (in the given order); the assignments and the reasons of
    those that still wait."""
    placed: list[Assignment] = []
    unplaced: list[Unplaced] = []
    for r in waiting:
        req = problem.requests[r]
        a = placer.place(req)
        if a is None:
            unplaced.append(placer.unplaced(req))
        else:
            placed.append(a)
    return placed, unplaced

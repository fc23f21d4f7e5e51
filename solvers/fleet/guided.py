"""Patterns from the aggregated LP's solution: first columns near the configuration LP's optimum.

Column generation started from the first plans' patterns tails off on lists of many share sizes
(hundreds of request classes, and each round adds a few patterns per node class). The aggregated LP
(:mod:`.relaxation`) already says how many replicas of each (class, alternative) the nodes of each node
class host together; this module packs those amounts node by node: each step asks the pricing model for
the most valuable pattern within what is left of the amounts (rounded up), and counts it on as many
nodes as the amounts allow. The patterns are ordinary columns (each one a node of its class can host by
the pricing model); the master decides how much of each to use, so they change the plan, never a bound.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from gpuplan.solvers.fleet.classes import NodeClass, RequestClass
from gpuplan.solvers.fleet.pricing import Item, Pattern, PatternModel, pattern_solver
from gpuplan.solvers.fleet.relaxation import Relaxation

#: Wall-clock seconds one packing step may take at most (its best pattern so far is taken).
STEP_S = 0.2
#: Deterministic seconds a deterministic packing step gets.
STEP_DETERMINISTIC_S = 0.05
#: Amounts below this are round-off of the LP's solution.
EPSILON = 1e-6


@dataclass(frozen=True)
class Guided:
    """The patterns packed and whether the deadline stopped the packing before every node class was
    done (a deterministic run's columns then depend on the clock)."""

    patterns: tuple[Pattern, ...]
    cut: bool


def _best_within(
    nc: NodeClass,
    classes: Sequence[RequestClass],
    caps: Mapping[Item, int],
    time_limit_s: float,
    deterministic_s: float | None,
    seed: int,
) -> dict[Item, int]:
    """The most valuable pattern of ``nc`` with at most ``caps`` replicas per (class, alternative)
    found within the limits (empty when none is found)."""
    model = PatternModel(nc, classes, {c: float(classes[c].value) for c in {item[0] for item in caps}})
    for item, var in model.terms:
        model.m.add(var <= caps.get(item, 0))
    solver = pattern_solver(time_limit_s, deterministic_s, seed)
    if solver.solve(model.m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return {}
    return {item: n for item, var in model.terms if (n := solver.value(var)) > 0}


def guided_patterns(
    nodes: Sequence[NodeClass],
    classes: Sequence[RequestClass],
    relaxed: Relaxation,
    deadline: float,
    *,
    deterministic: bool = False,
    seed: int = 0,
) -> Guided:
    """Patterns that realise the aggregated LP's solution ``relaxed`` node by node, node classes with the
    most nodes first, until ``deadline`` (perf_counter)."""
    out: list[Pattern] = []
    order = sorted(range(len(relaxed.hosted)), key=lambda t: (-nodes[t].count, t))
    for t in order:
        nc, left = nodes[t], dict(relaxed.hosted[t])
        free = nc.count
        while free > 0 and left:
            now = time.perf_counter()
            if now >= deadline:
                return Guided(tuple(out), True)
            caps = {item: math.ceil(a - EPSILON) for item, a in left.items()}
            counts = _best_within(
                nc, classes, caps, min(STEP_S, deadline - now) if not deterministic else deadline - now,
                STEP_DETERMINISTIC_S if deterministic else None, seed,
            )  # fmt: skip
            if not counts:
                break
            times = min(free, max(1, min(int((left[item] + EPSILON) // n) for item, n in counts.items())))
            out.append(Pattern(nc.index, tuple(sorted(counts.items()))))
            free -= times
            for item, n in counts.items():
                left[item] -= times * n
                if left[item] <= EPSILON:
                    del left[item]
    return Guided(tuple(out), False)

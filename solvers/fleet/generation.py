"""Column generation for the configuration LP, with a valid Lagrangian bound at every full pricing round.

Each round solves the restricted master, prices every node class at (smoothed) class prices and adds
the improving patterns. For any class prices pi >= 0,

    UB(pi) = sum_c pi_c * waiting_c + sum_t nodes_t * max(0, max_p sum_c (value_c - pi_c) * a_cp)

is an upper bound on the value any plan places (Lagrangian relaxation of the class rows, each node
choosing its best pattern alone); with the pricing problems' proven upper bounds in place of their
optima it stays valid when a pricing solve is cut short. Prices are smoothed towards the best bound's
(Wentges): this damps the oscillation that makes plain column generation tail off; a round whose
smoothed prices yield no column at the LP's own prices is repeated unsmoothed, so the loop ends only
when the LP is optimal over all patterns or the time is up.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.solvers.fleet.classes import NodeClass, RequestClass
from gpuplan.solvers.fleet.master import Master, MasterSolution
from gpuplan.solvers.fleet.pricing import Pattern
from gpuplan.solvers.fleet.relaxation import Relaxation
from gpuplan.solvers.fleet.workers import Pricers

log = logging.getLogger(__name__)

#: Weight of the best-bound prices in the smoothed prices.
SMOOTHING = 0.5
#: Stop when the LP is within this share of the bound.
LP_GAP = 1e-4
#: Time one pricing solve may take at most.
PRICING_S = 1.0
#: Deterministic seconds a deterministic pricing solve gets (CP-SAT's deterministic time runs slower
#: than the wall clock: see the CP-SAT back-end).
PRICING_DETERMINISTIC_S = 0.25


@dataclass(frozen=True)
class Configuration:
    """The column generation's outcome: the master and its last solution, the best valid upper bound
    on placed value, and whether the LP was proved optimal over all patterns."""

    master: Master
    solution: MasterSolution
    upper_bound: float
    converged: bool
    rounds: int
    columns: int
    #: Whether the wall clock stopped a deterministic generation (its result may vary between runs).
    cut: bool = False


def _reduced(classes: Sequence[RequestClass], duals: Sequence[float]) -> dict[int, float]:
    return {c.index: c.value - duals[c.index] for c in classes}


def generate(
    nodes: Sequence[NodeClass],
    classes: Sequence[RequestClass],
    initial: Sequence[Pattern],
    deadline: float,
    *,
    seed: int = 0,
    deterministic: bool = False,
    max_rounds: int | None = None,
    workers: int = 1,
    ray: str | None = None,
    start: Relaxation | None = None,
) -> Configuration:
    """Column generation until the LP is optimal over all patterns, ``max_rounds`` rounds are done or
    ``deadline`` (perf_counter).

    A ``deterministic`` generation stops its pricing solves on deterministic time and its rounds at
    ``max_rounds``, so that it depends on the clock only when the deadline cuts it (``cut``). Each
    round's pricing problems run in up to ``workers`` processes, or as Ray tasks on the cluster at
    ``ray``. With ``start`` (the aggregated LP, :mod:`.relaxation`) its bound is the first valid bound
    and its class prices the first centre of the smoothing: column generation starts from near-optimal
    prices instead of the first master's, and stops as soon as the master reaches that bound.
    """
    with Pricers(nodes, classes, workers, ray) as pricers:
        return _generate(
            nodes, classes, initial, deadline, pricers,
            seed=seed, deterministic=deterministic, max_rounds=max_rounds, start=start,
        )  # fmt: skip


def _generate(
    nodes: Sequence[NodeClass],
    classes: Sequence[RequestClass],
    initial: Sequence[Pattern],
    deadline: float,
    pricers: Pricers,
    *,
    seed: int,
    deterministic: bool,
    max_rounds: int | None,
    start: Relaxation | None,
) -> Configuration:
    master = Master(nodes, classes)
    for p in initial:
        master.add(p)
    best = math.inf if start is None else start.bound
    center: list[float] | None = None if start is None else list(start.prices)
    alpha = SMOOTHING
    solution = master.solve()
    rounds = 0
    converged = False
    cut = False
    while not converged and (max_rounds is None or rounds < max_rounds):
        if time.perf_counter() >= deadline:
            cut = deterministic
            break
        rounds += 1
        current = list(solution.class_duals)
        prices = (
            current
            if center is None
            else [alpha * a + (1 - alpha) * b for a, b in zip(center, current, strict=True)]
        )
        reduced = _reduced(classes, prices)
        bound = sum(prices[c.index] * c.demand for c in classes)
        complete = True
        added = 0
        results = pricers.price_all(
            reduced,
            deadline=deadline,
            # A deterministic solve stops on deterministic time; the deadline is its only wall limit.
            pricing_s=math.inf if deterministic else PRICING_S,
            deterministic_s=PRICING_DETERMINISTIC_S if deterministic else None,
            seed=seed,
        )
        for nc, priced in zip(nodes, results, strict=True):
            if priced is None:
                complete = False
                cut = deterministic
                continue
            cut |= priced.cut_by_wall
            bound += nc.count * max(0.0, priced.upper)
            mu = solution.node_duals[nc.index]
            for pattern in priced.patterns:
                gain = sum((classes[c].value - current[c]) * n for (c, _), n in pattern.counts) - mu
                if gain > 1e-6 and master.add(pattern):
                    added += 1
        if complete and bound < best:
            best, center = bound, prices
        solution = master.solve()
        log.debug(
            "round %d: LP %.1f, bound %.1f, %d columns (+%d), alpha %.2f",
            rounds, solution.value, best, len(master.patterns), added, alpha,
        )  # fmt: skip
        if best - solution.value <= LP_GAP * max(1.0, best):
            converged = True
            break
        if added == 0:
            if alpha == 0.0 and complete:
                converged = True  # no improving column at the LP's own prices: the LP is optimal
                break
            alpha = 0.0  # mis-priced at the smoothed prices: price at the LP's own prices
        else:
            alpha = SMOOTHING
    return Configuration(master, solution, best, converged, rounds, len(master.patterns), cut)

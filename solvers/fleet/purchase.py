"""What to buy, by the configuration LP: node types enter the master as columns with their price.

    minimise   sum_p price(type of p) x_p
    subject to sum_p replicas of class c in p x_p >= replicas of c to serve   (dual pi_c >= 0)
               x_p >= 0: nodes bought to host pattern p

This is cutting stock with several stock sizes: each column is one node of a type hosting one pattern,
priced per node (GPUs packed GPU by GPU, CPU and memory), not pooled per type. Column generation
prices each type at the demand rows' duals; for any duals, scaling them down until no pattern of any
type is worth more than its price gives a feasible dual, so (sum_c pi_c d_c) / max(1, max_t best_t /
price_t) is a lower bound on the cost of every purchase (Farley's bound), valid at every round. Whole
numbers of nodes per pattern come from HiGHS' MIP over the columns generated.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import highspy
import numpy as np

from gpuplan.solvers.fleet.classes import NodeClass, RequestClass, node_classes, request_classes
from gpuplan.solvers.fleet.generation import PRICING_S
from gpuplan.solvers.fleet.pricing import Pattern
from gpuplan.solvers.fleet.workers import Pricers
from gpuplan.solvers.placement import FirstFitScorer, Placer
from gpuplan.solvers.problem import NodeSpec, PlacementProblem
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)

#: Share of the time the MIP over the generated columns may take.
INTEGER_SHARE = 0.4


@dataclass(frozen=True)
class Offer:
    """A node one can buy: its name (a node type, or a variant of one) and its price."""

    name: str
    price: float
    node: NodeSpec


@dataclass(frozen=True)
class ConfiguredPurchase:
    """Nodes to buy per offer with the pattern each hosts, the cost, and the lower bound on the cost of
    any purchase that serves the demand (``None`` when no full pricing round finished)."""

    counts: dict[str, int]
    patterns: tuple[tuple[str, Pattern, int], ...]
    cost: float
    lower_bound: float | None
    converged: bool


class _CostMaster:
    """The purchase LP over the patterns found so far (artificial slack columns keep it feasible)."""

    def __init__(self, classes: Sequence[RequestClass], penalty: float) -> None:
        self.h = highspy.Highs()  # type: ignore[no-untyped-call]
        self.h.setOptionValue("output_flag", False)
        inf = highspy.kHighsInf
        empty_i, empty_v = np.array([], dtype=np.int32), np.array([], dtype=np.float64)
        for c in classes:
            self.h.addRow(float(c.demand), inf, 0, empty_i, empty_v)
        # Column c is the slack of class c at a prohibitive price: the LP is feasible from the start.
        for c in classes:
            self.h.addCol(penalty, 0.0, inf, 1, np.array([c.index], dtype=np.int32), np.array([1.0]))
        self.slacks = len(classes)
        self.columns: list[tuple[str, Pattern]] = []

    def add(self, offer: Offer, pattern: Pattern) -> None:
        per = pattern.per_class()
        rows = sorted(per)
        self.h.addCol(
            offer.price,
            0.0,
            highspy.kHighsInf,
            len(rows),
            np.array(rows, dtype=np.int32),
            np.array([float(per[c]) for c in rows]),
        )
        self.columns.append((offer.name, pattern))

    def solve(self) -> tuple[float, list[float], list[float]]:
        """LP value, column values (patterns only) and the demand rows' duals."""
        self.h.run()
        sol = self.h.getSolution()
        x = list(sol.col_value)[self.slacks :]
        return float(self.h.getInfo().objective_function_value), x, [max(0.0, d) for d in sol.row_dual]

    def integer(self, time_limit_s: float) -> list[float] | None:
        """Whole numbers of nodes per pattern (slacks kept continuous), or ``None``."""
        n = self.h.getNumCol()
        idx = np.arange(self.slacks, n, dtype=np.int32)
        if len(idx) == 0:
            return None
        self.h.changeColsIntegrality(len(idx), idx, np.full(len(idx), highspy.HighsVarType.kInteger))
        self.h.setOptionValue("time_limit", max(0.01, time_limit_s))
        try:
            self.h.run()
            found = self.h.getInfo().primal_solution_status == 2
            x = [float(round(v)) for v in self.h.getSolution().col_value][self.slacks :] if found else None
        finally:
            self.h.changeColsIntegrality(len(idx), idx, np.full(len(idx), highspy.HighsVarType.kContinuous))
            self.h.setOptionValue("time_limit", highspy.kHighsInf)
        return x


def configure_purchase(
    problem: PlacementProblem, options: RunOptions, offers: Sequence[Offer], deadline: float
) -> ConfiguredPurchase | None:
    """The cheapest nodes (per ``offers``) hosting every request of ``problem`` (whose nodes are
    ignored), within ``deadline`` (perf_counter), the pricing problems on ``options``' workers (its
    time limit is the deadline's); ``None`` when no pattern serves anything."""
    if not offers or not problem.requests:
        return None
    nodes_problem = replace(problem, nodes=tuple(o.node for o in offers))
    classes = request_classes(nodes_problem, range(len(problem.requests)))
    placer = Placer(nodes_problem.nodes, problem.catalog, FirstFitScorer(), policy=problem.policy)
    by_name = {o.node.name: o for o in offers}
    nodes: list[NodeClass] = []
    for nc in node_classes(placer):
        nodes.extend(replace(nc, index=len(nodes), members=(m,)) for m in nc.members)
    offer_of = [by_name[placer.infos[nc.members[0]].name] for nc in nodes]
    master = _CostMaster(classes, penalty=10 * max(o.price for o in offers) * max(1, len(problem.requests)))
    best_lb: float | None = None
    converged = False
    with Pricers(nodes, classes, options.num_workers, options.ray) as pricers:
        _, _, duals = master.solve()  # only the slacks: every class is worth its slack's price
        while time.perf_counter() < deadline:
            results = pricers.price_all(
                {c.index: duals[c.index] for c in classes},
                deadline=deadline,
                pricing_s=PRICING_S,
                deterministic_s=None,
                seed=options.seed,
            )
            added = 0
            ratio = 0.0
            complete = True
            for nc, priced in zip(nodes, results, strict=True):
                offer = offer_of[nc.index]
                if priced is None:
                    complete = False
                    continue
                ratio = max(ratio, priced.upper / offer.price)
                for pattern in priced.patterns:
                    if pattern.value_at(duals) > offer.price * (1 + 1e-9):
                        master.add(offer, pattern)
                        added += 1
            if complete and ratio > 0:
                lb = sum(duals[c.index] * c.demand for c in classes) / max(1.0, ratio)
                best_lb = lb if best_lb is None else max(best_lb, lb)
            _, _, duals = master.solve()
            if added == 0 and complete:
                converged = True
                break
    if not master.columns:
        return None
    value, x_lp, _ = master.solve()
    whole = master.integer(INTEGER_SHARE * max(0.0, deadline - time.perf_counter()) + 0.5)
    x = whole if whole is not None else [math.ceil(v - 1e-9) for v in x_lp]
    counts: dict[str, int] = {}
    chosen: list[tuple[str, Pattern, int]] = []
    for (name, pattern), n in zip(master.columns, x, strict=True):
        if n >= 1:
            counts[name] = counts.get(name, 0) + int(n)
            chosen.append((name, pattern, int(n)))
    cost = sum(by_name_price(offers, name) * n for name, n in counts.items())
    log.info("configured purchase: %s for %.0f (LP %.0f, lower bound %s)", counts, cost, value, best_lb)
    return ConfiguredPurchase(counts, tuple(chosen), cost, best_lb, converged)


def by_name_price(offers: Sequence[Offer], name: str) -> float:
    """The price of the offer called ``name``."""
    return next(o.price for o in offers if o.name == name)

"""The aggregated configuration LP: one LP whose optimum bounds the value any plan places, without
column generation.

Every pattern a node of class t can host lies in the polytope P_t of its pricing model's LP relaxation
(:class:`.pricing.PatternModel`), so the n_t nodes of the class together host a point of n_t * P_t (P_t
is convex). Maximising the value placed over those scaled polytopes, with each request class's waiting
replicas shared by all node classes, relaxes the configuration LP: its optimum is at least the
configuration LP's and so a bound on every plan, whether or not column generation has converged. The
LP has the size of one pricing model per node class, whatever the number of nodes, which is what makes
it cheap for share-heavy lists (where column generation tails off) and for replicated fleets. Its value
is read from a Lagrangian dual bound on the LP's own duals, so that the solver's tolerances cannot make
it too low.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import highspy
import numpy as np
from ortools.sat.python import cp_model_helper

from gpuplan.solvers.fleet.classes import NodeClass, RequestClass
from gpuplan.solvers.fleet.pricing import Item, PatternModel

log = logging.getLogger(__name__)

#: CP-SAT's stand-in for an infinite side of a constraint.
_INFINITE = 2**62


@dataclass(frozen=True)
class Relaxation:
    """The aggregated LP's bound on the value placed, its class prices (duals of the class rows) and its
    solution: per node class (in node-class order), the replicas of each (class, alternative) the
    class's nodes host together (:mod:`.guided` turns them into patterns)."""

    bound: float
    prices: tuple[float, ...]
    hosted: tuple[dict[Item, float], ...] = ()


@dataclass
class _Lp:
    """The aggregated LP in HiGHS' row-wise form."""

    lower: list[float]
    upper: list[float]
    cost: list[float]
    rows: list[tuple[float, float, list[int], list[float]]]


def _scaled(side: int, count: int) -> float:
    """One side of a constraint (or bound) scaled by the node count; CP-SAT's infinities stay infinite."""
    if side <= -_INFINITE:
        return -math.inf
    if side >= _INFINITE:
        return math.inf
    return float(count * side)


def _holds(proto: cp_model_helper.CpModelProto, ct: cp_model_helper.ConstraintProto) -> bool:
    """Whether a constraint that is not linear is a constant that holds: CP-SAT stores ``add(True)``
    (a sum over no terms within its bounds) as a clause over a variable fixed to 1."""
    if not ct.has_bool_or() or len(ct.enforcement_literal):
        return False
    return any(lit >= 0 and proto.variables[lit].domain[0] >= 1 for lit in ct.bool_or.literals)


def _add_class(
    lp: _Lp, nc: NodeClass, classes: Sequence[RequestClass], per_class: dict[int, list[int]]
) -> dict[Item, int] | None:
    """Node class ``nc``'s pricing polytope scaled by its count, at every class's value, and the LP
    column of each (class, alternative) count (``None`` if the model holds a constraint that is not
    linear, which the relaxation cannot read)."""
    model = PatternModel(nc, classes, {c.index: float(c.value) for c in classes})
    proto = model.m.proto
    base = len(lp.lower)
    for var in proto.variables:
        domain = list(var.domain)
        lp.lower.append(_scaled(domain[0], nc.count))
        lp.upper.append(_scaled(domain[-1], nc.count))
        lp.cost.append(0.0)
    for ct in proto.constraints:
        if not ct.has_linear():
            if _holds(proto, ct):
                continue
            return None
        if len(ct.enforcement_literal) or any(v < 0 for v in ct.linear.vars):
            return None
        domain = list(ct.linear.domain)
        lp.rows.append(
            (
                _scaled(domain[0], nc.count),
                _scaled(domain[-1], nc.count),
                [base + v for v in ct.linear.vars],
                [float(a) for a in ct.linear.coeffs],
            )
        )
    columns = {}
    for item, var in model.terms:
        lp.cost[base + var.index] = float(classes[item[0]].value)
        per_class.setdefault(item[0], []).append(base + var.index)
        columns[item] = base + var.index
    return columns


def _dual_bound(h: highspy.Highs, lp: _Lp) -> tuple[float, float]:
    """A Lagrangian bound on the LP's optimum at the row duals HiGHS returns, and the sign that makes
    them the maximisation's multipliers: valid for any multipliers, so round-off in the duals only
    loosens it."""
    lower, upper = np.array(lp.lower), np.array(lp.upper)
    cost = np.array(lp.cost)
    row_lo = np.array([r[0] for r in lp.rows])
    row_hi = np.array([r[1] for r in lp.rows])
    duals = np.array(h.getSolution().row_dual)
    best, best_sign = math.inf, 1.0
    for sign in (1.0, -1.0):
        y = sign * duals
        # A multiplier may only price a finite side of its row.
        y = np.where((y > 0) & np.isinf(row_hi), 0.0, y)
        y = np.where((y < 0) & np.isinf(row_lo), 0.0, y)
        reduced = cost.copy()
        for r, (_, _, idx, val) in enumerate(lp.rows):
            if y[r]:
                np.subtract.at(reduced, np.array(idx, dtype=np.int64), y[r] * np.array(val))
        rows = float(np.sum(np.where(y > 0, y * np.where(np.isinf(row_hi), 0.0, row_hi), 0.0)))
        rows += float(np.sum(np.where(y < 0, y * np.where(np.isinf(row_lo), 0.0, row_lo), 0.0)))
        cols = np.where(reduced > 0, reduced * upper, reduced * lower)
        if np.isinf(cols[cols != 0]).any():
            continue
        value = rows + float(np.sum(cols))
        if value < best:
            best, best_sign = value, sign
    return best, best_sign


def aggregated_bound(
    nodes: Sequence[NodeClass], classes: Sequence[RequestClass], deadline: float
) -> Relaxation | None:
    """The aggregated LP's bound on the value placed and its class prices, or ``None`` when ``deadline``
    (perf_counter) comes first or a pricing model is not linear."""
    if not classes:
        return Relaxation(0.0, ())
    lp = _Lp([], [], [], [])
    per_class: dict[int, list[int]] = {}
    columns = []
    for nc in nodes:
        found = None if time.perf_counter() >= deadline else _add_class(lp, nc, classes, per_class)
        if found is None:
            return None
        columns.append(found)
    first_class_row = len(lp.rows)
    for cls in classes:
        cols = per_class.get(cls.index, [])
        lp.rows.append((-math.inf, float(cls.demand), cols, [1.0] * len(cols)))
    h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", max(0.01, deadline - time.perf_counter()))
    inf = highspy.kHighsInf
    n = len(lp.lower)
    h.addVars(n, np.array(lp.lower), np.array(lp.upper))
    h.changeColsCost(n, np.arange(n, dtype=np.int32), np.array(lp.cost))
    for lo, hi, idx, val in lp.rows:
        h.addRow(
            -inf if math.isinf(lo) else lo, inf if math.isinf(hi) else hi,
            len(idx), np.array(idx, dtype=np.int32), np.array(val, dtype=np.float64),
        )  # fmt: skip
    h.changeObjectiveSense(highspy.ObjSense.kMaximize)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    bound, sign = _dual_bound(h, lp)
    if not math.isfinite(bound):
        return None
    solution = h.getSolution()
    duals = solution.row_dual[first_class_row:]
    x = solution.col_value
    hosted = tuple({item: float(x[col]) for item, col in cols.items() if x[col] > 1e-6} for cols in columns)
    log.info(
        "fleet: aggregated LP %.1f (bound %.1f) over %d columns, %d rows",
        h.getInfo().objective_function_value, bound, n, len(lp.rows),
    )  # fmt: skip
    return Relaxation(bound, tuple(max(0.0, sign * float(d)) for d in duals), hosted)

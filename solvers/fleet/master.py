"""The configuration LP (restricted master) on HiGHS: how many nodes of each class use each pattern.

    maximise   sum_p value(p) x_p
    subject to sum_{p of node class t} x_p      <= nodes in t          (dual mu_t)
               sum_p replicas of class c in p x_p <= waiting replicas of c (dual pi_c)
               x_p >= 0

Columns are added as pricing finds them; HiGHS re-optimises from the previous basis.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import highspy
import numpy as np

from gpuplan.solvers.fleet.classes import NodeClass, RequestClass
from gpuplan.solvers.fleet.pricing import Pattern


def _stopped_scheduler() -> None:
    """Stop HiGHS' task scheduler, and wait for its threads, before a fork: a child forked while one of
    them held the scheduler's lock waited for it for ever (seen in a pricing pool forked by
    ``capacity-gap``); the parent's next solve starts the scheduler again."""
    highspy.Highs.resetGlobalScheduler(True)


def _fresh_scheduler() -> None:
    """Drop HiGHS' task scheduler in a forked child: the child inherits the parent's scheduler but not its
    threads, so a MIP's parallel root tasks would wait for them for ever (fleet parts are forked from
    a process that may have run HiGHS); the next solve starts a scheduler of the child's own."""
    highspy.Highs.resetGlobalScheduler(False)


os.register_at_fork(before=_stopped_scheduler, after_in_child=_fresh_scheduler)


@dataclass(frozen=True)
class MasterSolution:
    """The LP's value, primal values of the columns and the duals of the rows."""

    value: float
    x: tuple[float, ...]
    node_duals: tuple[float, ...]
    class_duals: tuple[float, ...]


class Master:
    """The restricted master LP over the patterns found so far."""

    def __init__(self, nodes: Sequence[NodeClass], classes: Sequence[RequestClass]) -> None:
        self.classes = classes
        self.h = highspy.Highs()  # type: ignore[no-untyped-call]
        self.h.setOptionValue("output_flag", False)
        inf = highspy.kHighsInf
        empty_i = np.array([], dtype=np.int32)
        empty_v = np.array([], dtype=np.float64)
        for nc in nodes:
            self.h.addRow(-inf, float(nc.count), 0, empty_i, empty_v)
        for cls in classes:
            self.h.addRow(-inf, float(cls.demand), 0, empty_i, empty_v)
        self.h.changeObjectiveSense(highspy.ObjSense.kMaximize)
        self.node_rows = len(nodes)
        self.patterns: list[Pattern] = []
        self.keys: set[tuple[int, tuple[tuple[tuple[int, int], int], ...]]] = set()

    def add(self, pattern: Pattern) -> bool:
        """Add a column (False if it is already there)."""
        key = (pattern.node_class, pattern.counts)
        if key in self.keys:
            return False
        self.keys.add(key)
        per_class = pattern.per_class()
        rows = [pattern.node_class] + [self.node_rows + c for c in sorted(per_class)]
        coef = [1.0] + [float(per_class[c]) for c in sorted(per_class)]
        self.h.addCol(
            float(pattern.value(self.classes)),
            0.0,
            highspy.kHighsInf,
            len(rows),
            np.array(rows, dtype=np.int32),
            np.array(coef, dtype=np.float64),
        )
        self.patterns.append(pattern)
        return True

    def solve_integer(
        self, time_limit_s: float, max_nodes: int | None = None
    ) -> tuple[tuple[float, ...] | None, bool]:
        """Whole numbers of nodes per pattern over the current columns (HiGHS' MIP within
        ``time_limit_s`` and, if given, ``max_nodes`` branch-and-bound nodes), or ``None`` when it finds
        none, and whether the time limit stopped it (a search bounded by nodes alone gives the same
        answer on any machine); the LP is restored afterwards."""
        n = self.h.getNumCol()
        if n == 0:
            return None, False
        idx = np.arange(n, dtype=np.int32)
        self.h.changeColsIntegrality(n, idx, np.full(n, highspy.HighsVarType.kInteger))
        self.h.setOptionValue("time_limit", max(0.01, time_limit_s))
        self.h.setOptionValue("mip_rel_gap", 1e-4)
        if max_nodes is not None:
            self.h.setOptionValue("mip_max_nodes", max_nodes)
        try:
            self.h.run()
            timed_out = self.h.getModelStatus() == highspy.HighsModelStatus.kTimeLimit
            info = self.h.getInfo()
            found = info.primal_solution_status == 2  # a feasible integer solution exists
            x = tuple(float(round(v)) for v in self.h.getSolution().col_value) if found else None
        finally:
            self.h.changeColsIntegrality(n, idx, np.full(n, highspy.HighsVarType.kContinuous))
            self.h.setOptionValue("time_limit", highspy.kHighsInf)
            self.h.setOptionValue("mip_max_nodes", highspy.kHighsIInf)
        return x, timed_out

    def solve(self) -> MasterSolution:
        """Optimise the LP over the current columns."""
        self.h.run()
        sol = self.h.getSolution()
        duals = list(sol.row_dual)
        # A maximisation's row duals are non-negative for <= rows; clamp round-off.
        return MasterSolution(
            value=float(self.h.getInfo().objective_function_value),
            x=tuple(float(v) for v in sol.col_value),
            node_duals=tuple(max(0.0, d) for d in duals[: self.node_rows]),
            class_duals=tuple(max(0.0, d) for d in duals[self.node_rows :]),
        )

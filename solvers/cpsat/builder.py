"""The CP-SAT implementation of the formulation's :class:`LinearBuilder`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ortools.sat.python import cp_model

from gpuplan.solvers.formulation.builder import Expr, Var


class CpSatBuilder:
    """Posts the formulation on a ``cp_model.CpModel``."""

    def __init__(self) -> None:
        self.model = cp_model.CpModel()

    def bool_var(self, name: str) -> Var:
        """A new Boolean variable."""
        return self.model.new_bool_var(name)

    def int_var(self, lo: int, hi: int, name: str) -> Var:
        """A new bounded integer variable."""
        return self.model.new_int_var(lo, hi, name)

    def add(self, constraint: Any) -> None:
        """Post a linear constraint (a constant ``True`` is skipped, ``False`` makes it infeasible)."""
        if isinstance(constraint, bool):
            if not constraint:
                self.model.add_bool_or([])
            return
        self.model.add(constraint)

    def sum(self, terms: Iterable[Expr]) -> Expr:
        """``LinearExpr.sum`` of the terms."""
        return cp_model.LinearExpr.sum(list(terms))

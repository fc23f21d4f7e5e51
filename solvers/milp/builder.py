"""The PuLP implementation of the formulation's :class:`LinearBuilder`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pulp

from gpuplan.solvers.formulation.builder import Expr, Var

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


class PulpBuilder:
    """Posts the formulation on a ``pulp.LpProblem`` (names made unique and LP-file safe)."""

    def __init__(self, name: str = "gpuplan") -> None:
        self.problem = pulp.LpProblem(name, pulp.LpMinimize)
        self.variables: list[pulp.LpVariable] = []
        self._constraints = 0

    def _name(self, name: str) -> str:
        return f"v{len(self.variables)}_{_UNSAFE.sub('_', name)[:60]}"

    def bool_var(self, name: str) -> Var:
        """A new binary variable."""
        var = self.problem.add_variable(self._name(name), 0, 1, cat=pulp.LpBinary)
        self.variables.append(var)
        return var

    def int_var(self, lo: int, hi: int, name: str) -> Var:
        """A new bounded integer variable."""
        var = self.problem.add_variable(self._name(name), lo, hi, cat=pulp.LpInteger)
        self.variables.append(var)
        return var

    def add(self, constraint: Any) -> None:
        """Post a linear constraint (a constant ``True`` is skipped, ``False`` makes it infeasible)."""
        if isinstance(constraint, bool):
            if constraint:
                return
            constraint = pulp.lpSum([]) >= 1
        self._constraints += 1
        self.problem += constraint, f"c{self._constraints}"

    def sum(self, terms: Iterable[Expr]) -> Expr:
        """``pulp.lpSum`` of the terms."""
        return pulp.lpSum(list(terms))

    @property
    def constraint_count(self) -> int:
        """Constraints posted so far."""
        return self._constraints

"""The small interface through which the placement formulation is written once for every back-end.

CP-SAT and PuLP (CBC/HiGHS) both build linear expressions and constraints with Python operators, so
the formulation only needs variable creation, constraint posting and summation from a back-end.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

#: A back-end variable (``cp_model.IntVar`` or ``pulp.LpVariable``).
Var = Any
#: A back-end linear expression (or an int constant).
Expr = Any


class LinearBuilder(Protocol):
    """Creates variables and posts linear constraints on one back-end model."""

    def bool_var(self, name: str) -> Var:
        """A new 0/1 variable."""
        ...

    def int_var(self, lo: int, hi: int, name: str) -> Var:
        """A new integer variable in ``[lo, hi]``."""
        ...

    def add(self, constraint: Any) -> None:
        """Post a linear constraint built with ``<=``, ``>=`` or ``==``."""
        ...

    def sum(self, terms: Iterable[Expr]) -> Expr:
        """The sum of ``terms`` (0 when empty), built efficiently for the back-end."""
        ...

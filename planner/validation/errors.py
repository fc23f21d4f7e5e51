"""Exceptions the planner's modules share, kept apart so that raising one imports no planning code.

``InvalidPlanError`` is raised by :func:`gpuplan.planner.planning.checked` and by the counterfactual
re-solves of the explanations; the explanations are themselves called from ``make_plan``, so the error
cannot live in either module without an import cycle.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuplan.planner.validation.report import Violation


class InvalidPlanError(RuntimeError):
    """A solver produced a plan that the independent validator rejects (a bug, never user error)."""

    def __init__(self, solver: str, violations: Sequence[Violation]) -> None:
        self.violations = list(violations)
        head = "; ".join(f"{v.rule}: {v.message}" for v in violations[:5])
        super().__init__(f"solver '{solver}' produced an invalid plan ({len(violations)} violations): {head}")

"""What every solver back-end shares: the result type, the protocol and the registry."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from gpuplan.models.plan import Assignment, MigLayout, PlanStatus, Unplaced
from gpuplan.solvers.problem import PlacementProblem
from gpuplan.solvers.run_options import RunOptions

#: Term set when the wall clock stopped a deterministic solve (its plan may then differ between runs).
CUT = "deterministic_cut_by_wall"
#: Terms of an exact solve that starts from a greedy hint: the queue term of the greedy start and of the
#: hint after the searches before the exact model (re-pack, make room, neighbourhood search), which say
#: how far the search got before it.
HINT_QUEUE_FGD = "hint_queue_fgd"
HINT_QUEUE = "hint_queue"
#: Term of a plan whose exact solve found nothing in time but whose searches before it beat the greedy
#: start (the plan is theirs, ``FEASIBLE``); a plan no search improved is ``FALLBACK`` (term ``fallback``).
NO_EXACT_SOLUTION = "exact_found_nothing"


@dataclass(frozen=True)
class SolveResult:
    """One result shape for every back-end: status, objective, bound, gap, time and assignment.

    ``best_bound`` is a lower bound on the policy's objective that holds for the *full* problem (not
    only for a restricted model the back-end solved), ``bound_source`` says where it comes from;
    ``objective``, ``gap`` and the objective ``terms`` are those of the plan returned, computed by
    :func:`gpuplan.solvers.evaluate.reported`.
    """

    status: PlanStatus
    solver: str
    assignments: tuple[Assignment, ...]
    unplaced: tuple[Unplaced, ...] = ()
    mig_layouts: tuple[MigLayout, ...] = ()
    objective: float | None = None
    best_bound: float | None = None
    bound_source: str | None = None
    gap: float | None = None
    wall_s: float = 0.0
    terms: dict[str, float] = field(default_factory=dict)
    model_size: dict[str, int] = field(default_factory=dict)


def instead_of(solved: SolveResult, plan: SolveResult, terms: dict[str, float]) -> SolveResult:
    """``plan`` returned in place of the plan ``solved``: feasible, under ``solved``'s solver name, bound
    (a bound holds for every plan), model size and wall time, with ``terms``."""
    return replace(
        plan,
        status=PlanStatus.FEASIBLE,
        solver=solved.solver,
        best_bound=solved.best_bound,
        bound_source=solved.bound_source,
        model_size=solved.model_size,
        wall_s=solved.wall_s,
        terms=terms,
    )


class Solver(Protocol):
    """A placement back-end."""

    name: str

    def solve(self, problem: PlacementProblem, options: RunOptions) -> SolveResult:
        """Place what can be placed, run as ``options`` say; never raise on an infeasible instance."""
        ...


#: Solver name -> (module, class name), imported on first use.
_REGISTRY: dict[str, tuple[str, str]] = {
    "first-fit": ("gpuplan.solvers.greedy", "FirstFit"),
    "best-fit": ("gpuplan.solvers.greedy", "BestFit"),
    "greedy-fgd": ("gpuplan.solvers.greedy", "Fgd"),
    "cpsat": ("gpuplan.solvers.cpsat", "CpSat"),
    # The module, not the package: the fleet's pricing workers import the package without the back-end.
    "fleet": ("gpuplan.solvers.fleet.solver", "Fleet"),
    "milp": ("gpuplan.solvers.milp", "MilpHighs"),
    "milp-highs": ("gpuplan.solvers.milp", "MilpHighs"),
    "milp-cbc": ("gpuplan.solvers.milp", "MilpCbc"),
}


#: The back-ends whose plans come with a proof (a bound of the whole problem; OPTIMAL when it meets the
#: plan): the exact models. The others search or place greedily, and say so.
EXACT_SOLVERS = frozenset({"cpsat", "milp", "milp-highs", "milp-cbc"})


def register(name: str, module: str, cls: str) -> None:
    """Make a back-end available under ``name`` (imported lazily on first use)."""
    _REGISTRY[name] = (module, cls)


def solver_names() -> list[str]:
    """Names accepted by :func:`get_solver`."""
    return sorted(_REGISTRY)


def get_solver(name: str) -> Solver:
    """Instantiate the back-end called ``name``."""
    try:
        module, cls = _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown solver '{name}' (choose from {', '.join(solver_names())})") from None
    try:
        factory: Callable[[], Solver] = getattr(importlib.import_module(module), cls)
    except ImportError as exc:
        raise RuntimeError(
            f"solver '{name}' needs a package that is not installed ({exc.name}); "
            "reinstall gpuplan with its dependencies (pip install .)"
        ) from exc
    return factory()

"""gpuplan: a whole-cluster GPU placement planner.

From Python, two calls plan a fleet::

    import gpuplan

    inp = gpuplan.load("cluster.yaml", "workloads.csv", "policy.yaml")
    plan = gpuplan.plan(inp, time_limit_s=30)
    print(plan.status, plan.solver.objective, plan.solver.best_bound)

:func:`load` reads and checks the three files (errors name the file and the field, as the CLI's do);
:func:`plan` is the function the CLI, the API and the executor call. Both are imported on first use,
so that importing :mod:`gpuplan` stays fast.

The repository keeps its layers as top-level folders (``models``, ``solvers``, ``planner``, ``api``,
``data``); they are installed as sub-packages of this one package (``gpuplan.models``, ...), so that no
generic top-level name lands in a user's site-packages. The command line, :mod:`gpuplan.cli`, is this
root package's own, on top of the API and the planner. ``docs/ARCHITECTURE.md`` maps them.
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING, Any

from gpuplan.models.base import InputError
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan, PlanStatus, SolverReport

if TYPE_CHECKING:
    from gpuplan.planner.io.files import load_input as load
    from gpuplan.planner.planning import make_plan as plan

__all__ = ["InputError", "Plan", "PlanStatus", "PlanningInput", "SolverReport", "load", "plan"]

try:
    __version__ = metadata.version("gpuplan")
except metadata.PackageNotFoundError:  # pragma: no cover - only when run without being installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    """:func:`load` and :func:`plan`, imported when first asked for (they bring in the solvers)."""
    if name == "load":
        from gpuplan.planner.io.files import load_input

        return load_input
    if name == "plan":
        from gpuplan.planner.planning import make_plan

        return make_plan
    raise AttributeError(f"module 'gpuplan' has no attribute {name!r}")

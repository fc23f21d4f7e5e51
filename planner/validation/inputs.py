"""The one input check: the cluster, workloads and policy as a :class:`~gpuplan.models.inputs.PlanningInput`
whose cross-references hold (``models/inputs.py``) and whose running work over-commits no GPU or node
(:func:`~gpuplan.planner.validation.occupancy.running_conflicts`).

Files (the command line and :func:`gpuplan.load`, through ``planner/io/files.py`` ``planning_input``),
request bodies (``api/jobs.py``) and stored inputs replayed under another policy all pass through
:func:`checked_input`; each front end only words the error its own way: the file and the field in one
line (exit 2), or a 422 at the field's path.
"""

from __future__ import annotations

from pydantic import ValidationError

from gpuplan.models.base import InputError
from gpuplan.models.catalog import default_catalog
from gpuplan.models.cluster import Cluster
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.policy import Policy
from gpuplan.models.workload import Workload
from gpuplan.planner.validation.occupancy import running_conflicts


class BadInput(InputError):
    """Input that parses but does not make sense: the first error (with the count of the others) and
    ``loc``, the path of the field inside the input (``("workloads",)`` for a cross-reference error,
    ``("workloads", position, "running_on", replica)`` for running work that over-commits)."""

    def __init__(self, message: str, loc: tuple[str | int, ...]) -> None:
        super().__init__(message)
        self.loc = loc


def checked_input(
    cluster: Cluster,
    workloads: tuple[Workload, ...],
    policy: Policy,
    catalog: HardwareCatalog | None = None,
) -> PlanningInput:
    """The three inputs as one planning input, checked against ``catalog`` (the bundled one by default):
    cross-references (unknown nodes, GPU models, MIG profiles, duplicate ids, ...), then running work
    that over-commits a GPU or node. Raises :class:`BadInput` on the first failing check."""
    catalog = catalog or default_catalog()
    data = {"cluster": cluster, "workloads": workloads, "policy": policy}
    try:
        inp = PlanningInput.model_validate(data, context={"catalog": catalog})
    except ValidationError as exc:
        msg = str(exc.errors(include_url=False)[0]["msg"]).removeprefix("Value error, ")
        raise BadInput(msg, ("workloads",)) from None
    conflicts = running_conflicts(inp.cluster, inp.workloads, catalog)
    if conflicts:
        i, r, msg = conflicts[0]
        more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
        raise BadInput(msg + more, ("workloads", i, "running_on", r))
    return inp

"""What the commands share: exit codes, loading the input files, ``--now``, the ``--time-limit`` deadline
and the solver options."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from gpuplan.models.base import InputError
from gpuplan.models.catalog import default_catalog
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.problem import PlanningInput
from gpuplan.planner.deadline import Deadline
from gpuplan.planner.io import load_cluster, load_policy, load_workloads, planning_input, read_structured
from gpuplan.planner.occupancy import running_conflicts
from gpuplan.solvers.base import solver_names

if TYPE_CHECKING:
    from gpuplan.planner.executor.kubernetes import Images

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2

#: What ``add_subparsers`` returns: each command group's ``add_parsers`` adds its commands to it (a string:
#: the class is not subscriptable at run time).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def load_input(
    cluster: Path, workloads: Path, policy: Path | None, catalog: HardwareCatalog | None = None
) -> PlanningInput:
    """The cluster, workloads and policy files (the default policy without one) as one planning input;
    running work that over-commits a GPU or node is an input error."""
    catalog = catalog or default_catalog()
    inp = planning_input(
        load_cluster(cluster, catalog), load_workloads(workloads), load_policy(policy), catalog,
        source=str(workloads),
    )  # fmt: skip
    conflicts = running_conflicts(inp.cluster, inp.workloads, catalog)
    if conflicts:
        more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
        raise InputError(f"{workloads}: {conflicts[0][2]}{more}")
    return inp


def add_input_options(p: argparse.ArgumentParser) -> None:
    """``--cluster``, ``--workloads`` and ``--policy``: the files :func:`input_from_args` reads."""
    p.add_argument("--cluster", required=True)
    p.add_argument("--workloads", required=True)
    p.add_argument("--policy")


def input_from_args(args: argparse.Namespace, catalog: HardwareCatalog | None = None) -> PlanningInput:
    """The planning input named by ``--cluster``, ``--workloads`` and ``--policy``."""
    policy = Path(args.policy) if args.policy else None
    return load_input(Path(args.cluster), Path(args.workloads), policy, catalog)


def parse_now(text: str | None) -> datetime | None:
    """The ``--now`` time (None when not given: the planner then uses the current time)."""
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"--now: '{text}' is not an ISO-8601 time") from None


def command_deadline(args: argparse.Namespace) -> Deadline:
    """``--time-limit`` seconds after the command started (the process start for the console script)."""
    return Deadline(args.started + args.time_limit)


def add_solver_option(p: argparse.ArgumentParser, role: str = "back-end") -> None:
    """``--solver``, one of the registered back-ends."""
    p.add_argument("--solver", default="cpsat", choices=solver_names(), help=f"{role} (default cpsat)")


def add_solve_options(
    p: argparse.ArgumentParser, time_limit: float, limit_help: str = "seconds", *, deterministic: bool = True
) -> None:
    """``--solver``, ``--time-limit``, ``--seed``, ``--workers``, ``--now`` and (unless the command is
    always deterministic) ``--deterministic``."""
    add_solver_option(p)
    p.add_argument(
        "--time-limit", type=float, default=time_limit, help=f"{limit_help} (default {time_limit:g})"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2, help="solver threads (default 2)")
    p.add_argument("--now", help="planning time, ISO-8601 (default: the current time)")
    if deterministic:
        p.add_argument(
            "--deterministic",
            action="store_true",
            help="same seed and input give the same plan (CP-SAT stops on deterministic time; slower)",
        )


def add_kubernetes_options(p: argparse.ArgumentParser) -> None:
    """``--image``, ``--images`` and ``--namespace`` of the exported pods."""
    p.add_argument("--image", default="", help="container image of the exported pods")
    p.add_argument("--images", help="YAML or JSON file: workload id -> image (overrides --image)")
    p.add_argument("--namespace", default="default", help="namespace of the pods (default: default)")


def images_from_args(args: argparse.Namespace) -> Images:
    """The images named by ``--image`` and ``--images``."""
    from gpuplan.planner.executor.kubernetes import Images

    per_workload: dict[str, str] = {}
    if args.images:
        raw: Any = read_structured(Path(args.images))
        if not isinstance(raw, dict):
            raise InputError(f"--images {args.images}: expected a mapping of workload id to image")
        for wid, image in raw.items():
            if not isinstance(image, str) or not image.strip():
                raise InputError(f"--images {args.images}: workload '{wid}': not an image name")
            per_workload[str(wid)] = image.strip()
    return Images(default=args.image, per_workload=per_workload)

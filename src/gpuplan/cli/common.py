"""What the commands share: exit codes, the options of every command (``-q``, ``--hardware-catalog``),
loading the input files, ``--now``, the ``--time-limit`` deadline, the solver options and the progress shown
on a terminal."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from gpuplan.models.base import InputError
from gpuplan.models.catalog import CATALOG_ENV, data_dir, default_catalog
from gpuplan.models.cluster import uncertain_in_use
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.planner.io import files
from gpuplan.planner.pipeline.deadline import Deadline
from gpuplan.planner.presentation.progress import TerminalProgress, native_stdout_elsewhere, reporting
from gpuplan.solvers.base import solver_names

if TYPE_CHECKING:
    from gpuplan.models.plan import Plan
    from gpuplan.planner.io.exporters.kubernetes import ExportOptions, Images

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2

#: The commands whose solves show progress lines on a terminal.
PROGRESS_COMMANDS = frozenset(
    {"plan", "demo", "replan", "capacity-gap", "simulate", "explain", "policy-cost", "replay", "frontier"}
)
#: Catalog entries marked uncertain that this run has noted already (each is noted once per run).
_noted: set[str] = set()

#: What ``add_subparsers`` returns: each command group's ``add_parsers`` adds its commands to it (a string:
#: the class is not subscriptable at run time).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def load_input(
    cluster: Path, workloads: Path, policy: Path | None, catalog: HardwareCatalog | None = None
) -> PlanningInput:
    """The checked planning input of the three files (:func:`gpuplan.load`), noting once per run the
    catalog entries marked uncertain that the cluster uses (not for the bundled example fleet: it has no
    real machines to check them against)."""
    catalog = catalog or default_catalog()
    inp = files.load_input(cluster, workloads, policy, catalog)
    if cluster.resolve().is_relative_to((data_dir() / "examples").resolve()):
        return inp
    new = [entry for entry in uncertain_in_use(inp.cluster, catalog) if entry not in _noted]
    if new:
        _noted.update(new)
        log.warning(
            "marked uncertain in the hardware catalog (check against the real machines): %s", "; ".join(new)
        )
    return inp


def add_common_options(p: argparse.ArgumentParser, *, top: bool) -> None:
    """``-q`` and ``--hardware-catalog``, which every command takes, before or after its name (``top``: the
    main parser, where they get their defaults; a command's copies leave them alone when not given)."""
    default: Any = argparse.SUPPRESS
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=False if top else default,
        help="no progress lines and no warnings (errors only)",
    )
    p.add_argument(
        "--hardware-catalog",
        metavar="FILE",
        default=None if top else default,
        help=f"a YAML or JSON file of GPU models and reference topologies added to the bundled catalog "
        f"(default: ${CATALOG_ENV})",
    )


def shows_progress(args: argparse.Namespace) -> bool:
    """Whether the command prints progress lines: on a terminal, unless ``-q`` (pipes stay quiet)."""
    return not args.quiet and sys.stderr.isatty()


@contextmanager
def command_context(args: argparse.Namespace, *, console: bool) -> Iterator[TerminalProgress | None]:
    """What surrounds every command: the user catalog of ``--hardware-catalog`` (through
    ``$GPUPLAN_CATALOG``, so that worker processes see it too), progress lines on a terminal, and (when the
    console script runs, or progress is on) a stdout that only the command writes to: what solvers print
    there natively goes to stderr with ``-v``, else nowhere. Yields the progress printer (None when none is
    shown)."""
    with ExitStack() as stack:
        if args.hardware_catalog:
            before = os.environ.get(CATALOG_ENV)
            os.environ[CATALOG_ENV] = args.hardware_catalog
            stack.callback(_restore_env, before)
        default_catalog()  # a bad catalog file is an input error before anything runs
        show = args.command in PROGRESS_COMMANDS and shows_progress(args)
        if console or show:  # with progress on, CP-SAT also prints its whole search log to stdout
            sink = 2 if args.verbose else os.open(os.devnull, os.O_WRONLY)
            if sink != 2:
                stack.callback(os.close, sink)
            stack.enter_context(native_stdout_elsewhere(sink))
        progress = TerminalProgress(sys.stderr, args.started) if show else None
        if progress is not None:
            stack.enter_context(reporting(progress))
        yield progress


def _restore_env(value: str | None) -> None:
    """Put ``$GPUPLAN_CATALOG`` back as it was before the command."""
    if value is None:
        os.environ.pop(CATALOG_ENV, None)
    else:
        os.environ[CATALOG_ENV] = value


def add_input_options(p: argparse.ArgumentParser) -> None:
    """``--cluster``, ``--workloads`` and ``--policy``: the files :func:`input_from_args` reads."""
    p.add_argument("--cluster", required=True)
    p.add_argument("--workloads", required=True)
    p.add_argument("--policy")


def input_from_args(args: argparse.Namespace, catalog: HardwareCatalog | None = None) -> PlanningInput:
    """The planning input named by ``--cluster``, ``--workloads`` and ``--policy``."""
    policy = Path(args.policy) if args.policy else None
    return load_input(Path(args.cluster), Path(args.workloads), policy, catalog)


#: The option that names each input file.
INPUT_OPTIONS = {"cluster": "--cluster", "workloads": "--workloads", "policy": "--policy"}


def check_made_from(plan: Plan, inp: PlanningInput, plan_path: str) -> None:
    """Refuse to read ``plan`` against inputs other than those it was made from, saying which input
    differs (the cluster, the workloads or the policy) and how to fix it."""
    from gpuplan.planner.planning import input_digests, inputs_digest

    recorded = plan.provenance.get("inputs_sha256")
    if not recorded or recorded == inputs_digest(inp):
        return
    parts = plan.provenance.get("input_sha256")
    if isinstance(parts, dict):
        now = input_digests(inp)
        differ = [part for part in INPUT_OPTIONS if parts.get(part) != now[part]]
    else:  # a plan from before the inputs had digests of their own
        differ = list(INPUT_OPTIONS)
    options = " or ".join(INPUT_OPTIONS[part] for part in differ)
    raise InputError(
        f"--plan {plan_path}: the plan was made from other inputs ({' and '.join(differ)} changed; "
        "inputs_sha256 differs); "
        f"give the {options} file the plan was made from, or make the plan again from these inputs "
        f"(gpuplan plan ... --out {plan_path})"
    )


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
    """``--solver``, ``--time-limit``, ``--seed``, ``--workers``, ``--now``, ``--ray`` and (unless the
    command is always deterministic) ``--deterministic``."""
    add_solver_option(p)
    p.add_argument(
        "--time-limit", type=float, default=time_limit, help=f"{limit_help} (default {time_limit:g})"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2, help="solver threads (default 2)")
    p.add_argument("--now", help="planning time, ISO-8601 (default: the current time)")
    add_ray_option(p)
    if deterministic:
        p.add_argument(
            "--deterministic",
            action="store_true",
            help="same seed and input give the same plan (CP-SAT stops on deterministic time; slower)",
        )


def add_ray_option(p: argparse.ArgumentParser) -> None:
    """``--ray``: run the independent pieces of the solves as Ray tasks."""
    p.add_argument(
        "--ray",
        metavar="ADDRESS|local",
        help="run the independent pieces (pricing problems, fleet parts, scenarios, seeds) as Ray tasks on "
        "the cluster at ADDRESS (HOST:PORT or ray://HOST:PORT), or on a Ray instance started here with "
        "'local' (default: local processes; needs pip install 'gpuplan[ray]')",
    )


def ray_from_args(args: argparse.Namespace) -> str | None:
    """The ``--ray`` address, connected to before anything is solved (``None`` without ``--ray``); Ray
    missing or the address unreachable is an input error."""
    from gpuplan.solvers.parallel import ParallelUnavailable, connect

    if args.ray is None:
        return None
    try:
        connect(args.ray)
    except ParallelUnavailable as exc:
        raise InputError(f"--ray {args.ray}: {exc}") from None
    address: str = args.ray
    return address


def add_kubernetes_options(p: argparse.ArgumentParser) -> None:
    """``--image``, ``--images`` and ``--namespace`` of the exported pods, and the GPU Operator's
    ConfigMaps gpuplan adds its configs to."""
    p.add_argument("--image", default="", help="container image of the exported pods")
    p.add_argument("--images", help="YAML or JSON file: workload id -> image (overrides --image)")
    p.add_argument("--namespace", default="default", help="namespace of the pods (default: default)")
    p.add_argument(
        "--mig-parted-config",
        metavar="FILE",
        help="the GPU Operator's mig-parted ConfigMap (kubectl get configmap -n gpu-operator "
        "default-mig-parted-config -o json): MIG changes are added to it (without it none is exported)",
    )
    p.add_argument(
        "--device-plugin-config",
        metavar="NAME",
        default="gpuplan-device-plugin-config",
        help="the device plugin's ConfigMap (the ClusterPolicy's devicePlugin.config.name) that sharing "
        "configs are added to (default gpuplan-device-plugin-config)",
    )


def export_options_from_args(args: argparse.Namespace, state_dir: str | None = None) -> ExportOptions:
    """Where the Kubernetes export merges its configs: ``--mig-parted-config`` (else ``DIR/mig-parted-
    config.json`` of ``--kubernetes-state DIR`` when present) and ``--device-plugin-config``."""
    from gpuplan.planner.io.exporters.kubernetes import ExportOptions
    from gpuplan.planner.io.importers.kubernetes import load_mig_parted

    path = Path(args.mig_parted_config) if args.mig_parted_config else None
    if path is None and state_dir is not None and (Path(state_dir) / "mig-parted-config.json").is_file():
        path = Path(state_dir) / "mig-parted-config.json"
    return ExportOptions(
        mig_parted=load_mig_parted(path) if path is not None else None,
        device_plugin_configmap=args.device_plugin_config,
    )


def images_from_args(args: argparse.Namespace) -> Images:
    """The images named by ``--image`` and ``--images``."""
    from gpuplan.planner.io.exporters.kubernetes import Images

    per_workload: dict[str, str] = {}
    if args.images:
        raw: Any = files.read_structured(Path(args.images))
        if not isinstance(raw, dict):
            raise InputError(f"--images {args.images}: expected a mapping of workload id to image")
        for wid, image in raw.items():
            if not isinstance(image, str) or not image.strip():
                raise InputError(f"--images {args.images}: workload '{wid}': not an image name")
            per_workload[str(wid)] = image.strip()
    return Images(default=args.image, per_workload=per_workload)

"""``gpuplan plan``, ``demo``, ``validate`` and ``schema``."""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.cli import common
from gpuplan.models.catalog import data_dir, default_catalog
from gpuplan.models.cluster import Cluster
from gpuplan.models.plan import Plan
from gpuplan.models.policy import Policy
from gpuplan.models.workload import Workloads
from gpuplan.planner.io.files import (
    load_cluster,
    load_plan,
    load_policy,
    load_workloads,
    planning_input,
    write_json,
)
from gpuplan.planner.pipeline.deadline import Stopwatch, fixed_solve_share, solve_share
from gpuplan.planner.presentation import summary
from gpuplan.solvers.base import get_solver

if TYPE_CHECKING:
    from gpuplan.models.inputs import PlanningInput
    from gpuplan.planner.validation.validate import Report

log = logging.getLogger(__name__)


def _run_plan(inp: PlanningInput, args: argparse.Namespace, files: dict[str, Path | None]) -> Plan:
    """Plan ``inp`` with the command's options, print the summary and write the plan; the plan names the
    input ``files`` it was made from (provenance ``inputs``: ``gpuplan explain`` reads them again)."""
    from gpuplan.planner.planning import make_plan

    ray = common.ray_from_args(args)  # before the solve's share of the time limit is taken
    # Importing the back-end (OR-Tools: a second or more on a loaded machine) is start-up too: inside the
    # solve it would overrun the solve's share and leave the passes after it no time.
    get_solver(args.solver)
    startup = time.monotonic() - args.started
    plan = make_plan(
        inp,
        solver=args.solver,
        now=common.parse_now(args.now),
        time_limit_s=solve_share(
            args.time_limit, common.command_deadline(args), deterministic=args.deterministic
        ),
        seed=args.seed,
        num_workers=args.workers,
        deterministic=args.deterministic,
        explain=True,
        ray=ray,
        work_limit_s=fixed_solve_share(args.time_limit),
    )
    inputs = {part: str(path.resolve()) for part, path in files.items() if path is not None}
    plan = plan.model_copy(update={"provenance": {**plan.provenance, "inputs": inputs}})
    watch = Stopwatch()
    print(summary.render(plan, inp))
    watch.lap("summary")
    if args.out:
        write_json(Path(args.out), plan)
        print(f"plan written to {args.out}")
    watch.lap("write")
    log.info("output phases: startup=%.3f %s", startup, watch.line())
    return plan


def cmd_plan(args: argparse.Namespace) -> int:
    """Plan a cluster and a demand list."""
    files = {"cluster": Path(args.cluster), "workloads": Path(args.workloads)}
    policy = Path(args.policy) if args.policy else None
    _run_plan(common.input_from_args(args), args, {**files, "policy": policy})
    return common.EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """Plan the bundled example fleet and demand."""
    from gpuplan.cli.capacity import write_plan_workbook

    ex = data_dir() / "examples"
    files = {"cluster": ex / "cluster.yaml", "workloads": ex / "workloads.yaml", "policy": ex / "policy.yaml"}
    inp = common.load_input(files["cluster"], files["workloads"], files["policy"])
    if args.now is None:
        args.now = (ex / "now.txt").read_text().strip()
    print(
        f"gpuplan demo: {len(inp.cluster.nodes)} nodes, {inp.cluster.gpu_count} GPUs, "
        f"{len(inp.workloads)} workloads (from {ex})"
    )
    plan = _run_plan(inp, args, dict(files))
    xlsx = args.xlsx or (str(Path(args.out).with_suffix(".xlsx")) if args.out else None)
    if xlsx:
        write_plan_workbook(plan, inp, Path(xlsx), dict(files))
        print(f"workbook written to {xlsx}")
    if args.out:
        print(
            f"check it: gpuplan validate --cluster {ex / 'cluster.yaml'} --workloads "
            f"{ex / 'workloads.yaml'} --policy {ex / 'policy.yaml'} --plan {args.out}"
        )
    return common.EXIT_OK


def not_checked(report: Report) -> str:
    """``; not checked without the workloads: shapes, gpu-models`` (empty when every rule was checked)."""
    by_reason: dict[str, list[str]] = {}
    for s in report.skipped:
        by_reason.setdefault(s.reason, []).append(s.family)
    return "".join(f"; not checked {reason}: {', '.join(families)}" for reason, families in by_reason.items())


def cmd_validate(args: argparse.Namespace) -> int:
    """Check a plan against a cluster (and the demand and policy when given)."""
    from gpuplan.planner.validation.validate import check_plan, implied_workloads

    catalog = default_catalog()
    cluster = load_cluster(Path(args.cluster), catalog)
    plan = load_plan(Path(args.plan))
    policy = load_policy(Path(args.policy) if args.policy else None)
    workloads = load_workloads(Path(args.workloads)) if args.workloads else implied_workloads(plan, policy)
    inp = planning_input(cluster, workloads, policy, catalog, source=str(args.plan))
    report = check_plan(plan, inp, catalog, workloads_implied=not args.workloads)
    if report.valid:
        print(
            f"{args.plan}: valid ({len(plan.assignments)} assignments, {len(plan.unplaced)} waiting)"
            f"{not_checked(report)}"
        )
        for k in report.kept:
            print(f"  stays broken, as in the current state: [{k.rule}] {k.subject}: {k.message}")
        return common.EXIT_OK
    print(f"{args.plan}: {len(report.violations)} violation(s){not_checked(report)}")
    for v in report.violations:
        print(f"  [{v.rule}] {v.subject}: {v.message}")
    return common.EXIT_FAIL


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the JSON Schemas of the file formats."""
    schemas = {
        "cluster": Cluster.model_json_schema(),
        "workloads": Workloads.model_json_schema(),
        "policy": Policy.model_json_schema(),
        "plan": Plan.model_json_schema(by_alias=True),
    }
    print(json.dumps(schemas if args.kind == "all" else schemas[args.kind], indent=2))
    return common.EXIT_OK


def add_parsers(sub: common.Subparsers) -> None:
    """Register ``plan``, ``demo``, ``validate`` and ``schema``."""
    p = sub.add_parser("plan", help="plan workloads on a cluster")
    common.add_input_options(p)
    p.add_argument("--out", help="write the plan JSON here")
    common.add_solve_options(p, time_limit=30.0)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("demo", help="plan the bundled example and print the summary")
    p.add_argument("--out", default="demo-plan.json", help="write the plan JSON here")
    p.add_argument("--xlsx", help="write the workbook here (default: next to the plan JSON)")
    common.add_solve_options(p, time_limit=10.0)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("validate", help="check a plan; exit 1 listing violations")
    p.add_argument("--cluster", required=True)
    p.add_argument("--plan", required=True)
    p.add_argument("--workloads", help="the demand (default: as the plan describes it)")
    p.add_argument("--policy")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("schema", help="print the JSON Schemas")
    p.add_argument(
        "kind", nargs="?", default="all", choices=["all", "cluster", "workloads", "policy", "plan"]
    )
    p.set_defaults(func=cmd_schema)

"""The ``gpuplan`` command line: plan, validate, schema, demo and import."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from gpuplan.models.base import InputError
from gpuplan.models.catalog import data_dir, default_catalog
from gpuplan.models.cluster import Cluster
from gpuplan.models.plan import Plan
from gpuplan.models.policy import Policy
from gpuplan.models.problem import PlanningInput
from gpuplan.models.workload import Workloads
from gpuplan.planner import summary
from gpuplan.planner.capacity_cli import add_capacity_parsers, write_plan_workbook
from gpuplan.planner.deadline import Deadline, command_start, solve_share
from gpuplan.planner.explain_cli import add_explain_parser
from gpuplan.planner.import_cli import add_import_parser
from gpuplan.planner.io import (
    load_cluster,
    load_plan,
    load_policy,
    load_workloads,
    planning_input,
    write_json,
)
from gpuplan.planner.planning import make_plan
from gpuplan.planner.rounds_cli import add_rounds_parser
from gpuplan.planner.serve_cli import add_serve_parser
from gpuplan.planner.validate import Report, check_plan, implied_workloads
from gpuplan.solvers.base import solver_names

log = logging.getLogger("gpuplan")

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2


def _load_input(cluster: Path, workloads: Path, policy: Path | None) -> PlanningInput:
    catalog = default_catalog()
    return planning_input(
        load_cluster(cluster, catalog),
        load_workloads(workloads),
        load_policy(policy),
        catalog,
        source=str(workloads),
    )


def _now(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"--now: '{text}' is not an ISO-8601 time") from None


def _run_plan(inp: PlanningInput, args: argparse.Namespace) -> Plan:
    plan = make_plan(
        inp,
        solver=args.solver,
        now=_now(args.now),
        time_limit_s=solve_share(args.time_limit, Deadline(args.started + args.time_limit)),
        seed=args.seed,
        num_workers=args.workers,
        deterministic=args.deterministic,
        explain=True,
    )
    print(summary.render(plan, inp))
    if args.out:
        write_json(Path(args.out), plan)
        print(f"plan written to {args.out}")
    return plan


def cmd_plan(args: argparse.Namespace) -> int:
    """Plan a cluster and a demand list."""
    inp = _load_input(Path(args.cluster), Path(args.workloads), Path(args.policy) if args.policy else None)
    _run_plan(inp, args)
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """Plan the bundled example fleet and demand."""
    ex = data_dir() / "examples"
    inp = _load_input(ex / "cluster.yaml", ex / "workloads.yaml", ex / "policy.yaml")
    if args.now is None:
        args.now = (ex / "now.txt").read_text().strip()
    print(
        f"gpuplan demo: {len(inp.cluster.nodes)} nodes, {inp.cluster.gpu_count} GPUs, "
        f"{len(inp.workloads)} workloads (from {ex})"
    )
    plan = _run_plan(inp, args)
    xlsx = args.xlsx or (str(Path(args.out).with_suffix(".xlsx")) if args.out else None)
    if xlsx:
        write_plan_workbook(plan, inp, Path(xlsx))
        print(f"workbook written to {xlsx}")
    if args.out:
        print(
            f"check it: gpuplan validate --cluster {ex / 'cluster.yaml'} --workloads "
            f"{ex / 'workloads.yaml'} --policy {ex / 'policy.yaml'} --plan {args.out}"
        )
    return EXIT_OK


def not_checked(report: Report) -> str:
    """``; not checked without the workloads: shapes, gpu-models`` (empty when every rule was checked)."""
    by_reason: dict[str, list[str]] = {}
    for s in report.skipped:
        by_reason.setdefault(s.reason, []).append(s.family)
    return "".join(f"; not checked {reason}: {', '.join(families)}" for reason, families in by_reason.items())


def cmd_validate(args: argparse.Namespace) -> int:
    """Check a plan against a cluster (and the demand and policy when given)."""
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
        return EXIT_OK
    print(f"{args.plan}: {len(report.violations)} violation(s){not_checked(report)}")
    for v in report.violations:
        print(f"  [{v.rule}] {v.subject}: {v.message}")
    return EXIT_FAIL


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the JSON Schemas of the file formats."""
    schemas = {
        "cluster": Cluster.model_json_schema(),
        "workloads": Workloads.model_json_schema(),
        "policy": Policy.model_json_schema(),
        "plan": Plan.model_json_schema(by_alias=True),
    }
    print(json.dumps(schemas if args.kind == "all" else schemas[args.kind], indent=2))
    return EXIT_OK


def _plan_options(p: argparse.ArgumentParser, time_limit: float = 30.0) -> None:
    p.add_argument("--solver", default="cpsat", choices=solver_names(), help="back-end (default cpsat)")
    p.add_argument("--time-limit", type=float, default=time_limit, help=f"seconds (default {time_limit:g})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2, help="solver threads (default 2)")
    p.add_argument("--now", help="planning time, ISO-8601 (default: the current time)")
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="same seed and input give the same plan (CP-SAT stops on deterministic time; slower)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="gpuplan", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="plan workloads on a cluster")
    p.add_argument("--cluster", required=True)
    p.add_argument("--workloads", required=True)
    p.add_argument("--policy")
    p.add_argument("--out", help="write the plan JSON here")
    _plan_options(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("demo", help="plan the bundled example and print the summary")
    p.add_argument("--out", default="demo-plan.json", help="write the plan JSON here")
    p.add_argument("--xlsx", help="write the workbook here (default: next to the plan JSON)")
    _plan_options(p, time_limit=10.0)
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

    add_import_parser(sub)
    add_rounds_parser(sub)
    add_capacity_parsers(sub)
    add_serve_parser(sub)
    add_explain_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpuplan`` console script."""
    args = build_parser().parse_args(argv)
    # A --time-limit counts from the process start when the process runs just this command.
    args.started = command_start(whole_process=argv is None)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="gpuplan: %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except InputError as exc:
        print(f"gpuplan: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        print(f"gpuplan: error: {'.'.join(map(str, first['loc']))}: {first['msg']}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

"""``gpuplan capacity-gap`` (what to re-partition and buy, with what-if scenarios) and ``gpuplan export``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from gpuplan.cli import common
from gpuplan.models.base import InputError
from gpuplan.models.capacity import CapacityReport
from gpuplan.models.catalog import default_catalog
from gpuplan.planner.io.files import describe, load_plan, read_structured, write_json
from gpuplan.planner.presentation.progress import phase

if TYPE_CHECKING:
    from gpuplan.models.capacity import CapacityGap, ScenarioResult, Served
    from gpuplan.models.hardware import HardwareCatalog
    from gpuplan.models.inputs import PlanningInput
    from gpuplan.models.plan import Plan

#: Of ``--time-limit``, the part kept for writing the report and the workbook after the solves (at most
#: ``OUTPUT_MAX_S`` seconds).
OUTPUT_SHARE = 0.05
OUTPUT_MAX_S = 5.0


#: Workloads named per purchase or re-partition on the console (all of them are in the JSON).
SHOWN = 6


def _served(items: tuple[Served, ...]) -> str:
    """Workloads served, with team, tier and GPU-hours, the first :data:`SHOWN` by GPU-hours, then how
    many more and their teams (``-`` for none)."""
    first = sorted(items, key=lambda s: (-s.gpu_hours, s.workload))
    text = "; ".join(
        f"{s.workload} x{s.replicas} ({s.team}/{s.tier}, {s.gpu_hours:,.1f} GPU-h)" for s in first[:SHOWN]
    )
    rest = first[SHOWN:]
    if rest:
        teams = sorted({s.team for s in rest})
        text += f"; and {len(rest)} more workloads ({', '.join(teams)}; all in --out)"
    return text or "-"


def number(value: float) -> str:
    """A count or share as people read it: a whole number without decimals (``7``, never ``7.00``),
    else at most two decimals (``3.86``, ``2.5``)."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def render_gap(gap: CapacityGap) -> str:
    """The capacity gap as text: price source, demand, re-partitions and purchases (unit price, count,
    GPUs, idle GPUs, total, lead time) with whom they serve, the total with the lower bound and what it
    covers, per tier and team, class moves, unservable."""
    lines = [
        f"gap demand: {gap.demand_replicas} replicas waiting beyond their tier target"
        + (f" (of {gap.input_replicas} replicas asked)" if gap.input_replicas else ""),
        f"served by re-partitions (MIG layouts, sharing modes; no purchase): {gap.served_by_repartition}"
        + (f" ({len(gap.repartition_actions)} actions)" if gap.repartition_actions else ""),
        f"served by purchases: {gap.served_by_purchase}   cannot be served: {len(gap.unservable)}",
    ]
    for rp in gap.repartitions:
        steps = ", ".join(rp.actions)
        where = f"{rp.node} GPU {rp.gpu}" if rp.gpu is not None else f"{rp.node} (sharing mode)"
        lines.append(f"  re-partition {where}: {steps}; frees room for {_served(rp.serves)}")
    example = " (EXAMPLE price)" if gap.example_prices else ""
    for p in gap.purchases:
        lines.append(
            f"  buy {p.count} x {p.node_type} at {p.unit_cost:,.0f} {gap.currency} each{example} = "
            f"{p.cost:,.0f} {gap.currency}: {p.gpus} {p.gpu_model} GPUs, {number(round(p.gpus_idle, 2))} "
            f"idle, lead time {p.lead_time_days} d, unlocks {p.gpu_hours:,.1f} GPU-h"
        )
        if p.use_note:
            lines.append(f"    LOW USE: {p.use_note}")
        lines.append(f"    serves: {_served(p.serves)}")
    verdict = "verified by placement" if gap.verified else f"NOT verified: {gap.still_unplaced} still waiting"
    lines.append(
        f"total: {gap.nodes_added} nodes, {gap.gpus_added} GPUs, {gap.cost:,.0f} {gap.currency} "
        f"(lower bound {gap.lower_bound:,.0f}"
        + ("" if gap.lower_bound > gap.cost else f", gap {100 * gap.gap:.2f}%")
        + f", {gap.solver_status}; {verdict})"
    )
    if gap.example_prices:
        lines.append(f"PRICES ARE EXAMPLES: {gap.price_source}")
    if gap.bound_note:
        lines.append(f"  {gap.bound_note}")
    if gap.solver:
        lines.append(
            f"  purchase by {gap.solver} ({gap.purchase_status}): at least "
            f"{gap.purchase_lower_bound:,.0f} {gap.currency} for the demand this fleet plan left waiting"
        )
    if gap.cut_short:
        lines.append(
            f"cut short by the time limit: {', '.join(gap.cut_short)} (best results so far; see the notes)"
        )
    head = f"{'demand':>7} {'re-partition':>13} {'bought':>7} {'never':>6} {'GPUs (share)':>13} {'cost':>14}"
    for title, rows in (("tier", gap.by_tier), ("team", gap.by_team)):
        if not rows:
            continue
        lines.append(f"{title:<18} {head}")
        for r in rows:
            lines.append(
                f"{r.key:<18} {r.replicas:>7} {r.served_by_repartition:>13} {r.served_by_purchase:>7} "
                f"{r.unservable:>6} {number(round(r.gpus_added, 2)):>13} {r.cost:>14,.0f}"
            )
    if gap.allow_other_models:
        lines.append(
            "other GPU models allowed for: "
            + ("every workload" if gap.allow_other_models == ("*",) else ", ".join(gap.allow_other_models))
        )
    lines.extend(
        f"moves class: {m.workload} x{m.replicas} from {'|'.join(m.from_models)} to {m.to_model}"
        for m in gap.class_moves
    )
    lines.extend(f"cannot be served: {u.message}" for u in gap.unservable)
    lines.extend(f"note: {n}" for n in gap.notes)
    return "\n".join(lines)


def min_use(value: str) -> float:
    """``--min-use``: a share of a purchase's GPUs between 0 and 1."""
    try:
        share = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a number") from None
    if not 0.0 <= share <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not a share between 0 and 1")
    return share


def other_models(given: list[str] | None, inp: PlanningInput) -> dict[str, Any]:
    """``GapOptions`` fields of ``--allow-other-models [WORKLOAD ...]`` (no names: every workload)."""
    if given is None:
        return {}
    if not given:
        return {"allow_other_models": True}
    names = {n for part in given for n in part.split(",") if n}
    unknown = sorted(names - set(inp.workload_by_id))
    if unknown:
        raise InputError(f"--allow-other-models: unknown workload '{unknown[0]}'")
    return {"other_models_for": frozenset(names)}


def cmd_capacity_gap(args: argparse.Namespace) -> int:
    """Plan, re-partition, then buy: the capacity gap of the demand (and of every scenario), all within
    ``--time-limit`` from the start of the command."""
    from gpuplan.planner.capacity.gap import capacity_gap
    from gpuplan.planner.capacity.node_types import load_node_types
    from gpuplan.planner.capacity.options import GapOptions
    from gpuplan.planner.capacity.phases import plan_fleet
    from gpuplan.planner.capacity.scenarios import (
        load_scenarios,
        prepare_scenarios,
        render_table,
        run_prepared,
    )
    from gpuplan.planner.io.exporters.workbook import about_files, build_tables, write_xlsx

    deadline = common.command_deadline(args)
    catalog = default_catalog()
    inp = common.input_from_args(args, catalog)
    types = load_node_types(Path(args.catalog) if args.catalog else None, catalog)
    opts = GapOptions(
        solver=args.solver,
        time_limit_s=args.time_limit,
        milp_time_limit_s=args.milp_time_limit,
        seed=args.seed,
        num_workers=args.workers,
        now=common.parse_now(args.now),
        ray=common.ray_from_args(args),
        min_use=args.min_use,
        **other_models(args.allow_other_models, inp),
    )
    what_ifs = (
        prepare_scenarios(
            inp, types, load_scenarios(Path(args.scenarios)), Path(args.scenarios).parent, catalog
        )
        if args.scenarios
        else []
    )
    # The report and workbook are written after the solves: keep their time out of the solves' shares.
    work = deadline.reserve(min(OUTPUT_MAX_S, OUTPUT_SHARE * args.time_limit))
    # The gap and each scenario that changes something run the same pipeline: equal parts of the time
    # left when each starts.
    first = work.sub(1 / (1 + sum(1 for p in what_ifs if not p.same_gap)))
    with phase("solve"):
        plan = plan_fleet(inp, opts, first, catalog)
    with phase("capacity gap"):
        gap = capacity_gap(inp, types, opts, baseline=plan, catalog=catalog, deadline=first)
    print(render_gap(gap))
    scenarios: tuple[ScenarioResult, ...] = ()
    if what_ifs:
        with phase("scenarios"):
            scenarios = run_prepared(what_ifs, opts, catalog, deadline=work, base=(plan, gap))
        print()
        print(render_table(scenarios))
    report = CapacityReport(gap=gap, scenarios=scenarios)
    if args.out:
        write_json(Path(args.out), report)
        print(f"capacity gap written to {args.out}")
    if args.xlsx:
        asked = (
            "gpuplan capacity-gap: what to re-partition and buy so that the waiting demand is served "
            f"within its tier targets, and at what cost (time limit {args.time_limit:g} s"
            + (", other GPU models allowed" if args.allow_other_models is not None else "")
            + (f", {len(scenarios)} what-if scenarios" if scenarios else "")
            + ")"
        )
        files = {"cluster": args.cluster, "workloads": args.workloads, "policy": args.policy,
                 "node-type catalog": args.catalog, "scenarios": args.scenarios}  # fmt: skip
        write_xlsx(
            build_tables(plan, catalog, inp, report, types), Path(args.xlsx), about_files(asked, files)
        )
        print(f"workbook written to {args.xlsx}")
    return 1 if gap.unservable else 0


def load_report(path: Path) -> CapacityReport:
    """A capacity-gap JSON written by ``gpuplan capacity-gap --out``."""
    raw = read_structured(path)
    try:
        return CapacityReport.model_validate(raw)
    except ValidationError as exc:
        raise InputError(f"{path}: {describe(exc, raw)}") from None


def export_tables(args: argparse.Namespace, plan: Plan, catalog: HardwareCatalog) -> int:
    """Write the plan (and gap) as a workbook or CSV files."""
    from gpuplan.planner.capacity.node_types import load_node_types
    from gpuplan.planner.io.exporters.workbook import about_files, build_tables, write_csv, write_xlsx

    given = [args.cluster, args.workloads]
    if any(given) and not all(given):
        raise InputError("--cluster and --workloads go together")
    inp = common.input_from_args(args, catalog) if all(given) else None
    report = load_report(Path(args.gap)) if args.gap else None
    types = load_node_types(Path(args.catalog) if args.catalog else None, catalog)
    tables = build_tables(plan, catalog, inp, report, types, period_h=args.period_hours)
    if args.xlsx:
        asked = "gpuplan export: a plan" + (" and its capacity gap" if report is not None else "")
        files = {"plan": args.plan, "cluster": args.cluster, "workloads": args.workloads,
                 "policy": args.policy, "capacity gap": args.gap,
                 "node-type catalog": args.catalog}  # fmt: skip
        write_xlsx(tables, Path(args.xlsx), about_files(asked, files))
        print(f"workbook written to {args.xlsx}")
    if args.csv:
        paths = write_csv(tables, Path(args.csv))
        print(f"{len(paths)} CSV files written to {args.csv}")
    return 0


def write_plan_workbook(plan: Plan, inp: PlanningInput, path: Path, files: dict[str, Path | None]) -> None:
    """The workbook of a plan with its inputs (no capacity gap), priced with the bundled node types."""
    from gpuplan.planner.capacity.node_types import load_node_types
    from gpuplan.planner.io.exporters.workbook import about_files, build_tables, write_xlsx

    catalog = default_catalog()
    about = about_files("gpuplan demo: the bundled example fleet and demand, planned",
                        {role: str(f) if f else None for role, f in files.items()})  # fmt: skip
    write_xlsx(build_tables(plan, catalog, inp, None, load_node_types(None, catalog)), path, about)


def export_kubernetes(args: argparse.Namespace, plan: Plan, catalog: HardwareCatalog) -> int:
    """Write the plan as Kubernetes objects, one file per round (:mod:`planner.io.exporters.kubernetes`)."""
    from gpuplan.planner.io.exporters import kubernetes
    from gpuplan.planner.validation.validate import check_plan

    if not (args.cluster and args.workloads):
        raise InputError("--kubernetes: give --cluster and --workloads (what runs now, tiers, teams, gangs)")
    inp = common.input_from_args(args, catalog)
    report = check_plan(plan, inp, catalog)
    if not report.valid:
        v = report.violations[0]
        why = f"[{v.rule}] {v.subject}: {v.message}"
        raise InputError(f"--plan {args.plan}: not a valid plan of these inputs: {why}")
    options = common.export_options_from_args(args)
    steps = kubernetes.steps(plan, inp, common.images_from_args(args), args.namespace, options)
    paths = kubernetes.write_rounds(steps, Path(args.kubernetes))
    print(f"{len(paths)} round files written to {args.kubernetes}")
    for path, step in zip(paths, steps, strict=True):
        print(f"  {path.name}: plan round {step.plan_round}, {step.kind}, {step.size} object(s)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Export a plan (and a capacity gap) as an Excel workbook or CSV files, or as Kubernetes objects."""
    catalog = default_catalog()
    plan = load_plan(Path(args.plan))
    if args.kubernetes:
        return export_kubernetes(args, plan, catalog)
    return export_tables(args, plan, catalog)


def add_parsers(sub: common.Subparsers) -> None:
    """Register ``capacity-gap`` and ``export``."""
    p = sub.add_parser("capacity-gap", help="what to re-partition and buy to serve the waiting demand")
    common.add_input_options(p)
    p.add_argument(
        "--catalog",
        help="purchasable node types, YAML/JSON (schema: docs/FORMATS.md#node-type-catalog; template: "
        "data/examples/node_types.template.yaml); default: the bundled catalog with EXAMPLE prices",
    )
    p.add_argument(
        "--allow-other-models",
        nargs="*",
        metavar="WORKLOAD",
        help="what-if: buy any GPU model for workloads without a GPU-model constraint (all, or the "
        "workloads named); by default each keeps its GPU class (the models it runs on, else the fleet's)",
    )
    p.add_argument("--scenarios", help="what-if scenarios file; results tabulated side by side")
    p.add_argument("--out", help="write the capacity gap (and scenarios) as JSON here")
    p.add_argument("--xlsx", help="also write a workbook with the plan and the gap")
    common.add_solve_options(
        p, 30.0, "seconds for the whole command, every solve and scenario included", deterministic=False
    )
    p.add_argument(
        "--milp-time-limit", type=float, default=30.0, help="at most this many seconds per purchase MILP"
    )
    p.add_argument(
        "--min-use",
        type=min_use,
        default=0.25,
        metavar="SHARE",
        help="a purchase line whose replicas use less than this share of its GPUs says so (default 0.25)",
    )
    p.set_defaults(func=cmd_capacity_gap)

    p = sub.add_parser(
        "export", help="a plan (and capacity gap) as an Excel workbook or CSV files, or Kubernetes objects"
    )
    p.add_argument("--plan", required=True)
    p.add_argument("--cluster")
    p.add_argument("--workloads")
    p.add_argument("--policy")
    p.add_argument("--gap", help="capacity-gap JSON from `gpuplan capacity-gap --out`")
    p.add_argument("--catalog", help="node types whose prices give GPU-hour costs (default: bundled)")
    p.add_argument("--period-hours", type=float, default=24.0, help="GPU-hours basis without duration_s")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--xlsx", help="workbook path")
    out.add_argument("--csv", help="directory for one CSV per sheet")
    out.add_argument(
        "--kubernetes",
        metavar="DIR",
        help="directory for round-01.yaml, round-02.yaml, ... (with the inputs)",
    )
    common.add_kubernetes_options(p)
    p.set_defaults(func=cmd_export)

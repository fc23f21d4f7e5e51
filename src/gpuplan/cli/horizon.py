"""``gpuplan capacity-plan``: what to order when, what to rent and what waits, period by period, as demand
grows (:mod:`gpuplan.planner.capacity.horizon`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.cli import common
from gpuplan.cli.capacity import OUTPUT_MAX_S, OUTPUT_SHARE, number
from gpuplan.models.capacity import DEFAULT_WAIT_PRICE, MAX_PRICE
from gpuplan.models.catalog import default_catalog
from gpuplan.planner.io.files import write_json
from gpuplan.planner.presentation.progress import phase

if TYPE_CHECKING:
    from gpuplan.models.capacity import HorizonPlan, ServedGroup

#: Teams and tiers named per order or rental on the console (all of them are in the JSON).
SHOWN = 4


def _serves(groups: tuple[ServedGroup, ...]) -> str:
    """The first :data:`SHOWN` teams and tiers served, with their GPUs, then how many more."""
    text = ", ".join(f"{g.team}/{g.tier} {number(round(g.gpu_equivalents, 1))} GPUs" for g in groups[:SHOWN])
    if len(groups) > SHOWN:
        text += f" and {len(groups) - SHOWN} more"
    return text or "-"


def render_plan(plan: HorizonPlan) -> str:
    """The plan as text: the order schedule, the rentals, each period (demand, waiting, GPUs in service,
    costs, budget, placement check), the demand served late per tier and the totals with the bound."""
    cur = plan.currency
    example = " (EXAMPLE prices)" if plan.example_prices else ""
    lines = [
        f"capacity plan: {plan.periods} periods of {plan.period_days} days from {plan.start[:10]}{example}"
        + (f"; growth: {plan.growth_description}" if plan.growth_description else "")
    ]
    lines.append("orders:" if plan.orders else "orders: none")
    for o in plan.orders:
        lines.append(
            f"  order {o.order_date} (period {o.period}), arrives {o.arrives_date} (serves from period "
            f"{o.arrives_period}): {o.count} x {o.node_type} ({o.gpus} {o.gpu_model} GPUs) at "
            f"{o.unit_cost:,.0f} {cur} each = {o.cost:,.0f} {cur}, lead time {o.lead_time_days} d"
        )
        lines.append(f"    why: {_serves(o.serves)}")
    lines.append("rent:" if plan.rents else "rent: none")
    for r in plan.rents:
        lines.append(
            f"  period {r.period}: {r.count} x {r.node_type} ({r.gpus} {r.gpu_model} GPUs, "
            f"{r.hours:,.0f} h at {r.rent_per_gpu_hour:,.2f} {cur}/GPU-h) = {r.cost:,.0f} {cur}; "
            f"serves {_serves(r.serves)}"
        )
    head = (
        f"{'period':>6} {'start':<10} {'replicas':>8} {'waiting':>7} {'GPU-h waiting':>13} {'GPUs':>6} "
        f"{'buy':>12} {'rent':>12} {'waiting cost':>12} {'budget':>12}  placement check"
    )
    lines.append(head)
    for p in plan.per_period:
        check = (
            "not checked"
            if not p.checked
            else f"{p.check_status}, "
            + ("verified" if not p.shortfall else f"SHORT by {p.shortfall} replica(s)")
        )
        budget = "-" if p.budget is None else f"{p.budget:,.0f}"
        lines.append(
            f"{p.period:>6} {p.start:<10} {p.replicas:>8,} {p.waiting:>7,} {p.waiting_gpu_hours:>13,.0f} "
            f"{p.gpus_in_service:>6,} {p.buy_cost:>12,.0f} {p.rent_cost:>12,.0f} {p.wait_cost:>12,.0f} "
            f"{budget:>12}  {check}"
        )
    lines.append(
        f"served late per tier: {'weight':>6} {'per GPU-h':>10} {'replica-periods':>15} {'GPU-hours':>12} "
        f"{'cost':>12}"
    )
    for t in plan.waiting_by_tier:
        lines.append(
            f"  {t.tier:<20} {t.weight:>6} {t.price_per_gpu_hour:>10,.2f} {t.replica_periods:>15,} "
            f"{t.gpu_hours:>12,.0f} {t.cost:>12,.0f}"
        )
    verdict = (
        "verified by placement"
        if plan.verified
        else "NOT verified by placement: see the periods"
        if any(p.checked for p in plan.per_period)
        else "not checked by placement"
    )
    bound = (
        f"lower bound {plan.lower_bound:,.0f}, gap {100 * plan.gap:.2f}%, {plan.status}"
        if plan.status in ("OPTIMAL", "FEASIBLE")
        else f"{plan.status}: no plan found in time"
    )
    lines.append(
        f"total: buy {plan.buy_cost:,.0f} + rent {plan.rent_cost:,.0f} + waiting {plan.wait_cost:,.0f} = "
        f"{plan.total_cost:,.0f} {cur} ({bound}; {verdict})"
    )
    if plan.example_prices:
        lines.append(f"PRICES ARE EXAMPLES: {plan.price_source}")
    if plan.cut_short:
        lines.append(f"cut short by the time limit: {', '.join(plan.cut_short)} (best results so far)")
    lines.extend(f"cannot be served: {u.message}" for u in plan.unservable)
    lines.extend(f"note: {n}" for n in plan.notes)
    return "\n".join(lines)


def cmd_capacity_plan(args: argparse.Namespace) -> int:
    """Grow the demand, choose orders, rentals and waiting over the periods, check each period's fleet
    by placement; all within ``--time-limit`` from the start of the command."""
    from gpuplan.planner.capacity.growth import horizon, load_growth
    from gpuplan.planner.capacity.horizon import HorizonOptions, capacity_plan
    from gpuplan.planner.capacity.node_types import load_node_types
    from gpuplan.planner.capacity.options import GapOptions

    deadline = common.command_deadline(args)
    catalog = default_catalog()
    inp = common.input_from_args(args, catalog)
    types = load_node_types(Path(args.catalog) if args.catalog else None, catalog)
    growth = load_growth(Path(args.growth))
    solve = GapOptions(
        solver=args.solver,
        time_limit_s=args.time_limit,
        milp_time_limit_s=args.time_limit,
        seed=args.seed,
        num_workers=args.workers,
        now=common.parse_now(args.now),
        ray=common.ray_from_args(args),
    )
    options = HorizonOptions(
        horizon=horizon(growth, args.growth, args.periods, args.period_days, args.budget),
        wait_price=args.wait_price,
        solve=solve,
    )
    work = deadline.reserve(min(OUTPUT_MAX_S, OUTPUT_SHARE * args.time_limit))
    with phase("capacity plan"):
        plan = capacity_plan(inp, growth, types, options, catalog=catalog, deadline=work, where=args.growth)
    print(render_plan(plan))
    if args.out:
        write_json(Path(args.out), plan)
        print(f"capacity plan written to {args.out}")
    if args.xlsx:
        from gpuplan.planner.io.exporters.workbook import about_files
        from gpuplan.planner.io.exporters.workbook.horizon_book import write_horizon_xlsx

        asked = (
            f"gpuplan capacity-plan: what to order when, rent and let wait over {plan.periods} periods of "
            f"{plan.period_days} days as demand grows (time limit {args.time_limit:g} s)"
        )
        files = {"cluster": args.cluster, "workloads": args.workloads, "policy": args.policy,
                 "node-type catalog": args.catalog, "growth": args.growth}  # fmt: skip
        write_horizon_xlsx(plan, Path(args.xlsx), about_files(asked, files))
        print(f"workbook written to {args.xlsx}")
    return 1 if plan.unservable else 0


def _count(value: str) -> int:
    """``--periods`` and ``--period-days``: a whole number above 0."""
    try:
        out = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a whole number") from None
    if out < 1:
        raise argparse.ArgumentTypeError(f"{value} is not above 0")
    return out


def _amount(value: str) -> float:
    """``--budget`` and ``--wait-price``: a finite amount, not negative."""
    try:
        out = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a number") from None
    if not 0 <= out <= MAX_PRICE:
        raise argparse.ArgumentTypeError(f"{value} is not an amount between 0 and {MAX_PRICE:g}")
    return out


def add_parsers(sub: common.Subparsers) -> None:
    """Register ``capacity-plan``."""
    p = sub.add_parser(
        "capacity-plan", help="what to order when, rent or let wait, period by period, as demand grows"
    )
    common.add_input_options(p)
    p.add_argument(
        "--catalog",
        help="purchasable node types with prices, lead times and optional rent_per_gpu_hour (default: the "
        "bundled catalog with EXAMPLE prices)",
    )
    p.add_argument(
        "--growth", required=True, help="growth file, YAML/JSON (example: data/examples/growth.yaml)"
    )
    p.add_argument("--periods", type=_count, help="periods, today first (default: the growth file's, else 4)")
    p.add_argument("--period-days", type=_count, help="days per period (default: the growth file's, else 91)")
    p.add_argument(
        "--budget",
        type=_amount,
        metavar="AMOUNT",
        help="the most spent per period on orders and rent (default: the growth file's budget, else none)",
    )
    p.add_argument(
        "--wait-price",
        type=_amount,
        default=DEFAULT_WAIT_PRICE,
        metavar="AMOUNT",
        help="price of one GPU-hour of waiting per unit of tier weight, in the catalog's currency (default "
        f"{DEFAULT_WAIT_PRICE:g}: a tier of weight 10 waits at {10 * DEFAULT_WAIT_PRICE:g} per GPU-hour)",
    )
    p.add_argument("--out", help="write the plan as JSON here")
    p.add_argument("--xlsx", help="also write the plan as a workbook")
    common.add_solve_options(
        p, 60.0, "seconds for the whole command, the MILP and the placement checks", deterministic=False
    )
    p.set_defaults(func=cmd_capacity_plan)

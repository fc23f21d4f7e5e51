"""B21: a capacity plan over four quarters against buying everything now and against buying each
quarter's gap when it appears (the myopic policy), on the bundled example and growth scenario.

The horizon plan is ``gpuplan capacity-plan``'s (:func:`planner.capacity.horizon.capacity_plan`: one
multi-period MILP choosing orders, rentals and waiting, then each quarter's fleet checked by placement).
The two policies are costed by the same MILP with their orders fixed and no rent
(:func:`~planner.capacity.horizon.buy_now`: today, what the last quarter needs;
:func:`~planner.capacity.horizon.myopic`: each quarter, what capacity-gap's purchase MILP would buy for
that quarter's demand with everything ordered before counted as there). Costs are purchases + rent +
the tier-weighted cost of waiting, at the bundled catalog's EXAMPLE prices.

Run ``python -m benchmarks.b21_horizon --help``.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pandas as pd

from benchmarks.common import markdown, timed, write
from gpuplan.models import default_catalog
from gpuplan.models.capacity import DEFAULT_WAIT_PRICE
from gpuplan.models.catalog import data_dir
from gpuplan.planner.capacity.growth import horizon, load_growth
from gpuplan.planner.capacity.horizon import HorizonOptions, buy_now, capacity_plan, myopic, prepare
from gpuplan.planner.capacity.horizon_model import HorizonSolution
from gpuplan.planner.capacity.node_types import load_node_types
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.io.files import load_input
from gpuplan.planner.pipeline.deadline import Deadline

log = logging.getLogger("benchmarks.b21")

EXAMPLES = data_dir() / "examples"

#: The table's columns: header, column, format.
COLUMNS = (
    ("policy", "policy", ""), ("orders", "orders", ""), ("buy", "buy", ",.0f"), ("rent", "rent", ",.0f"),
    ("waiting", "wait", ",.0f"), ("total", "total", ",.0f"), ("vs plan", "vs_plan", "+.1%"),
    ("status", "status", ""), ("wall s", "wall_s", ".1f"),
)  # fmt: skip


def _row(
    policy: str, sol: HorizonSolution, unit: dict[str, int], rent: dict[str, int], wall_s: float
) -> dict[str, object]:
    """One policy's costs: purchases and rent from its schedule, waiting the rest of its objective."""
    buy = sum(unit[name] * n for (name, _), n in sol.orders.items())
    rented = sum(rent[name] * n for (name, _), n in sol.rents.items())
    orders = ", ".join(
        f"q{q}: {n} x {name}" for (name, q), n in sorted(sol.orders.items(), key=lambda kv: kv[0][::-1])
    )
    return {
        "policy": policy, "orders": orders or "none", "buy": buy, "rent": rented,
        "wait": sol.objective - buy - rented, "total": sol.objective, "status": sol.status, "wall_s": wall_s,
    }  # fmt: skip


def run(time_limit: float, wait_price: float) -> pd.DataFrame:
    """The horizon plan and the two policies on the bundled example, one after the other."""
    catalog = default_catalog()
    inp = load_input(
        EXAMPLES / "cluster.yaml", EXAMPLES / "workloads.yaml", EXAMPLES / "policy.yaml", catalog
    )
    types = load_node_types(None, catalog)
    growth = load_growth(EXAMPLES / "growth.yaml")
    now = datetime.fromisoformat((EXAMPLES / "now.txt").read_text().strip())
    options = HorizonOptions(
        horizon(growth, "growth.yaml"), wait_price, GapOptions(time_limit_s=time_limit, now=now)
    )
    plan, plan_s = timed(
        lambda: capacity_plan(inp, growth, types, options, deadline=Deadline.after(time_limit))
    )
    prep = prepare(inp, growth, types, options, catalog)
    unit = {o.name: o.unit_cost for o in prep.problem.offers}
    rent = {o.name: o.rent_per_period or 0 for o in prep.problem.offers}
    now_sol, now_s = timed(lambda: buy_now(prep, inp.policy, time_limit))
    myopic_sol, myopic_s = timed(lambda: myopic(prep, inp.policy, time_limit))
    checked = [f"q{p.period}: {p.check_status}, short {p.shortfall}" for p in plan.per_period if p.checked]
    rows = [
        {
            "policy": "horizon plan (buy, rent or wait)",
            "orders": ", ".join(f"q{o.period}: {o.count} x {o.node_type}" for o in plan.orders) or "none",
            "buy": plan.buy_cost,
            "rent": plan.rent_cost,
            "wait": plan.wait_cost,
            "total": plan.total_cost,
            "status": f"{plan.status} (bound {plan.lower_bound:,.0f}; checks {'; '.join(checked)})",
            "wall_s": plan_s,
        },
        _row("buy everything now", now_sol, unit, rent, now_s),
        _row("myopic (each quarter's gap)", myopic_sol, unit, rent, myopic_s),
    ]
    frame = pd.DataFrame(rows)
    frame["vs_plan"] = frame["total"] / plan.total_cost - 1
    return frame


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--time-limit", type=float, default=60.0, help="seconds for the horizon plan (and each policy)"
    )
    parser.add_argument("--wait-price", type=float, default=DEFAULT_WAIT_PRICE)
    parser.add_argument("--out", type=Path, help="results CSV")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    load = os.getloadavg()
    frame = run(args.time_limit, args.wait_price)
    print(f"load average before the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores)")
    print(markdown(frame, COLUMNS))
    if args.out:
        write(frame, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

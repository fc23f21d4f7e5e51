"""Capacity plans over time on tiny instances whose cheapest schedule is known by hand: when an order
goes out, when renting beats buying, what a budget defers, how growth rates grow demand, and the
growth file's errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from openpyxl import load_workbook

from gpuplan.cli import main
from gpuplan.models import PlanningInput
from gpuplan.models.capacity import GrowthFile, HorizonPlan, NodeTypeCatalog
from gpuplan.models.catalog import default_catalog
from gpuplan.planner.capacity.growth import demand_per_period, horizon
from gpuplan.planner.capacity.horizon import HorizonOptions, buy_now, capacity_plan, myopic, prepare
from gpuplan.planner.capacity.options import GapOptions

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
#: A limit the tiny instances never reach, so that a loaded machine cannot change the answer.
SOLVE = GapOptions(time_limit_s=60.0, now=NOW)

#: One L4 node that none of the test demand (L40S) may use.
FLEET: dict[str, Any] = {
    "nodes": [
        {"name": "n1", "cpu_milli": 64000, "memory_mib": 262144, "gpus": [{"index": 0, "model": "L4-24GB"}]}
    ]
}


def l40s(lead_time_days: int = 0, rent: float | None = None) -> NodeTypeCatalog:
    """One hand-priced type: 4 L40S GPUs for 40 EUR, with a lead time and an optional rent per GPU-hour."""
    return NodeTypeCatalog.model_validate({"currency": "EUR", "node_types": [
        {"name": "l40s-4", "gpu_model": "L40S-48GB", "gpus": 4, "cpu_milli": 64000, "memory_mib": 524288,
         "unit_cost": 40, "lead_time_days": lead_time_days, "rent_per_gpu_hour": rent},
    ]})  # fmt: skip


def work(
    wid: str, gpus: int, team: str = "search", tier: str = "standard", replicas: int = 1
) -> dict[str, Any]:
    return {"id": wid, "team": team, "tier": tier, "gpus": gpus, "gpu_models": "L40S-48GB",
            "cpu_milli": 8000, "memory_mib": 65536, "replicas": replicas}  # fmt: skip


def planning(*workloads: dict[str, Any]) -> PlanningInput:
    return PlanningInput.model_validate({"cluster": FLEET, "workloads": list(workloads), "policy": {}})


def run(
    inp: PlanningInput, growth: dict[str, Any], types: NodeTypeCatalog, wait_price: float = 1.0
) -> HorizonPlan:
    g = GrowthFile.model_validate(growth)
    options = HorizonOptions(horizon(g, "growth"), wait_price=wait_price, solve=SOLVE)
    plan = capacity_plan(inp, g, types, options)
    assert plan.status == "OPTIMAL" and plan.lower_bound == plan.objective == plan.total_cost
    assert plan.total_cost == plan.buy_cost + plan.rent_cost + plan.wait_cost
    assert plan.verified and all(p.checked and p.shortfall == 0 for p in plan.per_period)
    return plan


def orders(plan: HorizonPlan) -> dict[tuple[str, int], int]:
    return {(o.node_type, o.period): o.count for o in plan.orders}


@pytest.mark.parametrize(("lead", "ordered"), [(30, 1), (45, 0), (0, 2)])
def test_an_order_goes_out_one_lead_time_before_its_demand(lead: int, ordered: int) -> None:
    """Two 2-GPU replicas from period 2 (day 60), periods of 30 days: a 30-day lead time orders at the
    start of period 1, a 45-day one must order at period 0 (it arrives on day 45, serving from day 60),
    none orders at period 2 itself. One 4-GPU node, 40 EUR, nothing waits."""
    plan = run(planning(work("svc", 2)), {"periods": 3, "period_days": 30, "workloads": {"svc": [0, 0, 2]}},
               l40s(lead))  # fmt: skip
    assert orders(plan) == {("l40s-4", ordered): 1}
    (o,) = plan.orders
    assert o.arrives_period == 2 and o.order_date == (NOW + timedelta(days=30 * ordered)).date().isoformat()
    assert o.arrives_date == (NOW + timedelta(days=30 * ordered + lead)).date().isoformat()
    assert (plan.buy_cost, plan.rent_cost, plan.wait_cost) == (40, 0, 0)
    assert [(s.team, s.tier, s.gpu_equivalents) for s in o.serves] == [("search", "standard", 4.0)]
    assert [p.gpus_in_service for p in plan.per_period] == [1, 1, 5]


def test_rent_beats_buy_for_a_one_period_burst() -> None:
    """Days of 24 h, a 4-GPU node rents at 0.25 EUR per GPU-hour = 24 EUR a period, or costs 40 to buy
    (no lead time). A steady 4-GPU replica is bought (3 x 24 = 72 > 40); a burst of one period is
    rented (24 < 40): 64 EUR, where buying both would cost 80."""
    inp = planning(work("steady", 4), work("burst", 4))
    plan = run(inp, {"periods": 3, "period_days": 1, "workloads": {"burst": [0, 1, 0]}}, l40s(0, rent=0.25))
    assert orders(plan) == {("l40s-4", 0): 1}
    assert [(r.period, r.node_type, r.count, r.cost, r.hours) for r in plan.rents] == [
        (1, "l40s-4", 1, 24, 24)
    ]
    assert (plan.buy_cost, plan.rent_cost, plan.wait_cost, plan.total_cost) == (40, 24, 0, 64)
    assert [(p.buy_cost, p.rent_cost) for p in plan.per_period] == [(40, 0), (0, 24), (0, 0)]


def test_a_budget_defers_a_purchase_to_a_later_period() -> None:
    """Four 2-GPU replicas need two 4-GPU nodes (80 EUR). Without a budget both are bought at once; with
    40 EUR per period the second waits for period 1, and two replicas wait period 0: 2 replicas x 2 GPUs
    x 720 h x (weight 3 x 1 EUR) = 8,640 EUR of waiting."""
    inp = planning(work("svc", 2, replicas=4))
    free = run(inp, {"periods": 3, "period_days": 30}, l40s())
    assert orders(free) == {("l40s-4", 0): 2} and free.total_cost == 80
    capped = run(inp, {"periods": 3, "period_days": 30, "budget": 40}, l40s())
    assert orders(capped) == {("l40s-4", 0): 1, ("l40s-4", 1): 1}
    assert [(p.waiting, p.waiting_gpu_hours, p.wait_cost) for p in capped.per_period] == [
        (2, 2880, 8640), (0, 0, 0), (0, 0, 0),
    ]  # fmt: skip
    assert capped.total_cost == 80 + 8640 and all(p.budget == 40 for p in capped.per_period)
    standard = next(t for t in capped.waiting_by_tier if t.tier == "standard")
    assert (standard.replica_periods, standard.gpu_hours, standard.cost, standard.price_per_gpu_hour) == (
        2, 2880, 8640, 3.0,
    )  # fmt: skip


def test_growth_rates_give_the_hand_computed_demand() -> None:
    """vision +50% every period, background tier +0%, +100%, +50% (compounding; both apply to c), explicit
    counts for d: a (vision, standard) 4 -> 6 -> 9 -> 13.5, rounded half up to 14; b (nlp, background)
    2 -> 2 -> 4 -> 6; c (vision, background) 2 -> 3 -> 9 -> 20.25 -> 20; d as listed, absent in period 1."""
    inp = planning(
        work("a", 1, team="vision", replicas=4), work("b", 1, team="nlp", tier="background", replicas=2),
        work("c", 1, team="vision", tier="background", replicas=2), work("d", 1, team="vision"),
    )  # fmt: skip
    growth = GrowthFile.model_validate({
        "teams": {"vision": 0.5}, "tiers": {"background": [0.0, 1.0, 0.5]}, "workloads": {"d": [1, 0, 3, 1]},
    })  # fmt: skip
    per = demand_per_period(inp, growth, 4, "growth", default_catalog())
    counts = [{w.id: w.replicas for w in p.workloads} for p in per]
    assert counts == [
        {"a": 4, "b": 2, "c": 2, "d": 1},
        {"a": 6, "b": 2, "c": 3},
        {"a": 9, "b": 4, "c": 9, "d": 3},
        {"a": 14, "b": 6, "c": 20, "d": 1},
    ]


def test_the_policies_the_benchmark_compares_cost_no_less() -> None:
    """Buying now what the last period needs, and buying each period's gap when it appears, are costed by
    the same MILP with their orders fixed: never below the plan's optimum. Demand from period 1 with a
    30-day lead: buying now serves it in time (40); the myopic policy orders at period 1 and arrives at
    period 2, so period 1 waits."""
    inp = planning(work("svc", 2, replicas=2))
    g = GrowthFile.model_validate({"periods": 3, "period_days": 30, "workloads": {"svc": [0, 2, 2]}})
    options = HorizonOptions(horizon(g, "g"), wait_price=1.0, solve=SOLVE)
    prep = prepare(inp, g, l40s(30), options, default_catalog())
    now, late = buy_now(prep, inp.policy, 20), myopic(prep, inp.policy, 20)
    assert (now.orders, now.objective) == ({("l40s-4", 0): 1}, 40)
    assert late.orders == {("l40s-4", 1): 1} and late.objective == 40 + 2 * 2 * 720 * 3
    assert run(inp, g.model_dump(), l40s(30)).total_cost == 40


def test_cli_writes_the_plan_json_and_workbook(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = cli_files(tmp_path, {"periods": 3, "period_days": 30, "workloads": {"svc": [0, 0, 2]}})
    out, book = tmp_path / "plan.json", tmp_path / "plan.xlsx"
    assert main([*files, "--out", str(out), "--xlsx", str(book), "--wait-price", "1"]) == 0
    text = capsys.readouterr().out
    assert "order 2026-12-29 (period 1), arrives 2027-01-28 (serves from period 2): 1 x l40s-4" in text
    assert "total: buy 40 + rent 0 + waiting 0 = 40 EUR (lower bound 40, gap 0.00%, OPTIMAL" in text
    plan = HorizonPlan.model_validate_json(out.read_text())
    assert plan.orders[0].count == 1 and plan.verified
    assert load_workbook(book).sheetnames == ["Cover", "Orders", "Rent", "Periods", "Waiting", "Details"]


def cli_files(tmp_path: Path, growth: Any) -> list[str]:
    """The command line of a capacity plan of the tiny instance, with ``growth`` as its growth file."""
    c, w, t, g = (tmp_path / f for f in ("c.yaml", "w.yaml", "t.yaml", "g.yaml"))
    c.write_text(yaml.safe_dump(FLEET))
    w.write_text(yaml.safe_dump({"workloads": [work("svc", 2)]}))
    t.write_text(yaml.safe_dump(l40s(30).model_dump(mode="json")))
    g.write_text(yaml.safe_dump(growth))
    return ["capacity-plan", "--cluster", str(c), "--workloads", str(w), "--catalog", str(t),
            "--growth", str(g), "--now", NOW.isoformat(), "--time-limit", "30"]  # fmt: skip


@pytest.mark.parametrize(
    ("growth", "field"),
    [
        ({"teams": {"search": "lots"}}, "teams.search"),
        ({"periods": 4, "tiers": {"standard": [0.1]}}, "tiers.standard"),
        ({"workloads": {"nope": [1, 1, 1, 1]}}, "workloads.nope"),
        ({"periods": 4, "workloads": {"svc": [1, 2]}}, "workloads.svc"),
        ({"budget": [1, 2]}, "budget"),
        ({"period_days": 0}, "period_days"),
        ({"growth": {"search": 1}}, "unknown field growth"),
    ],
)
def test_a_bad_growth_file_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], growth: dict[str, Any], field: str
) -> None:
    assert main(cli_files(tmp_path, growth)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("gpuplan: error: ") and field in err, err

"""The fairness floor's rule on hand-computed figures, and the throughput-vs-fairness frontier on a
hand-made instance: monotone, its end points the plain plans without and with the floor, each point
validated, written as JSON and as a workbook sheet with its chart."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

import pytest
from openpyxl import load_workbook

from gpuplan.models import Policy, Workload
from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.rules.fairness import (
    fairness_level,
    floor_units,
    jain_index,
    max_min_entitlements,
    shortfall_steps,
)
from gpuplan.planner.capacity.node_types import load_node_types
from gpuplan.planner.io.exporters.workbook.frontier_sheet import TITLE, write_frontier_sheet
from gpuplan.planner.planning import make_plan
from gpuplan.planner.policy.cost import Prices, Run
from gpuplan.planner.policy.frontier import frontier, solves_needed
from tests._factories import node, planning_input

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def test_max_min_entitlements_water_fill_by_weight() -> None:
    # 10 units, a asks 2: a gets 2, b and c share the 8 left, 4 each; with b weighing 2, b gets 16/3.
    one = {"a": Fraction(1), "b": Fraction(1), "c": Fraction(1)}
    assert max_min_entitlements(10, {"a": 2, "b": 10, "c": 10}, one) == {"a": 2, "b": 4, "c": 4}
    two = {**one, "b": Fraction(2)}
    assert max_min_entitlements(10, {"a": 2, "b": 10, "c": 10}, two) == {
        "a": 2,
        "b": Fraction(16, 3),
        "c": Fraction(8, 3),
    }
    # Enough for everyone: each gets what it asks.
    assert max_min_entitlements(10, {"a": 2, "b": 3}, one) == {"a": 2, "b": 3}


def test_floor_units_lack_and_the_fairness_measures() -> None:
    assert floor_units(Fraction(1, 2), Fraction(7, 2)) == 2  # ceil(7/4)
    assert floor_units(Fraction(1), Fraction(4)) == 4
    assert shortfall_steps(floor=5, served=2, unit=2) == 2  # 3 units short: 2 whole steps of 2
    assert shortfall_steps(floor=5, served=5, unit=2) == 0
    assert shortfall_steps(floor=5, served=9, unit=2) == 0
    entitled = {"a": Fraction(2), "b": Fraction(4)}
    assert fairness_level({"a": 2, "b": 2}, entitled) == 0.5
    assert jain_index({"a": 2, "b": 4}, entitled) == 1.0
    # Shares 1 and 0.5: (1.5)^2 / (2 x 1.25) = 0.9.
    assert jain_index({"a": 2, "b": 2}, entitled) == pytest.approx(0.9)


def _instance(floor: float | None = None) -> PlanningInput:
    # 4 L40S GPUs. Team a (standard) asks 4, team b (background) 2: the queue alone serves a first; their
    # max-min fair entitlements are 2 each.
    return planning_input(
        [node("n", model="L40S-48GB", count=4)],
        [
            Workload(id="a-job", team="a", tier="standard", gpus=1, replicas=4),
            Workload(id="b-job", team="b", tier="background", gpus=1, replicas=2),
        ],
        Policy(fair_floor=floor),
    )


def _run(seconds: float = 2.0) -> Run:
    return Run("cpsat", 0, 1, True, NOW, default_catalog(), seconds)


def test_the_floor_serves_the_lower_tier_up_to_its_entitlement() -> None:
    # Without a floor, a's 4 replicas run and b's 2 wait (1 x 100 x 8 each = 1,600). At floor 1, b holds 2
    # GPUs: 2 of a's wait (3 x 100 x 8 each = 4,800); at floor 0.5, b holds 1: 2,400 + 800 = 3,200.
    for floor, expected, b_placed in ((None, 1600, 0), (1.0, 4800, 2), (0.5, 3200, 1)):
        plan = make_plan(_instance(floor), now=NOW, time_limit_s=5, deterministic=True, num_workers=1)
        assert plan.status.value == "OPTIMAL"
        assert plan.solver.objective == expected
        assert sum(a.workload == "b-job" for a in plan.assignments) == b_placed


def test_the_frontier_is_monotone_and_its_end_points_are_the_plain_plans(tmp_path: Path) -> None:
    inp = _instance()
    run = _run()
    result = frontier(inp, run, Prices.of(load_node_types(None), default_catalog()), levels=[0.25, 0.5, 1.0])
    points = result.points
    assert [p.level for p in points] == [0.0, 0.25, 0.5, 1.0]
    assert all(p.reached for p in points)
    objectives = [p.solve.objective or 0.0 for p in points]
    # At 0.25 and 0.5 b holds one whole GPU (0.5 or more of 2): one of a's and one of b's wait.
    assert objectives == sorted(objectives) == [1600, 3200, 3200, 4800]
    assert all(p.fairness is not None and p.fairness >= p.level for p in points)
    # The first point is the plain plan, the last the plain plan with the floor, both as make_plan makes them.
    plain = run.plan(inp)
    floored = run.plan(_instance(1.0))
    assert points[0].solve.objective == plain.solver.objective and points[0].current
    assert points[-1].solve.objective == floored.solver.objective
    assert points[-1].fairness == 1.0 and points[0].fairness == 0.0
    # The price of fairness: b's GPUs replace a's one for one, at the same prices (both L40S).
    assert points[-1].price_queue_term == 3200 and points[-1].price_gpus_allocated == 0
    assert {t.team: t.allocated for t in points[-1].teams} == {"a": 2, "b": 2}
    assert {t.team: t.entitlement for t in points[-1].teams} == {"a": 2, "b": 2}
    # Each point's plan is a validated plan (make_plan validates); the bound holds below every objective.
    assert all(
        p.solve.best_bound is not None and p.solve.best_bound <= (p.solve.objective or 0) for p in points
    )
    # Each floor's bound meets its point's objective: proved, point by point.
    assert [p.solve.status for p in points] == ["OPTIMAL"] * 4 and all(p.solve.gap == 0 for p in points)
    write_frontier_sheet(result, tmp_path / "f.xlsx")
    sheet = load_workbook(tmp_path / "f.xlsx")[TITLE]
    assert sheet.max_row == 1 + len(points) and len(sheet._charts) == 1


def test_the_sweep_finds_its_own_levels_and_a_floor_no_plan_reaches_is_said_so() -> None:
    # 3 GPUs: a (standard) asks 3, b (background) 1 and a half-GPU: entitlements a 1.5... The sweep starts
    # at the efficient plan's fairness and probes up to 1.
    inp = planning_input(
        [node("n", model="L40S-48GB", count=3)],
        [
            Workload(id="a-job", team="a", tier="standard", gpus=1, replicas=3),
            Workload(id="b-job", team="b", tier="background", gpus=1, replicas=2),
        ],
        Policy(),
    )
    result = frontier(inp, _run(), None, points=4, probes=2)
    reached = [p for p in result.points if p.reached]
    assert reached[0].level == 0 and len(reached) >= 2
    objectives = [p.solve.objective or 0.0 for p in reached]
    assert objectives == sorted(objectives)
    assert all(p.money_per_hour is None and p.money_note == "no node-type catalog" for p in result.points)
    # Entitlements 1.5 each: a whole-GPU plan gives b 1 (2/3) or 2 (a then 1, 2/3): 2/3 is the most.
    assert max(p.fairness or 0 for p in reached) == pytest.approx(2 / 3)
    assert all(not p.reached for p in result.points if p.level > 2 / 3 + 1e-9)
    assert solves_needed(4, 2, None, current_floor=False) == 1 + 1 + 2 + 2


def _args() -> list[str]:
    data = Path(__file__).resolve().parents[3] / "data" / "examples"
    return [sys.executable, "-m", "gpuplan", "frontier", "--cluster", str(data / "cluster.yaml"),
            "--workloads", str(data / "workloads.yaml"), "--policy", str(data / "policy.yaml"),
            "--now", "2026-11-29T12:00:00Z"]  # fmt: skip


def test_gpuplan_frontier_refuses_a_bad_level_in_one_line() -> None:
    bad = subprocess.run([*_args(), "--levels", "0.5,2"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2
    assert (
        bad.stderr.strip()
        .splitlines()[-1]
        .endswith("--levels: 2 is outside (0, 1]; a floor is a share of each team's entitlement")
    )


@pytest.mark.slow
def test_gpuplan_frontier_writes_every_point_as_json(tmp_path: Path) -> None:
    out = tmp_path / "frontier.json"
    done = subprocess.run(
        [*_args(), "--levels", "0.73", "--time-limit", "6", "--deterministic", "--out", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    points = json.loads(out.read_text())["points"]
    assert [p["level"] for p in points][:2] == [0.0, 0.73]
    for p in points:
        assert {"level", "reached", "solve", "tally", "teams"} <= p.keys()
        assert {"objective", "best_bound"} <= p["solve"].keys()


def test_a_floor_the_efficient_plan_already_meets_is_its_point_and_still_asked() -> None:
    # Both teams get all they ask (2 GPUs each of 4): fairness 1; the floor 0.5 asked needs no plan of
    # its own and is the efficient plan, marked as asked.
    inp = planning_input(
        [node("n", model="L40S-48GB", count=4)],
        [
            Workload(id="a-job", team="a", gpus=1, replicas=2),
            Workload(id="b-job", team="b", gpus=1, replicas=2),
        ],
        Policy(),
    )
    result = frontier(inp, _run(), None, levels=[0.5])
    assert [(p.level, p.asked, p.reached, p.fairness) for p in result.points] == [
        (0.0, True, True, 1.0),
        (0.5, True, True, 1.0),
    ]
    assert result.points[1].solve.objective == result.points[0].solve.objective == 0

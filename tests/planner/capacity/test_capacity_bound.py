"""The capacity gap's lower bound holds for the whole question (the cheapest purchase under which all
demand meets its tier targets, whatever the placement of the fleet), and the numbers a finance team
reads: unit prices, whole counts, low-use notes, scenarios whose demand is their inputs'.

Every expected number is worked out by hand on fleets of one or two nodes."""

from __future__ import annotations

import csv
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.cli import main
from gpuplan.cli.capacity import number, render_gap
from gpuplan.models import PlanningInput, default_catalog
from gpuplan.models.capacity import (
    CapacityReport,
    GapLine,
    Growth,
    NodeTypeCatalog,
    Scenario,
    ScenarioFile,
)
from gpuplan.models.plan import PlanStatus
from gpuplan.planner.capacity.demand import gap_demand, with_predictions
from gpuplan.planner.capacity.gap import capacity_gap
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.capacity.scenarios import policy_words, render_table, run_scenarios, scenario_input
from gpuplan.planner.io.exporters.workbook import build_tables, write_csv
from gpuplan.planner.pipeline.deadline import Deadline
from gpuplan.planner.planning import make_plan
from tests._factories import node_data

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
#: Like-for-like; a limit the tiny instances never reach.
OPTS = GapOptions(time_limit_s=60.0, milp_time_limit_s=20.0, now=NOW)

#: Hand-priced node types: 4 L40S (40), 8 L40S (70), 8 A100 on NVSwitch (150), 8 H100 on NVSwitch (100).
TYPES: dict[str, Any] = {
    "currency": "EUR",
    "node_types": [
        {"name": "l40s-4", "gpu_model": "L40S-48GB", "gpus": 4, "cpu_milli": 64000, "memory_mib": 524288,
         "unit_cost": 40},
        {"name": "l40s-8", "gpu_model": "L40S-48GB", "topology": "pcie-8x-l40s", "cpu_milli": 128000,
         "memory_mib": 1048576, "unit_cost": 70},
        {"name": "a100-8", "gpu_model": "A100-SXM4-80GB", "topology": "dgx-a100", "cpu_milli": 256000,
         "memory_mib": 1048576, "unit_cost": 150},
        {"name": "h100-8", "gpu_model": "H100-80GB", "topology": "dgx-h100", "cpu_milli": 224000,
         "memory_mib": 2097152, "unit_cost": 100},
    ],
}  # fmt: skip


def types(*names: str, **prices: float) -> NodeTypeCatalog:
    """The hand-priced catalog restricted to ``names``, with ``prices`` per node type."""
    chosen = [{**t, "unit_cost": prices.get(t["name"].replace("-", "_"), t["unit_cost"])}
              for t in TYPES["node_types"] if t["name"] in names]  # fmt: skip
    return NodeTypeCatalog.model_validate({**TYPES, "node_types": chosen})


def planning(workloads: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> PlanningInput:
    return PlanningInput.model_validate({"cluster": {"nodes": nodes}, "workloads": workloads})


def held(wid: str, gpus: int, where: str) -> dict[str, Any]:
    """A running replica that may not move (so no plan can pack around it)."""
    return {"id": wid, "team": "infra", "gpus": gpus, "gpu_models": "L40S-48GB", "running_on": where,
            "disruptible": False, "cpu_milli": 1000, "memory_mib": 4096}  # fmt: skip


# --- the lower bound ------------------------------------------------------------------------------


def test_demand_the_fleet_hosts_only_when_perfectly_packed_has_a_zero_bound_and_is_not_optimal() -> None:
    """Two 4-GPU L40S nodes, each with 2 GPUs held by work that may not move; a 4-GPU replica waits. Its
    real answer is one l40s-4 (40): no node has 4 free GPUs. Pooled, the fleet has 8 GPUs for 2 + 2 + 4:
    perfectly packed it would host it, so the bound is 0, the gap 100% and the status FEASIBLE."""
    nodes = [node_data("n1", "L40S-48GB", 4), node_data("n2", "L40S-48GB", 4)]
    work = [held("a", 2, "n1:0,1"), held("b", 2, "n2:0,1"),
            {"id": "big", "team": "vision", "gpus": 4, "gpu_models": "L40S-48GB", "cpu_milli": 8000,
             "memory_mib": 65536}]  # fmt: skip
    gap = capacity_gap(planning(work, nodes), types("l40s-4", "l40s-8"), OPTS)
    assert [(p.node_type, p.count) for p in gap.purchases] == [("l40s-4", 1)] and gap.verified
    assert (gap.cost, gap.lower_bound, gap.gap, gap.solver_status) == (40, 0, 1.0, "FEASIBLE")
    # The purchase MILP alone is optimal for what this plan left waiting; that is not the question.
    assert (gap.purchase_lower_bound, gap.purchase_status) == (40, "OPTIMAL")
    assert gap.bound_note.startswith(
        "lower bound 0 EUR: the existing fleet could host this demand if perfectly packed; the purchase "
        "covers what a "
    )
    text = render_gap(gap)
    assert (
        "total: 1 nodes, 4 GPUs, 40 EUR (lower bound 0, gap 100.00%, FEASIBLE; verified by placement)" in text
    )
    assert (
        "purchase by milp-highs (OPTIMAL): at least 40 EUR for the demand this fleet plan left waiting"
        in text
    )


def test_a_queue_optimal_plan_need_not_leave_the_cheapest_demand_waiting() -> None:
    """One free A100 GPU; 'x' (latency-sensitive, A100 or H100) and 'y' (background, A100 only) wait.
    The plan, optimal for queue time, gives the A100 to 'x' and buys an A100 node for 'y' (150); giving
    it to 'y' and an H100 node to 'x' costs 100. The bound says 100: even with an optimal plan and an
    optimal purchase MILP, the answer is not proved optimal."""
    nodes = [node_data("n1", "A100-SXM4-80GB", 1)]
    job = {"gpus": 1, "cpu_milli": 8000, "memory_mib": 65536}
    work = [{"id": "x", "tier": "latency-sensitive", "gpu_models": ["A100-SXM4-80GB", "H100-80GB"], **job},
            {"id": "y", "tier": "background", "gpu_models": "A100-SXM4-80GB", **job}]  # fmt: skip
    inp = planning(work, nodes)
    plan = make_plan(inp, now=NOW, time_limit_s=10.0)
    assert plan.status is PlanStatus.OPTIMAL and [a.workload for a in plan.assignments] == ["x"]
    gap = capacity_gap(inp, types("a100-8", "h100-8"), OPTS, baseline=plan)
    assert [(p.node_type, p.count) for p in gap.purchases] == [("a100-8", 1)]
    assert (gap.cost, gap.purchase_lower_bound, gap.purchase_status) == (150, 150, "OPTIMAL")
    assert (gap.lower_bound, gap.solver_status) == (100, "FEASIBLE")
    assert gap.gap == pytest.approx(50 / 150, abs=1e-6)
    assert "at least this much must be bought (the cheapest such purchase: 1 x h100-8)" in gap.bound_note


def test_a_class_the_fleet_has_no_capacity_for_is_bounded_by_the_nodes_it_needs() -> None:
    """The fleet has one busy A100; six L40S GPUs in pairs wait. No fleet GPU can serve them, so the
    bound is the cheapest purchase for them alone, one l40s-8 (70), which the run finds: OPTIMAL."""
    nodes = [node_data("n1", "A100-SXM4-80GB", 1)]
    work = [{"id": "busy", "gpus": 1, "running_on": "n1:0", "cpu_milli": 1000, "memory_mib": 4096},
            {"id": "emb", "team": "search", "replicas": 3, "gpus": 2, "gpu_models": "L40S-48GB",
             "cpu_milli": 8000, "memory_mib": 65536}]  # fmt: skip
    gap = capacity_gap(planning(work, nodes), types("l40s-4", "l40s-8", "a100-8"), OPTS)
    assert [(p.node_type, p.count) for p in gap.purchases] == [("l40s-8", 1)]
    assert (gap.cost, gap.lower_bound, gap.gap, gap.solver_status) == (70, 70, 0, "OPTIMAL")
    assert gap.bound_note.startswith("proved: no purchase under which all demand meets its tier targets")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    running=st.lists(st.sampled_from([1, 2, 3]), min_size=0, max_size=2),
    waiting=st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=4),
    price4=st.integers(min_value=1, max_value=100),
    price8=st.integers(min_value=1, max_value=200),
)
def test_the_bound_is_never_above_a_verified_purchase(
    running: list[int], waiting: list[int], price4: int, price8: int
) -> None:
    """Random small L40S fleets (one 4-GPU node per held replica, or one idle node) and waiting whole-GPU
    replicas: the bound lies between the cheapest cover of the pooled GPU deficit (worked out here) and
    the cost of any verified purchase, and OPTIMAL means they meet."""
    nodes = [node_data(f"n{i}", "L40S-48GB", 4) for i in range(max(1, len(running)))]
    work = [held(f"r{i}", g, f"n{i}:" + ",".join(map(str, range(g)))) for i, g in enumerate(running)]
    work += [{"id": f"w{i}", "gpus": g, "gpu_models": "L40S-48GB", "cpu_milli": 1000, "memory_mib": 4096}
             for i, g in enumerate(waiting)]  # fmt: skip
    catalog = types("l40s-4", "l40s-8", l40s_4=price4, l40s_8=price8)
    gap = capacity_gap(planning(work, nodes), catalog, OPTS)
    deficit = max(0, sum(running) + sum(waiting) - 4 * len(nodes))
    cover = min(n4 * price4 + n8 * price8 for n4 in range(deficit // 4 + 2) for n8 in range(deficit // 8 + 2)
                if 4 * n4 + 8 * n8 >= deficit)  # fmt: skip
    assert gap.lower_bound >= cover - 1e-6
    if gap.verified:
        assert gap.lower_bound <= gap.cost + 1e-6
    assert (gap.solver_status == "OPTIMAL") == (gap.verified and gap.cost - gap.lower_bound <= 0.01)


# --- the demand: predicted starts the time limit cut short ---------------------------------------


def test_the_gap_demand_does_not_depend_on_how_far_the_predicted_starts_got() -> None:
    """A replica that waits for a GPU freed in 30 minutes starts within its tier's hour: not gap
    demand. When the fleet plan's predicted-start pass was cut before it, the gap completes the pass,
    and the demand is the same."""
    started = NOW - timedelta(minutes=30)
    work = [{"id": "run", "gpus": 1, "running_on": "n1:0", "duration_s": 3600,
             "started_at": started.isoformat(), "disruptible": False},
            {"id": "next", "tier": "standard", "gpus": 1}]  # fmt: skip
    inp = planning(work, [node_data("n1", "L4-24GB", 1)])
    plan = make_plan(inp, now=NOW, time_limit_s=5.0)
    (waits,) = plan.unplaced
    assert waits.predicted_start == (NOW + timedelta(minutes=30)).isoformat()
    assert gap_demand(plan, inp, NOW) == []
    cut = plan.model_copy(
        update={
            "unplaced": (waits.model_copy(update={"predicted_start": None}),),
            "provenance": {**plan.provenance, "cut_short": ["predicted starts"]},
        }
    )
    assert [u.workload for u in gap_demand(cut, inp, NOW)] == ["next"]
    completed, done = with_predictions(cut, inp, default_catalog(), NOW, Deadline.after(10.0))
    assert done and completed.unplaced[0].predicted_start == waits.predicted_start
    assert gap_demand(completed, inp, NOW) == []
    assert capacity_gap(inp, types("l40s-4"), OPTS, baseline=cut).demand_replicas == 0


# --- what finance reads ---------------------------------------------------------------------------


def test_numbers_read_as_counts_and_shares() -> None:
    assert [number(v) for v in (7.0, 7, 2.5, 3.856, 1234.0, 0.0)] == ["7", "7", "2.5", "3.86", "1,234", "0"]


def test_the_csv_gives_whole_nodes_and_gpus_and_the_unit_price(tmp_path: Path) -> None:
    """Three 2-GPU L40S jobs of two teams on one l40s-8 (70): the purchase row has 1 node, 8 GPUs and
    the unit price 70; the teams' rows have their GPU shares (8 x 4/6 and 8 x 2/6) and no node count."""
    work = [{"id": "emb", "team": "search", "replicas": 2, "gpus": 2, "gpu_models": "L40S-48GB",
             "cpu_milli": 8000, "memory_mib": 65536},
            {"id": "rank", "team": "ads", "gpus": 2, "gpu_models": "L40S-48GB", "cpu_milli": 8000,
             "memory_mib": 65536}]  # fmt: skip
    inp = planning(work, [node_data("n1", "L4-24GB", 1)])
    plan = make_plan(inp, now=NOW, time_limit_s=3.0)
    gap = capacity_gap(inp, types("l40s-4", "l40s-8"), OPTS, baseline=plan)
    (p,) = gap.purchases
    assert (p.node_type, p.count, p.unit_cost, p.cost, p.gpus, p.use_note) == ("l40s-8", 1, 70, 70, 8, "")
    teams = {line.key: line for line in gap.by_team}
    assert teams["search"].nodes_added == 1 and teams["search"].node_share == pytest.approx(2 / 3, abs=1e-4)
    tables = build_tables(plan, default_catalog(), inp, CapacityReport(gap=gap), types("l40s-8"))
    write_csv(tables, tmp_path)
    with (tmp_path / "CapacityGap.csv").open() as f:
        rows = list(csv.DictReader(f))
    purchase = next(r for r in rows if r["section"] == "purchase")
    total = next(r for r in rows if r["section"] == "total")
    assert (purchase["nodes_added"], purchase["gpus_added"], purchase["unit_cost"]) == ("1", "8", "70.0")
    assert (total["nodes_added"], total["gpus_added"]) == ("1", "8")
    shares = {r["key"]: (r["nodes_added"], r["gpus_charged"]) for r in rows if r["section"] == "team"}
    assert shares == {"ads": ("", "2.6667"), "search": ("", "5.3333")}
    bound = next(r for r in rows if r["section"] == "bound")
    assert bound["cost"] == "70.0" and bound["detail"].startswith("proved:")


def test_a_gap_file_of_old_keeps_its_node_share() -> None:
    """Before ``node_share`` existed the share was in ``nodes_added``: it moves, and the count becomes
    the fewest nodes that hold it."""
    old = GapLine.model_validate({"key": "vision", "replicas": 2, "nodes_added": 0.48})
    assert (old.nodes_added, old.node_share) == (1, 0.48)
    assert GapLine.model_validate({"key": "ads", "replicas": 1, "nodes_added": 2.0}).nodes_added == 2


def test_a_re_partition_that_serves_no_gap_replica_is_not_proposed() -> None:
    """Two idle A100s cut into seven 1g slices each, one 3g.40gb replica waiting: the re-plan may
    re-partition one GPU or both; only the GPU that serves the replica is proposed."""
    sevens = [("1g.10gb", s) for s in range(7)]
    nodes = [node_data("n1", "A100-SXM4-80GB", 2, mig={0: sevens, 1: sevens})]
    work = [{"id": "infer", "team": "nlp", "mig_profile": "3g.40gb", "cpu_milli": 4000, "memory_mib": 16384}]
    inp = PlanningInput.model_validate(
        {"cluster": {"nodes": nodes}, "workloads": work, "policy": {"mig": {"allow_repartition": False}}}
    )
    gap = capacity_gap(inp, types("a100-8"), OPTS)
    assert gap.served_by_repartition == 1 and gap.purchases == ()
    assert gap.repartitions and all(r.serves for r in gap.repartitions)
    assert "frees room for -" not in render_gap(gap)


def test_a_scenarios_demand_is_its_inputs_demand() -> None:
    """Growth x2 of a 3-replica team gives 6; the other team's 1 stays: 7 replicas asked, as its
    inputs have; the baseline scenario says it is the baseline."""
    work = [{"id": "emb", "team": "search", "replicas": 3, "gpus": 1, "gpu_models": "L40S-48GB",
             "cpu_milli": 1000, "memory_mib": 4096},
            {"id": "rank", "team": "ads", "gpus": 1, "gpu_models": "L40S-48GB", "cpu_milli": 1000,
             "memory_mib": 4096}]  # fmt: skip
    inp = planning(work, [node_data("n1", "L4-24GB", 1)])
    grown = Scenario(name="x2", growth=Growth(teams={"search": 2.0}))
    policy = Scenario(name="mig", policy={"mig": {"allow_repartition": True}})
    file = ScenarioFile(scenarios=(Scenario(name="today"), grown, policy))
    results = run_scenarios(inp, types("l40s-4"), file, Path(), OPTS, default_catalog(),
                            deadline=Deadline.after(60.0))  # fmt: skip
    asked = {r.name: r.gap.input_replicas for r in results}
    assert asked == {"today": 4, "x2": 7, "mig": 4}
    assert asked["x2"] == sum(w.replicas for w in scenario_input(inp, grown, default_catalog()).workloads)
    assert [r.gap.demand_replicas for r in results] == [4, 7, 4]


def test_the_scenario_table_reads_in_words() -> None:
    work = [{"id": "emb", "team": "search", "gpus": 1, "gpu_models": "L40S-48GB", "cpu_milli": 1000,
             "memory_mib": 4096}]  # fmt: skip
    inp = planning(work, [node_data("n1", "L4-24GB", 1)])
    base = capacity_gap(inp, types("l40s-4"), OPTS)
    short = base.model_copy(update={"verified": False, "still_unplaced": 2, "lower_bound": 80.0})
    from gpuplan.models.capacity import ScenarioResult

    table = render_table(
        (ScenarioResult(name="today", vs_baseline="this is the baseline: the inputs as given", gap=base),
         ScenarioResult(name="more", gap=short))
    )  # fmt: skip
    lines = {line[:24].strip(): line[24:].split() for line in table.splitlines()[1:15]}
    assert lines["verified by placement"] == ["yes", "NO"]
    assert lines["cost, EUR"] == ["40", "40"] and lines["gap to the bound"] == ["0.0%", "-"]
    assert lines["nodes to buy"] == ["1", "1"] and lines["replicas asked"] == ["1", "1"]
    assert "True" not in table and "False" not in table and "_" not in table.splitlines()[3]
    assert "more [NOT verified (2 waiting)]" in table
    assert policy_words("mig.allow_repartition", True) == "MIG re-partitioning allowed"
    assert policy_words("sharing.allow_change", False) == "sharing-mode changes forbidden"
    assert policy_words("disruption.max_moves", 3) == "policy disruption max moves set to 3"


def test_cli_min_use_is_a_share_and_bad_values_name_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 1-GPU job on a 4-GPU node uses 25%: flagged at --min-use 0.3, not at the default 0.25."""
    import yaml

    c, w, t = tmp_path / "c.yaml", tmp_path / "w.yaml", tmp_path / "t.yaml"
    c.write_text(yaml.safe_dump({"nodes": [node_data("n1", "L4-24GB", 1)]}))
    emb = {"id": "emb", "gpus": 1, "gpu_models": "L40S-48GB", "cpu_milli": 1000, "memory_mib": 4096}
    w.write_text(yaml.safe_dump({"workloads": [emb]}))
    t.write_text(yaml.safe_dump({**TYPES, "node_types": TYPES["node_types"][:1]}))
    base = ["capacity-gap", "--cluster", str(c), "--workloads", str(w), "--catalog", str(t), "--now",
            NOW.isoformat(), "--time-limit", "20"]  # fmt: skip
    assert main(base) == 0
    assert "LOW USE" not in capsys.readouterr().out
    assert main([*base, "--min-use", "0.3"]) == 0
    out = capsys.readouterr().out
    assert (
        "    LOW USE: serves 1 of 4 GPUs (25%, below the 30% minimum use): consider waiting, renting or "
        "re-partitioning" in out
    )
    with pytest.raises(SystemExit) as exit_:
        main([*base, "--min-use", "1.5"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --min-use: 1.5 is not a share between 0 and 1" in err

"""Capacity plans a finance team can sign: like-for-like purchases, idle shares, what each purchase
and re-partition serves, scenarios that say why they differ, and prices labelled as examples.

Every expected number is worked out by hand on fleets of one or two nodes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.cli import main
from gpuplan.cli.capacity import render_gap
from gpuplan.models import PlanningInput, default_catalog
from gpuplan.models.capacity import (
    CapacityGap,
    NodeTypeCatalog,
    Purchase,
    Scenario,
    ScenarioFile,
    ScenarioResult,
    Served,
)
from gpuplan.planner.capacity import gap as gap_module
from gpuplan.planner.capacity.gap import capacity_gap
from gpuplan.planner.capacity.node_types import load_node_types
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.capacity.phases import placement
from gpuplan.planner.capacity.purchase import NO_SOLUTION, PurchaseSolution
from gpuplan.planner.capacity.scenarios import Prepared, prepare_scenarios, render_table, run_prepared, versus
from gpuplan.planner.io.exporters.workbook import build_tables
from gpuplan.planner.pipeline.deadline import Deadline
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.errors import InvalidPlanError
from gpuplan.planner.validation.validate import Violation
from tests._factories import node_data
from tests._paths import ROOT_DIR

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
#: Like-for-like (the default).
OPTS = GapOptions(time_limit_s=3.0, milp_time_limit_s=10.0, now=NOW)

#: Hand-priced node types: 8 A100 on NVSwitch (150), 4 L40S (40), 4 L4 (20).
TYPES: dict[str, Any] = {
    "currency": "EUR",
    "note": "quotes of 2026-11",
    "node_types": [
        {"name": "a100-8", "gpu_model": "A100-SXM4-80GB", "topology": "dgx-a100", "cpu_milli": 256000,
         "memory_mib": 1048576, "unit_cost": 150},
        {"name": "l40s-4", "gpu_model": "L40S-48GB", "gpus": 4, "cpu_milli": 64000, "memory_mib": 524288,
         "unit_cost": 40},
        {"name": "l4-4", "gpu_model": "L4-24GB", "gpus": 4, "cpu_milli": 64000, "memory_mib": 262144,
         "unit_cost": 20},
    ],
}  # fmt: skip


def catalog(**over: Any) -> NodeTypeCatalog:
    return NodeTypeCatalog.model_validate({**TYPES, **over})


def planning(workloads: list[dict[str, Any]], nodes: list[dict[str, Any]], **policy: Any) -> PlanningInput:
    return PlanningInput.model_validate(
        {"cluster": {"nodes": nodes}, "workloads": workloads, "policy": policy}
    )


def bought(gap: CapacityGap) -> dict[str, int]:
    return {p.node_type: p.count for p in gap.purchases}


#: One busy A100 and a 1-GPU job with no GPU-model constraint: L4 is cheapest (20), the A100 class 150.
BUSY_A100 = [node_data("n1", "A100-SXM4-80GB", 1)]
WORK = [
    {"id": "busy", "team": "infra", "gpus": 1, "running_on": "n1:0", "cpu_milli": 1000, "memory_mib": 1024},
    {"id": "ft", "team": "nlp", "tier": "standard", "gpus": 1, "cpu_milli": 8000, "memory_mib": 65536},
]


def test_a_job_without_a_model_constraint_is_bought_for_in_the_fleets_class() -> None:
    gap = capacity_gap(planning(WORK, BUSY_A100), catalog(), OPTS)
    assert bought(gap) == {"a100-8": 1} and gap.cost == 150 and gap.class_moves == ()
    assert gap.allow_other_models == ()


def test_other_models_are_a_what_if_that_names_the_workloads_moving_class() -> None:
    for opts in (replace(OPTS, allow_other_models=True), replace(OPTS, other_models_for=frozenset({"ft"}))):
        gap = capacity_gap(planning(WORK, BUSY_A100), catalog(), opts)
        assert bought(gap) == {"l4-4": 1} and gap.cost == 20
        assert [(m.workload, m.replicas, m.from_models, m.to_model) for m in gap.class_moves] == [
            ("ft", 1, ("A100-SXM4-80GB",), "L4-24GB")
        ]
        assert "moves class: ft x1 from A100-SXM4-80GB to L4-24GB" in render_gap(gap)


def test_a_workload_keeps_the_model_its_replicas_run_on() -> None:
    """svc#0 runs on an L40S, the H100 is busy: svc#1 is bought an L40S node (40), not L4 (20) or A100."""
    nodes = [node_data("n1", "L40S-48GB", 1), node_data("n2", "H100-80GB", 1)]
    work = [
        {"id": "svc", "team": "search", "replicas": 2, "gpus": 1, "running_on": "n1:0", "cpu_milli": 1000,
         "memory_mib": 1024},
        {"id": "busy", "gpus": 1, "running_on": "n2:0", "cpu_milli": 1000, "memory_mib": 1024},
    ]  # fmt: skip
    gap = capacity_gap(planning(work, nodes), catalog(), OPTS)
    assert bought(gap) == {"l40s-4": 1} and gap.cost == 40


def test_no_node_type_of_the_class_is_unservable_with_the_way_out() -> None:
    gap = capacity_gap(planning(WORK, BUSY_A100), catalog(node_types=TYPES["node_types"][1:]), OPTS)
    assert gap.purchases == () and len(gap.unservable) == 1
    assert (
        "A100-SXM4-80GB" in gap.unservable[0].message and "--allow-other-models" in gap.unservable[0].message
    )


def test_a_purchase_shows_its_idle_gpus_whom_it_serves_and_the_gpu_hours() -> None:
    """Half an L4 (2 h) and a quarter of one (no duration: one day) on one 4-GPU node: 3.25 GPUs idle;
    0.5 x 2 h + 0.25 x 24 h = 7 GPU-hours."""
    nodes = [node_data("n1", "L4-24GB", 1)]
    work = [
        {"id": "busy", "gpus": 1, "running_on": "n1:0", "cpu_milli": 1000, "memory_mib": 1024},
        {"id": "nb", "team": "ads", "tier": "background", "gpu_milli": 500, "duration_s": 7200,
         "cpu_milli": 1000, "memory_mib": 4096},
        {"id": "lab", "team": "research", "gpu_milli": 250, "cpu_milli": 1000, "memory_mib": 4096},
    ]  # fmt: skip
    gap = capacity_gap(planning(work, nodes), catalog(), OPTS)
    (p,) = gap.purchases
    assert (p.node_type, p.count, p.gpus, p.gpus_idle, p.gpu_model) == ("l4-4", 1, 4, 3.25, "L4-24GB")
    assert p.serves == (
        Served(workload="lab", team="research", tier="standard", replicas=1, gpu_equivalents=0.25,
               gpu_hours=6.0),
        Served(workload="nb", team="ads", tier="background", replicas=1, gpu_equivalents=0.5, gpu_hours=1.0),
    )  # fmt: skip
    assert p.gpu_hours == 7.0 and p.unit_cost == 20
    # 0.75 of the 4 GPUs used: 19%, below the default minimum use of 25%.
    assert p.use_note == (
        "serves 0.75 of 4 GPUs (19%, below the 25% minimum use): consider waiting, renting or re-partitioning"
    )
    text = render_gap(gap)
    assert "buy 1 x l4-4 at 20 EUR each = 20 EUR: 4 L4-24GB GPUs, 3.25 idle, lead time 0 d" in text
    assert f"LOW USE: {p.use_note}" in text and "nb x1 (ads/background, 1.0 GPU-h)" in text
    # Teams' shares read as GPUs: the node's 4 GPUs shared 2:1 by GPU-equivalents (0.5 and 0.25).
    teams = {line.split()[0]: line.split()[-2:] for line in text.splitlines()[-2:]}
    assert teams == {"ads": ["2.67", "13"], "research": ["1.33", "7"]}
    quiet = capacity_gap(planning(work, nodes), catalog(), replace(OPTS, min_use=0.1))
    assert [q.use_note for q in quiet.purchases] == [""]


def test_a_re_partition_names_what_it_frees_and_for_whom() -> None:
    """An A100 cut into seven 1g slices re-partitioned for a 3g.40gb replica: 3/7 of a GPU for a day."""
    sevens = [{"profile": "1g.10gb", "start": s} for s in range(7)]
    nodes = [{**node_data("n1", "A100-SXM4-80GB", 1), "gpus": [
        {"index": 0, "model": "A100-SXM4-80GB", "mig": {"instances": sevens}}]}]  # fmt: skip
    work = [{"id": "infer", "team": "nlp", "mig_profile": "3g.40gb", "cpu_milli": 4000, "memory_mib": 16384}]
    gap = capacity_gap(planning(work, nodes, mig={"allow_repartition": False}), catalog(), OPTS)
    assert gap.served_by_repartition == 1 and gap.purchases == ()
    (gpu,) = gap.repartitions
    assert (gpu.node, gpu.gpu) == ("n1", 0)
    assert any(a.startswith("create-mig 3g.40gb") for a in gpu.actions)
    assert any(a.startswith("destroy-mig 1g.10gb") for a in gpu.actions)
    assert gpu.serves == (
        Served(workload="infer", team="nlp", tier="standard", replicas=1, gpu_equivalents=round(3 / 7, 4),
               gpu_hours=round(3 / 7 * 24, 2)),
    )  # fmt: skip


def _prepared(scenario: Scenario, inp: PlanningInput, *, same_input: bool, same_types: bool) -> Prepared:
    return Prepared(scenario, inp, catalog(), same_input, same_types)


def test_a_scenario_that_costs_more_says_why() -> None:
    inp = planning(WORK, BUSY_A100)
    base = CapacityGap(demand_replicas=4, cost=100.0, currency="EUR")
    allow = Scenario(name="mig", policy={"mig": {"allow_repartition": True}})
    cut = CapacityGap(demand_replicas=4, cost=120.0, currency="EUR", cut_short=("purchase MILP",))
    text = versus(_prepared(allow, inp, same_input=False, same_types=True), cut, base)
    assert text.startswith("20 EUR more than the baseline")
    assert "it changes MIG re-partitioning allowed;" in text and "cut short its purchase MILP" in text
    full = CapacityGap(demand_replicas=5, cost=120.0, currency="EUR")
    text = versus(_prepared(allow, inp, same_input=False, same_types=True), full, base)
    assert "5 replicas wait beyond their target after its fleet plan (baseline 4)" in text
    short = CapacityGap(demand_replicas=9, cost=60.0, currency="EUR", verified=False, still_unplaced=3)
    text = versus(_prepared(allow, inp, same_input=False, same_types=True), short, base)
    assert text.startswith("40 EUR less") and "NOT verified: 3 replica(s) still wait" in text
    same = CapacityGap(demand_replicas=4, cost=120.0, currency="EUR")
    assert "costs more for no more demand" in versus(
        _prepared(allow, inp, same_input=False, same_types=True), same, base
    )
    cheaper = Scenario(name="cheap", prices={"l4-4": 10})
    less = CapacityGap(demand_replicas=4, cost=90.0, currency="EUR")
    text = versus(_prepared(cheaper, inp, same_input=True, same_types=False), less, base)
    assert text.startswith("10 EUR less") and "l4-4 at 10" in text and "cheaper mix" in text
    table = render_table((ScenarioResult(name="cheap", description="cheaper L4", buys="1 x l4-4",
                                         vs_baseline=text, gap=less),))  # fmt: skip
    assert "cheap: cheaper L4; buys 1 x l4-4" in table and f"vs baseline: {text}" in table


def test_cli_scenarios_carry_description_purchase_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two L40S jobs of 2 GPUs: one l40s-4 (40); doubled: two (80); at 10 each: 10."""
    files = {name: tmp_path / f"{name}.yaml" for name in ("c", "w", "t", "s")}
    files["c"].write_text(yaml.safe_dump({"nodes": [node_data("n1", "L4-24GB", 1)]}))
    emb = {"id": "emb", "team": "search", "replicas": 2, "gpus": 2, "gpu_models": ["L40S-48GB"]}
    files["w"].write_text(yaml.safe_dump({"workloads": [emb]}))
    files["t"].write_text(yaml.safe_dump(TYPES))
    files["s"].write_text(yaml.safe_dump({"scenarios": [
        {"name": "today", "description": "as is"},
        {"name": "x2", "description": "search doubles", "growth": {"teams": {"search": 2.0}}},
        {"name": "cheap", "prices": {"l40s-4": 10}},
    ]}))  # fmt: skip
    out = tmp_path / "gap.json"
    args = ["capacity-gap", "--cluster", str(files["c"]), "--workloads", str(files["w"]), "--catalog",
            str(files["t"]), "--scenarios", str(files["s"]), "--time-limit", "10", "--now", NOW.isoformat(),
            "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "EXAMPLE" not in text
    from gpuplan.models.capacity import CapacityReport

    report = CapacityReport.model_validate_json(out.read_text())
    rows = {s.name: s for s in report.scenarios}
    assert (rows["today"].buys, rows["x2"].buys, rows["cheap"].buys) == (
        "1 x l40s-4",
        "2 x l40s-4",
        "1 x l40s-4",
    )
    assert rows["today"].vs_baseline == "this is the baseline: the inputs as given"
    assert "the baseline's inputs" not in text
    assert rows["x2"].vs_baseline.startswith("40 EUR more than the baseline: it changes team search x2")
    assert rows["cheap"].vs_baseline.startswith("30 EUR less than the baseline: it changes l40s-4 at 10")
    assert "x2: search doubles; buys 2 x l40s-4" in text
    assert not report.gap.example_prices and report.gap.price_source == "quotes of 2026-11"


def test_bundled_prices_are_labelled_examples_everywhere(tmp_path: Path) -> None:
    bundled = load_node_types(None)
    assert bundled.example_prices
    template = load_node_types(ROOT_DIR / "data/examples/node_types.template.yaml")
    assert not template.example_prices
    inp = planning(WORK, BUSY_A100)
    gap = capacity_gap(inp, bundled, OPTS)
    assert gap.example_prices and "EXAMPLE" in gap.price_source and "--catalog" in gap.price_source
    total = next(i for i, line in enumerate(render_gap(gap).splitlines()) if line.startswith("total:"))
    assert render_gap(gap).splitlines()[total + 1].startswith("PRICES ARE EXAMPLES")
    assert "(EXAMPLE price)" in render_gap(gap)
    from gpuplan.models.capacity import CapacityReport

    plan = make_plan(inp, now=NOW, time_limit_s=2.0)
    report = CapacityReport(gap=gap.model_copy(update={"inputs_sha256": None}))
    tables = build_tables(plan, default_catalog(), inp, report, bundled)
    for sheet in ("Teams", "CapacityGap", "Scenarios"):
        assert "EXAMPLE" in tables[sheet].attrs["currency"], sheet
    summary = tables["Summary"]
    money = summary[summary["metric"] == "cost"]
    assert len(money) and all("EXAMPLE" in u for u in money["unit"])
    mine = build_tables(plan, default_catalog(), inp, None, catalog())
    assert "EXAMPLE" not in mine["Teams"].attrs["currency"]


def test_cli_names_an_unknown_workload_of_allow_other_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c, w = tmp_path / "c.yaml", tmp_path / "w.yaml"
    c.write_text(yaml.safe_dump({"nodes": BUSY_A100}))
    w.write_text(yaml.safe_dump({"workloads": WORK}))
    args = ["capacity-gap", "--cluster", str(c), "--workloads", str(w), "--allow-other-models", "nope"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--allow-other-models: unknown workload 'nope'" in err


def test_a_cut_short_purchase_gives_way_to_the_cheaper_baseline_purchase(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A MILP cut short at 2 x l40s-4 (80) for two 2-GPU L40S replicas: the baseline's one l40s-4 (40)
    places both, so it is kept; three replicas (6 GPUs) do not fit it, and the purchase found stays."""
    worse = PurchaseSolution({"l40s-4": 2}, {}, 80.0, 40.0, "FEASIBLE", "milp-highs", 0.0)
    monkeypatch.setattr(gap_module, "solve_purchase", lambda *args, **kw: worse)
    nothing = replace(worse, counts={}, objective=0.0, status=NO_SOLUTION)
    monkeypatch.setattr(gap_module._Run, "_configured", lambda self, *args: nothing)
    base = (Purchase(node_type="l40s-4", count=1, gpus=4, cost=40.0),)

    def emb(replicas: int) -> PlanningInput:
        work = [{"id": "emb", "team": "search", "replicas": replicas, "gpus": 2, "gpu_models": "L40S-48GB",
                 "cpu_milli": 8000, "memory_mib": 65536}]  # fmt: skip
        return planning(work, [node_data("n1", "L4-24GB", 1)])

    gap = capacity_gap(emb(2), catalog(), OPTS, warm=base)
    assert bought(gap) == {"l40s-4": 1} and gap.cost == 40 and gap.verified
    assert gap.solver == "milp-highs + warm start" and gap.lower_bound == 40
    assert any("serves this demand and costs less than the purchase found (80)" in n for n in gap.notes)
    text = versus(
        _prepared(Scenario(name="p", policy={"mig": {"allow_repartition": True}}), emb(2),
                  same_input=False, same_types=True),
        gap, CapacityGap(demand_replicas=2, cost=40.0, currency="EUR"),
    )  # fmt: skip
    assert text.startswith("the same cost as the baseline") and "warm start" in text

    gap = capacity_gap(emb(3), catalog(), OPTS, warm=base)
    assert bought(gap) == {"l40s-4": 2} and gap.cost == 80 and "warm start" not in gap.solver
    assert any("baseline's purchase (1 x l40s-4) leaves 1 replica(s) waiting" in n for n in gap.notes)


def test_a_sharing_change_on_an_idle_node_is_proposed_before_a_purchase() -> None:
    """Half an L4 waits because its only node offers whole GPUs and the policy forbids mode changes:
    turning that idle node time-sliced serves it, so nothing (not a 4-GPU node, 20) is bought."""
    nodes = [{**node_data("n1", "L4-24GB", 1), "sharing": "exclusive"}]
    work = [{"id": "nb", "team": "ads", "gpu_milli": 500, "cpu_milli": 1000, "memory_mib": 4096}]
    gap = capacity_gap(planning(work, nodes, sharing={"allow_change": False}), catalog(), OPTS)
    assert (gap.demand_replicas, gap.served_by_repartition, gap.purchases, gap.cost) == (1, 1, (), 0)
    (change,) = gap.repartitions
    assert (change.node, change.gpu) == ("n1", None)
    assert len(change.actions) == 1 and change.actions[0].startswith("set-sharing time-slicing")
    assert change.serves == (
        Served(workload="nb", team="ads", tier="standard", replicas=1, gpu_equivalents=0.5, gpu_hours=12.0),
    )
    assert "re-partition n1 (sharing mode): set-sharing" in render_gap(gap)


def test_a_scenario_may_let_workloads_move_class(tmp_path: Path) -> None:
    """The baseline buys the A100 class (150); a scenario letting ft move buys an L4 node (20)."""
    inp = planning(WORK, BUSY_A100)
    plan = make_plan(inp, now=NOW, time_limit_s=2.0)
    base = capacity_gap(inp, catalog(), OPTS, baseline=plan)
    what_ifs = ScenarioFile(
        scenarios=(Scenario(name="same"), Scenario(name="any", allow_other_models=("ft",)))
    )
    prepared = prepare_scenarios(inp, catalog(), what_ifs, tmp_path, default_catalog())
    same, other = run_prepared(
        prepared, OPTS, default_catalog(), deadline=Deadline.after(20), base=(plan, base)
    )
    assert same.gap == base and bought(base) == {"a100-8": 1}
    assert bought(other.gap) == {"l4-4": 1} and other.gap.allow_other_models == ("ft",)
    assert other.vs_baseline.startswith("130 EUR less than the baseline: it changes other GPU models for ft")
    assert "  moves class: ft x1 from A100-SXM4-80GB to L4-24GB" in render_table((same, other))
    bad = ScenarioFile(scenarios=(Scenario(name="x", allow_other_models=("nope",)),))
    with pytest.raises(ValueError, match="scenario 'x' field allow_other_models: unknown workload 'nope'"):
        prepare_scenarios(inp, catalog(), bad, tmp_path, default_catalog())


def test_a_re_partition_re_plan_the_validator_rejects_is_skipped_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The re-plan that would serve the 3g.40gb replica by re-partitioning fails validation (a planner
    bug): it is skipped with a note and the replica is bought for, one A100 node (150)."""
    sevens = [{"profile": "1g.10gb", "start": s} for s in range(7)]
    nodes = [{**node_data("n1", "A100-SXM4-80GB", 1), "gpus": [
        {"index": 0, "model": "A100-SXM4-80GB", "mig": {"instances": sevens}}]}]  # fmt: skip
    work = [{"id": "infer", "team": "nlp", "mig_profile": "3g.40gb", "cpu_milli": 4000, "memory_mib": 16384}]
    real = placement

    def rejected(inp: PlanningInput, *args: Any) -> Any:
        if inp.policy.mig.allow_repartition:  # the held re-plan
            raise InvalidPlanError("cpsat", [Violation("mig-unscheduled", "node n1 gpu 0", "no action")])
        return real(inp, *args)

    monkeypatch.setattr(gap_module, "placement", rejected)
    gap = capacity_gap(planning(work, nodes, mig={"allow_repartition": False}), catalog(), OPTS)
    assert gap.served_by_repartition == 0 and bought(gap) == {"a100-8": 1} and gap.cost == 150
    assert any("validator rejects (a planner bug: mig-unscheduled on node n1 gpu 0)" in n for n in gap.notes)


@pytest.mark.slow
def test_a_re_partition_beside_a_running_instance_serves_without_a_purchase() -> None:
    """A replica runs on 1g.10gb@0 of an A100 cut in seven; the waiting 3g.40gb replica is served by
    re-partitioning the three idle instances at slices 4-6 into 3g.40gb@4 while the running one keeps
    running (its instance is not touched, so it needs no drain and no move): nothing is bought, and the
    re-plan is valid (it used to fail mig-unscheduled and be skipped, buying an A100 node)."""
    sevens = [{"profile": "1g.10gb", "start": s} for s in range(7)]
    nodes = [{**node_data("n1", "A100-SXM4-80GB", 1), "gpus": [
        {"index": 0, "model": "A100-SXM4-80GB", "mig": {"instances": sevens}}]}]  # fmt: skip
    work = [
        {"id": "run", "team": "nlp", "mig_profile": "1g.10gb", "running_on": "n1:0/1g.10gb@0",
         "cpu_milli": 1000, "memory_mib": 1024},
        {"id": "infer", "team": "nlp", "mig_profile": "3g.40gb", "cpu_milli": 4000, "memory_mib": 16384},
    ]  # fmt: skip
    gap = capacity_gap(planning(work, nodes, mig={"allow_repartition": False}), catalog(), OPTS)
    assert not [n for n in gap.notes if "validator rejects" in n], gap.notes
    assert gap.served_by_repartition == 1 and bought(gap) == {} and gap.cost == 0
    (rep,) = gap.repartitions
    assert (rep.node, rep.gpu) == ("n1", 0)
    # Only idle instances are destroyed; any valid 3g.40gb start beside the running 1g.10gb@0 will do.
    destroyed = [a for a in rep.actions if a.startswith("destroy-mig")]
    assert destroyed and not [a for a in destroyed if "1g.10gb@0 " in a]
    assert [a for a in rep.actions if a.startswith("create-mig 3g.40gb@4 ")]
    assert [s.workload for s in rep.serves] == ["infer"]

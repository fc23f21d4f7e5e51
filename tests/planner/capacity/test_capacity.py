"""Capacity-gap plans on tiny instances whose cheapest addition is known by hand, and what-if scenarios."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulp
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.api.solver_process import gap_outcome
from gpuplan.cli import capacity as capacity_cli
from gpuplan.cli import common, main
from gpuplan.models import Plan, PlanningInput, PlanStatus, SolverReport, Unplaced, default_catalog
from gpuplan.models.capacity import (
    CapacityGap,
    CapacityReport,
    Growth,
    NodeTypeCatalog,
    Scenario,
    ScenarioFile,
)
from gpuplan.models.workload import Workload
from gpuplan.planner.capacity import gap as capacity_module
from gpuplan.planner.capacity import phases as phases_module
from gpuplan.planner.capacity import purchase as purchase_module
from gpuplan.planner.capacity import scenarios as scenarios_module
from gpuplan.planner.capacity.demand import gap_demand
from gpuplan.planner.capacity.gap import capacity_gap
from gpuplan.planner.capacity.node_types import load_node_types, type_specs
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.capacity.purchase import NO_SOLUTION, PurchaseSolution, solve_purchase
from gpuplan.planner.capacity.repartition import held_input
from gpuplan.planner.capacity.scenarios import grow, run_scenarios, scenario_input, scenario_types
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.deadline import Deadline
from gpuplan.planner.planning import make_plan
from tests._clock import FakeClock

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
#: The purchase tests buy any GPU model (the what-if); like-for-like has tests of its own.
#: A limit the tiny instances never reach (they are solved to optimality well before it), so that a
#: loaded machine cannot cut a phase short and change the answer.
OPTS = GapOptions(time_limit_s=60.0, milp_time_limit_s=20.0, now=NOW, allow_other_models=True)

#: Hand-priced node types: 4 or 8 L40S (no NVLink), 8 H100 on NVSwitch, 4 H100 NVL bridged in pairs,
#: 8 A100 on NVSwitch, 4 L4.
TYPES: dict[str, Any] = {
    "currency": "EUR",
    "node_types": [
        {"name": "l40s-4", "gpu_model": "L40S-48GB", "gpus": 4, "cpu_milli": 64000, "memory_mib": 524288,
         "unit_cost": 40},
        {"name": "l40s-8", "gpu_model": "L40S-48GB", "topology": "pcie-8x-l40s", "cpu_milli": 128000,
         "memory_mib": 1048576, "unit_cost": 70},
        {"name": "h100-8", "gpu_model": "H100-80GB", "topology": "dgx-h100", "cpu_milli": 224000,
         "memory_mib": 2097152, "unit_cost": 300, "lead_time_days": 90},
        {"name": "h100-nvl-4", "gpu_model": "H100-94GB", "topology": "pcie-4x-h100-nvl-bridged",
         "cpu_milli": 128000, "memory_mib": 1048576, "unit_cost": 120},
        {"name": "a100-8", "gpu_model": "A100-SXM4-80GB", "topology": "dgx-a100", "cpu_milli": 256000,
         "memory_mib": 1048576, "unit_cost": 150},
        {"name": "l4-4", "gpu_model": "L4-24GB", "gpus": 4, "cpu_milli": 64000, "memory_mib": 262144,
         "unit_cost": 20},
    ],
}  # fmt: skip


def types(*names: str) -> NodeTypeCatalog:
    """The hand-priced catalog restricted to ``names``."""
    chosen = [t for t in TYPES["node_types"] if t["name"] in names]
    return NodeTypeCatalog.model_validate({**TYPES, "node_types": chosen})


def small_fleet(gpus: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One node (one L4 by default) that none of the test demand may use unless it says so."""
    return {
        "nodes": [
            {"name": "n1", "cpu_milli": 64000, "memory_mib": 262144,
             "gpus": gpus or [{"index": 0, "model": "L4-24GB"}]},
        ]
    }  # fmt: skip


def planning(
    workloads: list[dict[str, Any]], cluster: dict[str, Any] | None = None, **policy: Any
) -> PlanningInput:
    return PlanningInput.model_validate(
        {"cluster": cluster or small_fleet(), "workloads": workloads, "policy": policy}
    )


def run(inp: PlanningInput, catalog: NodeTypeCatalog, deadline: Deadline | None = None) -> CapacityGap:
    gap = capacity_gap(inp, catalog, OPTS, deadline=deadline)
    served = gap.served_by_repartition + gap.served_by_purchase + len(gap.unservable) + gap.still_unplaced
    assert served == gap.demand_replicas
    assert sum(line.replicas for line in gap.by_tier) == gap.demand_replicas
    assert sum(line.replicas for line in gap.by_team) == gap.demand_replicas
    assert sum(line.cost for line in gap.by_team) == pytest.approx(gap.cost, abs=0.05)
    assert sum(line.gpus_added for line in gap.by_tier) == pytest.approx(gap.gpus_added, abs=1e-3)
    return gap


def bought(gap: CapacityGap) -> dict[str, int]:
    return {p.node_type: p.count for p in gap.purchases}


def test_cheapest_mix_known_by_hand() -> None:
    """Six L40S GPUs in pairs: one 8-GPU node (70) beats two 4-GPU nodes (80); four GPUs: one 4-GPU node."""
    six = [{"id": "emb", "team": "search", "replicas": 3, "gpus": 2, "gpu_models": "L40S-48GB",
            "cpu_milli": 8000, "memory_mib": 65536}]  # fmt: skip
    gap = run(planning(six), types("l40s-4", "l40s-8"))
    assert bought(gap) == {"l40s-8": 1}
    assert (gap.cost, gap.lower_bound, gap.gap, gap.gpus_added, gap.nodes_added) == (70, 70, 0, 8, 1)
    assert gap.verified and gap.served_by_purchase == 3 and gap.currency == "EUR"
    assert [(line.key, line.replicas, line.cost) for line in gap.by_team] == [("search", 3, 70)]

    four = [{**six[0], "replicas": 2}]
    gap = run(planning(four), types("l40s-4", "l40s-8"))
    assert bought(gap) == {"l40s-4": 1} and gap.cost == 40


def test_cpu_bound_demand_buys_by_cpu() -> None:
    """Three replicas of 1 L40S and 50 CPU cores: CPU, not GPUs, decides (three 4-GPU nodes, 120)."""
    cpu_heavy = [{"id": "etl", "replicas": 3, "gpus": 1, "gpu_models": "L40S-48GB", "cpu_milli": 50000,
                  "memory_mib": 65536}]  # fmt: skip
    gap = run(planning(cpu_heavy), types("l40s-4"))
    assert bought(gap) == {"l40s-4": 3} and gap.cost == 120 and gap.lower_bound == 120


def test_fractions_pack_onto_shared_gpus() -> None:
    """Five 400-milli replicas need three shared GPUs (two per GPU): one 4-GPU L4 node."""
    frac = [{"id": "nb", "replicas": 5, "gpu_milli": 400, "gpu_models": "L4-24GB", "cpu_milli": 1000,
             "memory_mib": 4096}]  # fmt: skip
    busy = small_fleet()
    inp = planning([*frac, {"id": "busy", "gpus": 1, "running_on": "n1:0"}], busy)
    gap = run(inp, types("l4-4", "l40s-4"))
    assert bought(gap) == {"l4-4": 1} and gap.served_by_purchase == 5


def test_mig_repartition_removes_the_need_to_buy() -> None:
    """An idle A100 cut into seven 1g slices cannot host a 3g.40gb replica until it is re-partitioned."""
    sevens = [{"profile": "1g.10gb", "start": s} for s in range(7)]
    fleet = small_fleet([{"index": 0, "model": "A100-SXM4-80GB", "mig": {"instances": sevens}}])
    work = [{"id": "infer", "team": "nlp", "mig_profile": "3g.40gb", "cpu_milli": 4000, "memory_mib": 16384}]
    inp = planning(work, fleet, mig={"allow_repartition": False})
    baseline = make_plan(inp, now=NOW, time_limit_s=3.0)
    assert [u.workload for u in gap_demand(baseline, inp, NOW)] == ["infer"]
    gap = run(inp, types("a100-8", "l40s-4"))
    assert gap.served_by_repartition == 1 and gap.purchases == () and gap.cost == 0
    assert any(a.startswith("create-mig 3g.40gb") for a in gap.repartition_actions)
    assert any(a.startswith("destroy-mig 1g.10gb") for a in gap.repartition_actions)


def test_mig_demand_beyond_repartition_buys_mig_gpus() -> None:
    """Two 4g.40gb replicas on one A100: one fits after re-partitioning, the other needs a new node."""
    fleet = small_fleet([{"index": 0, "model": "A100-SXM4-80GB", "mig": {"instances": []}}])
    work = [{"id": "infer", "replicas": 2, "mig_profile": "4g.40gb", "cpu_milli": 4000, "memory_mib": 16384}]
    gap = run(planning(work, fleet), types("a100-8", "l40s-4"))
    assert gap.demand_replicas == 1 and bought(gap) == {"a100-8": 1} and gap.verified


def test_nvlink_gang_of_eight_forces_a_whole_node() -> None:
    """8 GPUs over NVLink fit only the NVSwitch H100 server; an extra 1-GPU H100 replica needs a second."""
    gang = {"id": "train", "team": "vision", "gpus": 8, "topology": "nvlink", "gang": "true",
            "cpu_milli": 96000, "memory_mib": 1048576}  # fmt: skip
    gap = run(planning([gang]), types("l40s-8", "h100-nvl-4", "h100-8"))
    assert bought(gap) == {"h100-8": 1} and gap.cost == 300 and gap.max_lead_time_days == 90
    single = {"id": "ft", "team": "nlp", "gpus": 1, "gpu_models": "H100-80GB", "cpu_milli": 8000,
              "memory_mib": 65536}  # fmt: skip
    gap = run(planning([gang, single]), types("l40s-8", "h100-nvl-4", "h100-8"))
    assert bought(gap) == {"h100-8": 2} and gap.cost == 600 and gap.lower_bound == 600
    teams = {line.key: line for line in gap.by_team}
    assert teams["vision"].gpus_added == pytest.approx(8) and teams["nlp"].gpus_added == pytest.approx(8)


def test_pairs_over_nvlink_use_bridged_pairs() -> None:
    """Two 2-GPU NVLink replicas fit one 4-GPU NVL node (bridged pairs): 120, not an 8-GPU H100 (300)."""
    pairs = {"id": "llm", "replicas": 2, "gpus": 2, "topology": "nvlink", "cpu_milli": 16000,
             "memory_mib": 131072}  # fmt: skip
    gap = run(planning([pairs]), types("l40s-8", "h100-nvl-4", "h100-8"))
    assert bought(gap) == {"h100-nvl-4": 1} and gap.cost == 120


def test_catalog_that_can_never_host_names_the_workload() -> None:
    train = {"id": "train-x", "team": "vision", "gpus": 8, "topology": "nvlink", "gpu_models": "H100-80GB"}
    small = {"id": "emb", "gpus": 1, "gpu_models": "L40S-48GB"}
    gap = run(planning([train, small]), types("l40s-8", "l4-4"))
    assert [u.workload for u in gap.unservable] == ["train-x"]
    message = gap.unservable[0].message
    assert "workload 'train-x'" in message and "no node type" in message and "H100-80GB" in message
    assert bought(gap) == {"l40s-8": 1}
    vision = next(line for line in gap.by_team if line.key == "vision")
    assert vision.unservable == 1 and vision.cost == 0


def test_cli_capacity_gap_scenarios_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster, work, cat, scen = (tmp_path / f for f in ("c.yaml", "w.yaml", "types.yaml", "s.yaml"))
    cluster.write_text(yaml.safe_dump(small_fleet()))
    work.write_text(yaml.safe_dump({"workloads": [
        {"id": "emb", "team": "search", "replicas": 2, "gpus": 2, "gpu_models": ["L40S-48GB"]},
        {"id": "big", "team": "vision", "gpus": 8, "topology": "nvlink", "gpu_models": ["H100-80GB"]},
    ]}))  # fmt: skip
    cat.write_text(yaml.safe_dump(TYPES))
    scen.write_text(yaml.safe_dump({"scenarios": [
        {"name": "today"}, {"name": "search-x2", "growth": {"teams": {"search": 2.0}}},
        {"name": "cheap-l40s-8", "prices": {"l40s-8": 30}},
    ]}))  # fmt: skip
    out = tmp_path / "gap.json"
    base = ["capacity-gap", "--cluster", str(cluster), "--workloads", str(work), "--catalog", str(cat),
            "--time-limit", "10", "--now", NOW.isoformat()]  # fmt: skip
    assert main([*base, "--scenarios", str(scen), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "buy 1 x l40s-4" in text and "search-x2" in text and "cheap-l40s-8" in text
    report = CapacityReport.model_validate_json(out.read_text())
    costs = {s.name: s.gap.cost for s in report.scenarios}
    assert costs == {"today": 340.0, "search-x2": 370.0, "cheap-l40s-8": 330.0}
    assert report.gap.cost == 340.0 and bought(report.gap) == {"l40s-4": 1, "h100-8": 1}

    bad = {"name": "x", "gpu_model": "H900", "gpus": 1, "cpu_milli": 1, "memory_mib": 1, "unit_cost": 1}
    cat.write_text(yaml.safe_dump({"node_types": [bad]}))
    assert main(base) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "types.yaml" in err and "unknown GPU model 'H900'" in err


def test_growth_spreads_by_largest_remainder() -> None:
    ws = (
        *(Workload(id=f"w{i}", team="a", replicas=1) for i in range(3)),
        Workload(id="other", team="b", replicas=2),
    )
    grown = grow(ws, Growth(teams={"a": 1.5}))
    assert [w.replicas for w in grown] == [2, 2, 1, 2]
    assert [w.replicas for w in grow(ws, Growth(teams={"a": 1.5}, tiers={"standard": 2.0}))] == [3, 3, 3, 4]
    running = Workload(id="r", replicas=2, running_on="n1:0;n1:1")
    assert grow((running,), Growth(tiers={"standard": 0.0}))[0].replicas == 2


def test_scenario_prices_and_catalog_errors(tmp_path: Path) -> None:
    base = types("l40s-4", "l40s-8")
    cheaper = scenario_types(base, Scenario(name="s", prices={"l40s-8": 10}), tmp_path, default_catalog())
    assert cheaper.node_type("l40s-8").unit_cost == 10 and cheaper.node_type("l40s-4").unit_cost == 40
    with pytest.raises(ValueError, match="scenario 's' field prices: unknown node type 'nope'"):
        scenario_types(base, Scenario(name="s", prices={"nope": 1}), tmp_path, default_catalog())
    inp = planning([{"id": "w", "team": "a"}])
    with pytest.raises(ValueError, match=r"scenario 'g' field growth\.teams: unknown team 'b'"):
        scenario_input(inp, Scenario(name="g", growth=Growth(teams={"b": 2.0})), default_catalog())
    with pytest.raises(ValueError, match=r"scenario 'p' field policy: mig\.allow_repartition"):
        scenario_input(
            inp, Scenario(name="p", policy={"mig": {"allow_repartition": "maybe"}}), default_catalog()
        )
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**TYPES, "node_types": TYPES["node_types"][5:]}))
    swapped = scenario_types(base, Scenario(name="s", catalog="other.yaml"), tmp_path, default_catalog())
    assert [t.name for t in swapped.node_types] == ["l4-4"]


def test_scenarios_side_by_side_policy_change(tmp_path: Path) -> None:
    """Re-partitioning serves the demand without a purchase; a policy that allows it leaves no gap."""
    sevens = [{"profile": "1g.10gb", "start": s} for s in range(7)]
    fleet = small_fleet([{"index": 0, "model": "A100-SXM4-80GB", "mig": {"instances": sevens}}])
    inp = planning([{"id": "infer", "mig_profile": "3g.40gb"}], fleet)
    scenarios = ScenarioFile(
        scenarios=(
            Scenario(name="now"),
            Scenario(name="repartition-allowed", policy={"mig": {"allow_repartition": True}}),
            Scenario(name="triple", growth=Growth(teams={"default": 3.0})),
        )
    )
    results = run_scenarios(inp, types("a100-8"), scenarios, tmp_path, OPTS, default_catalog())
    assert [r.name for r in results] == ["now", "repartition-allowed", "triple"]
    now, allowed, triple = (r.gap for r in results)
    assert (now.demand_replicas, now.served_by_repartition, now.cost) == (1, 1, 0)
    assert (allowed.demand_replicas, allowed.cost) == (0, 0)
    # Two 3g.40gb fit one A100 (at slices 0 and 4); the third needs a new node.
    assert (triple.demand_replicas, triple.served_by_repartition, bought(triple)) == (3, 2, {"a100-8": 1})


def test_bundled_catalog_is_labelled_example() -> None:
    catalog = load_node_types(None)
    assert "EXAMPLE" in catalog.note
    assert {t.name for t in catalog.node_types} >= {"dgx-h100", "pcie-8x-l40s"}
    assert all(t.unit_cost > 0 and t.gpus > 0 for t in catalog.node_types)


def test_gap_demand_skips_waits_within_the_tier_target() -> None:
    """A replica predicted to start within its tier's target wait is not gap demand; later or unknown is."""
    work = [
        {"id": "soon", "tier": "standard", "gpus": 1},
        {"id": "late", "tier": "standard", "gpus": 1},
        {"id": "unknown", "tier": "background", "gpus": 1},
    ]
    inp = planning(work)
    plan = Plan(
        status=PlanStatus.FEASIBLE,
        solver=SolverReport(name="test"),
        unplaced=(
            Unplaced(
                workload="soon", replica=0, code="C", reason="r", predicted_start="2026-11-29T12:30:00+00:00"
            ),
            Unplaced(
                workload="late", replica=0, code="C", reason="r", predicted_start="2026-11-29T14:00:00+00:00"
            ),
            Unplaced(workload="unknown", replica=0, code="C", reason="r"),
        ),
        provenance={"now": NOW.isoformat()},
    )
    assert [u.workload for u in gap_demand(plan, inp, None)] == ["late", "unknown"]


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=12),
    price4=st.integers(min_value=1, max_value=100),
    price8=st.integers(min_value=1, max_value=200),
)
def test_purchase_milp_matches_brute_force_on_divisible_sizes(
    sizes: list[int], price4: int, price8: int
) -> None:
    """Whole-GPU replicas of 1, 2, 4 or 8 GPUs into 4- and 8-GPU nodes: sizes divide the capacities, so
    a purchase serves them exactly when the 8-GPU replicas have 8-GPU nodes and the GPUs add up; the MILP
    must find the cheapest such purchase."""
    catalog = types("l40s-4", "l40s-8")
    catalog = catalog.model_copy(
        update={
            "node_types": tuple(
                t.model_copy(
                    update={"unit_cost": float(price4 if t.gpus == 4 else price8), "cpu_milli": 10**6}
                )
                for t in catalog.node_types
            )
        }
    )
    work = [{"id": f"w{i}", "gpus": g, "gpu_models": "L40S-48GB"} for i, g in enumerate(sizes)]
    problem = compile_problem(planning(work), default_catalog(), NOW)
    solution = solve_purchase(list(problem.requests), type_specs(catalog, default_catalog()))
    big, total = sizes.count(8), sum(sizes)
    best = min(
        n4 * price4 + n8 * price8
        for n8 in range(big, total // 8 + 2)
        for n4 in range(total // 4 + 2)
        if 4 * n4 + 8 * n8 >= total
    )
    assert solution.objective == best
    assert solution.lower_bound == best and solution.status == "OPTIMAL"


# --- the time limit: shares of one deadline, checked on a fake clock ------------------------------


class Recorder:
    """Stands in for the placement solver and the purchase MILP of a capacity-gap run: each call runs
    the real one (tiny instances finish at once) and then lets ``spend`` x its time limit pass on the
    fake clock, so the shares the phases get depend on the fake clock alone."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, clock: FakeClock, spend: float = 1.0) -> None:
        self.clock = clock
        self.spend = spend
        self.calls: list[tuple[str, float, PlanningInput | None]] = []
        real_plan, real_milp = make_plan, solve_purchase

        def plan(inp: PlanningInput, **kw: Any) -> Plan:
            self.calls.append(("plan", kw["time_limit_s"], inp))
            out = real_plan(inp, **{**kw, "time_limit_s": min(kw["time_limit_s"], 3.0)})
            clock.advance(self.spend * kw["time_limit_s"])
            return out

        def milp(*args: Any, **kw: Any) -> PurchaseSolution:
            self.calls.append(("milp", kw["time_limit_s"], None))
            out = real_milp(*args, **{**kw, "time_limit_s": min(kw["time_limit_s"], 10.0)})
            clock.advance(self.spend * kw["time_limit_s"])
            return out

        monkeypatch.setattr(phases_module, "make_plan", plan)
        monkeypatch.setattr(capacity_module, "solve_purchase", milp)

    @property
    def total(self) -> float:
        return sum(s for _, s, _ in self.calls)


def _mig_demand() -> PlanningInput:
    """Two 4g.40gb replicas and one idle A100 in MIG mode: one fits after a re-partition, one is bought."""
    fleet = small_fleet([{"index": 0, "model": "A100-SXM4-80GB", "mig": {"instances": []}}])
    work = [{"id": "infer", "replicas": 2, "mig_profile": "4g.40gb", "cpu_milli": 4000, "memory_mib": 16384}]
    return planning(work, fleet)


def test_every_phase_gets_a_share_and_the_shares_fit_the_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    rec = Recorder(monkeypatch, clock)
    gap = capacity_gap(_mig_demand(), types("a100-8", "l40s-4"), OPTS, deadline=Deadline.after(100.0, clock))
    assert [kind for kind, _, _ in rec.calls] == [
        "plan",
        "plan",
        "milp",
        "plan",
    ]  # fleet, re-plan, MILP, check
    fleet, replan, milp, check = (s for _, s, _ in rec.calls)
    assert rec.total <= 100.0 and min(fleet, replan, milp, check) > 0
    assert fleet > replan > milp and check > milp  # placement solves weigh more than the MILP
    assert gap.verified and bought(gap) == {"a100-8": 1} and gap.cut_short == ()


def test_a_phase_that_ends_early_hands_its_time_on(monkeypatch: pytest.MonkeyPatch) -> None:
    shares = []
    for spend in (1.0, 0.0):
        clock = FakeClock()
        rec = Recorder(monkeypatch, clock, spend)
        capacity_gap(_mig_demand(), types("a100-8"), OPTS, deadline=Deadline.after(100.0, clock))
        shares.append([s for _, s, _ in rec.calls])
    used_all, used_none = shares
    assert used_none[0] == used_all[0]
    assert all(late > early for late, early in zip(used_none[1:], used_all[1:], strict=True))


def test_scenarios_split_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    rec = Recorder(monkeypatch, clock)
    seen: list[tuple[str, float, float]] = []
    real_gap = capacity_gap

    def gap(inp: PlanningInput, *args: Any, deadline: Deadline, **kw: Any) -> CapacityGap:
        start, before = deadline.remaining(), rec.total
        out = real_gap(inp, *args, deadline=deadline, **kw)
        seen.append((inp.workloads[0].id, start, rec.total - before))
        return out

    monkeypatch.setattr(scenarios_module, "capacity_gap", gap)
    scenarios = ScenarioFile(
        scenarios=(
            Scenario(name="now"),
            Scenario(name="double", growth=Growth(teams={"default": 2.0})),
            Scenario(name="triple", growth=Growth(teams={"default": 3.0})),
        )
    )
    run_scenarios(_mig_demand(), types("a100-8"), scenarios, Path(), OPTS, default_catalog(),
                  deadline=Deadline.after(90.0, clock))  # fmt: skip
    assert len(seen) == 3 and rec.total <= 90.0
    left = 90.0
    for i, (_, part, used) in enumerate(seen):
        assert part == pytest.approx(left / (3 - i))  # an equal part of what is left
        assert used <= part
        left -= used


def test_cli_shares_the_time_limit_and_reuses_unchanged_scenarios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock()
    rec = Recorder(monkeypatch, clock)
    monkeypatch.setattr(common, "Deadline", lambda end: Deadline.after(10.0, clock))
    cluster, work, cat, scen = (tmp_path / f for f in ("c.yaml", "w.yaml", "types.yaml", "s.yaml"))
    cluster.write_text(yaml.safe_dump(small_fleet()))
    work.write_text(yaml.safe_dump({"workloads": [
        {"id": "emb", "team": "search", "replicas": 2, "gpus": 2, "gpu_models": ["L40S-48GB"]},
    ]}))  # fmt: skip
    cat.write_text(yaml.safe_dump(TYPES))
    scen.write_text(yaml.safe_dump({"scenarios": [
        {"name": "today"}, {"name": "search-x2", "growth": {"teams": {"search": 2.0}}},
        {"name": "cheap-l40s-4", "prices": {"l40s-4": 10}},
    ]}))  # fmt: skip
    assert main(["capacity-gap", "--cluster", str(cluster), "--workloads", str(work), "--catalog", str(cat),
                 "--time-limit", "10", "--now", NOW.isoformat(), "--scenarios", str(scen)]) == 0  # fmt: skip
    assert rec.total <= 10.0 - capacity_cli.OUTPUT_SHARE * 10.0
    fleet_plans = [
        inp for kind, _, inp in rec.calls if kind == "plan" and inp and inp.cluster.nodes[0].name == "n1"
    ]
    # The gap and "search-x2" plan the fleet; "today" reuses the gap, "cheap-l40s-4" the fleet plan.
    assert [sum(w.replicas for w in inp.workloads) for inp in fleet_plans] == [2, 4]
    text = capsys.readouterr().out
    assert "today" in text and "cheap-l40s-4" in text


def test_an_exhausted_deadline_skips_the_re_partition_re_plan_with_a_label() -> None:
    sevens = [{"profile": "1g.10gb", "start": s} for s in range(7)]
    fleet = small_fleet([{"index": 0, "model": "A100-SXM4-80GB", "mig": {"instances": sevens}}])
    work = [{"id": "infer", "team": "nlp", "mig_profile": "3g.40gb", "cpu_milli": 4000, "memory_mib": 16384}]
    clock = FakeClock()
    over = Deadline(clock() - 1.0, clock)
    gap = run(planning(work, fleet, mig={"allow_repartition": False}), types("a100-8"), deadline=over)
    assert gap.cut_short == ("re-partition re-plan",)
    assert gap.served_by_repartition == 0 and gap.served_by_purchase == 1 and bought(gap) == {"a100-8": 1}
    assert any("no time was left for the re-partition re-plan" in n for n in gap.notes)


def test_a_purchase_check_out_of_time_is_not_repaired_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """The MILP buys one 4-GPU node for three 2-GPU replicas; the check leaves one waiting and the time
    is gone, so no repair round runs: the gap is labelled, not verified, with the replica counted."""
    clock = FakeClock()
    Recorder(monkeypatch, clock, spend=1000.0)  # every solve uses up the deadline
    short = PurchaseSolution({"l40s-4": 1}, {}, 40.0, 40.0, "OPTIMAL", "milp-highs", 0.0)
    monkeypatch.setattr(capacity_module, "solve_purchase", lambda *a, **kw: short)
    six = [{"id": "emb", "team": "search", "replicas": 3, "gpus": 2, "gpu_models": "L40S-48GB"}]
    gap = run(planning(six), types("l40s-4"), deadline=Deadline.after(60.0, clock))
    assert "repair" in gap.cut_short and not gap.verified
    assert (gap.served_by_purchase, gap.still_unplaced) == (2, 1)
    assert any("no time was left to repair" in n for n in gap.notes)


def test_a_milp_without_a_solution_in_time_buys_nothing_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    none = PurchaseSolution({}, {}, 0.0, 35.0, NO_SOLUTION, "milp-highs", 0.0)
    monkeypatch.setattr(capacity_module, "solve_purchase", lambda *a, **kw: none)
    monkeypatch.setattr(capacity_module, "configure_purchase", lambda *a, **kw: None)
    six = [{"id": "emb", "team": "search", "replicas": 3, "gpus": 2, "gpu_models": "L40S-48GB"}]
    gap = run(planning(six), types("l40s-4", "l40s-8"))
    assert gap.cut_short == ("purchase MILP",) and gap.purchases == () and not gap.verified
    assert gap.still_unplaced == 3 and gap.purchase_lower_bound == 35.0
    # The whole question's bound is the relaxation's own: three L40S pairs need one 8-GPU node (70).
    assert gap.lower_bound == 70.0 and gap.solver_status == NO_SOLUTION
    assert "above the total" in gap.bound_note
    assert any("purchase MILP stopped at its" in n and "with no purchase" in n for n in gap.notes)


def test_the_configuration_lp_buys_when_the_pooled_milp_finds_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Six whole L40S in pairs: one 8-GPU node (70) holds all three pairs; the configuration LP buys it
    alone when the pooled MILP has nothing, and the purchase passes the placement check."""
    none = PurchaseSolution({}, {}, 0.0, 0.0, NO_SOLUTION, "milp-highs", 0.0)
    monkeypatch.setattr(capacity_module, "solve_purchase", lambda *a, **kw: none)
    six = [{"id": "emb", "team": "search", "replicas": 3, "gpus": 2, "gpu_models": "L40S-48GB"}]
    gap = run(planning(six), types("l40s-4", "l40s-8"))
    assert [(p.node_type, p.count) for p in gap.purchases] == [("l40s-8", 1)] and gap.verified
    assert gap.solver == "configuration-lp" and gap.still_unplaced == 0


def test_solve_purchase_reports_no_solution_with_the_lp_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MILP stopped by its time limit before any purchase: nothing bought, the LP relaxation's bound."""
    real = purchase_module._Model.solve

    def stopped(self: Any, backend: str, time_limit_s: float, threads: int) -> int:
        return (
            pulp.LpSolutionNoSolutionFound
            if self.cat == pulp.LpInteger
            else real(self, backend, time_limit_s, threads)
        )

    monkeypatch.setattr(purchase_module._Model, "solve", stopped)
    work = [{"id": "w", "replicas": 3, "gpus": 2, "gpu_models": "L40S-48GB"}]
    problem = compile_problem(planning(work), default_catalog(), NOW)
    solution = solve_purchase(list(problem.requests), type_specs(types("l40s-8"), default_catalog()))
    assert solution.status == NO_SOLUTION and solution.counts == {}
    assert solution.lower_bound == pytest.approx(70 * 6 / 8)  # six of the eight GPUs of one node


def test_the_held_input_counts_the_plan_as_running_work() -> None:
    """The re-partition re-plan's input has the plan's placements as running work, in its lookups too
    (a model_copy of the input would keep its cached ``workload_by_id``)."""
    inp = _mig_demand()
    plan = make_plan(inp, now=NOW, time_limit_s=3.0)
    assert inp.workload_by_id["infer"].running_on == ()  # fills the input's cache
    held, back = held_input(inp, plan, default_catalog())
    assert [a.workload for a in plan.assignments] == ["infer"]
    assert len(held.workload_by_id["infer"].running_on) == 1 and held.workload_by_id["infer"].replicas == 2
    assert back == {("infer", 0): ("infer", 0), ("infer", 1): ("infer", 1)}


def test_a_capacity_gap_job_outcome_names_what_the_time_limit_cut_short() -> None:
    gap = CapacityGap(
        demand_replicas=2, nodes_added=1, gpus_added=8, cost=70.0, cut_short=("placement check",)
    )
    assert (
        gap_outcome(gap) == "1 nodes / 8 GPUs to add for 70 USD; cut short by the time limit: placement check"
    )

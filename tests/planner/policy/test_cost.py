"""The price of a rule on hand-made instances, against figures computed by hand: an isolation rule that
keeps a waiting job off the only free node, a quota that binds, and one that does not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from openpyxl import Workbook, load_workbook

from gpuplan.models import IsolationKind, IsolationRule, Placement, Policy, Quota, Workload
from gpuplan.models.catalog import default_catalog
from gpuplan.planner.capacity.node_types import load_node_types
from gpuplan.planner.io.exporters.workbook.policy_sheet import TITLE as POLICY_TITLE
from gpuplan.planner.io.exporters.workbook.policy_sheet import write_policy_cost_sheet
from gpuplan.planner.policy.cost import Prices, Run, policy_cost
from gpuplan.planner.policy.relax import relaxations
from tests._factories import node, planning_input

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
#: The bundled node-type catalog's price of one L40S GPU-hour: a pcie-8x-l40s node (90,000 USD, 8 GPUs)
#: amortised over 3 years of 8,760 hours.
L40S_PER_HOUR = 90_000 / 8 / (3 * 8_760)


def _run() -> Run:
    return Run("cpsat", 0, 1, True, NOW, default_catalog(), 1.0)


def _prices() -> Prices:
    return Prices.of(load_node_types(None), default_catalog())


def test_lifting_an_isolation_rule_places_the_job_it_kept_off_the_only_free_node() -> None:
    # Node a (1 GPU) is team x's; node b's GPU runs y's service, which may not move. y's job, queued for
    # 2 hours, waits: its queue penalty is standard weight 3 x 100 (one GPU) x (8 + 2 hours) = 3,000.
    inp = planning_input(
        [node("a", model="L40S-48GB", count=1), node("b", model="L40S-48GB", count=1)],
        [
            Workload(id="svc", team="y", gpus=1, running_on=(Placement.parse("b:0"),), started_at=NOW),
            Workload(id="job", team="y", gpus=1, queued_since=NOW - timedelta(hours=2)),
        ],
        Policy(isolation=(IsolationRule(kind=IsolationKind.TEAM_EXCLUSIVE, team="x", nodes=("a",)),)),
    )
    rules, _ = relaxations(inp.policy, running=1)
    lifted = [r for r in rules if r.rule == "isolation[0]"]
    assert [r.words for r in lifted] == ["isolation rule lifted: a reserved for team x"]
    [cost] = policy_cost(inp, lifted, _run(), _prices())
    assert cost.cost == 3000 and cost.significant
    assert cost.given.solve.status == "OPTIMAL" and cost.with_rule_relaxed.solve.status == "OPTIMAL"
    assert cost.given.tally.waiting == 1 and cost.with_rule_relaxed.tally.waiting == 0
    assert cost.replicas_placed_change == 1 and cost.gpus_allocated_change == 1
    assert cost.queue_term_change == -3000
    assert cost.money_per_hour == pytest.approx(L40S_PER_HOUR, abs=0.01)
    assert cost.currency == "USD" and cost.example_prices


def test_a_binding_quota_one_gpu_looser_places_one_more_and_a_slack_one_costs_nothing() -> None:
    # Team q may use 1 GPU and asks for 3; team r may use 10 and asks for 1; 4 GPUs are free. Each of q's
    # waiting replicas costs 3 x 100 x 8 = 2,400.
    inp = planning_input(
        [node("n", model="L40S-48GB", count=4)],
        [Workload(id="q-job", team="q", gpus=1, replicas=3), Workload(id="r-job", team="r", gpus=1)],
        Policy(quotas=(Quota(team="q", gpus=1), Quota(team="r", gpus=10))),
    )
    rules, _ = relaxations(inp.policy, running=0)
    looser = [r for r in rules if r.rule in ("quotas[0].gpus", "quotas[1].gpus")]
    assert [r.words for r in looser] == [
        "team q's quota 1 -> 2 GPUs",
        "team r's quota 10 -> 11 GPUs",
    ]
    binding, slack = policy_cost(inp, looser, _run(), _prices())  # most costly first
    assert binding.rule == "quotas[0].gpus" and binding.cost == 2400 and binding.significant
    assert binding.replicas_placed_change == 1 and binding.gpus_allocated_change == 1
    assert binding.given.tally.waiting == 2 and binding.with_rule_relaxed.tally.waiting == 1
    assert slack.rule == "quotas[1].gpus" and slack.cost == 0 and not slack.significant
    assert slack.replicas_placed_change == 0 and slack.gpus_allocated_change == 0
    assert slack.money_per_hour == 0


def test_every_kind_of_rule_is_relaxed_once_and_loose_ones_are_named() -> None:
    policy = Policy(
        quotas=(Quota(team="q", gpus=2),),
        isolation=(IsolationRule(kind=IsolationKind.NO_SHARED_GPU_ACROSS_TEAMS),),
    )
    rules, skipped = relaxations(policy, running=3)
    assert [r.rule for r in rules] == [
        "isolation[0]",
        "quotas[0].gpus",
        "quotas[0]",
        "mig.allow_repartition",
        "disruption.max_moves_per_round",
        "disruption",
        "tiers[0].weight",
        "tiers[1].weight",
    ]
    by_rule = {r.rule: r.policy for r in rules}
    assert by_rule["quotas[0]"].quotas == () and by_rule["isolation[0]"].isolation == ()
    assert by_rule["mig.allow_repartition"].mig.allow_repartition
    assert by_rule["disruption"].disruption.max_moves_per_round == 3
    assert by_rule["disruption"].disruption.max_preemptions_per_round == 3
    assert [t.weight for t in by_rule["tiers[0].weight"].tiers] == [3, 3, 1]
    assert [t.weight for t in by_rule["tiers[1].weight"].tiers] == [10, 1, 1]
    assert skipped == ["mig.allow_create: already allowed", "sharing.allow_change: already allowed"]
    assert policy.quotas[0].gpus == 2  # the policy as given is left alone


def test_a_model_no_node_type_offers_costs_nothing_when_its_allocation_does_not_change() -> None:
    # The openb trace's G3 GPUs have no node type: a plan that changes nothing on them is still priced.
    prices, catalog = _prices(), default_catalog()
    money, _ = prices.per_hour({"G3": 0.0, "L40S-48GB": 1.0}, catalog)
    assert money == pytest.approx(L40S_PER_HOUR, abs=0.01)
    money, note = prices.per_hour({"G3": 1.0}, catalog)
    assert money is None and note.startswith("no node type offers G3")


def test_the_policy_cost_sheet_lists_each_rule_in_a_workbook_that_exists(tmp_path: Path) -> None:
    inp = planning_input(
        [node("n", model="L40S-48GB", count=4)],
        [Workload(id="q-job", team="q", gpus=1, replicas=3), Workload(id="r-job", team="r", gpus=1)],
        Policy(quotas=(Quota(team="q", gpus=1), Quota(team="r", gpus=10))),
    )
    rules, _ = relaxations(inp.policy, running=0)
    costs = policy_cost(inp, rules, _run(), _prices())
    book = tmp_path / "plan.xlsx"
    Workbook().save(book)  # a workbook that exists keeps its sheets
    write_policy_cost_sheet(costs, book)
    write_policy_cost_sheet(costs, book)  # written again: replaced, not added twice
    loaded = load_workbook(book)
    assert loaded.sheetnames.count(POLICY_TITLE) == 1 and len(loaded.sheetnames) == 2
    sheet = loaded[POLICY_TITLE]
    assert sheet.max_row == 1 + len(costs)
    assert [sheet.cell(row=r, column=1).value for r in range(2, 2 + len(costs))] == [c.relaxed for c in costs]

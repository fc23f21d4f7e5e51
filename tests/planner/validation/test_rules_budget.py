"""The disruption budget holds for the plan as a whole, however its actions are spread over rounds: the
validator counts the moves and preemptions the assignments imply against the budget times the rounds the
plan was made for, and a fleet split into parts shares the budget out among them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuplan.models import Action, DisruptionBudget, Plan, PlanningInput, Policy, Workload
from gpuplan.models.plan import MIGRATE, START
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.validate import validate_plan
from gpuplan.solvers.cpsat import pools
from tests._factories import assign, gpus, node, plan, planning_input, wait, whole

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
LONG_AGO = NOW - timedelta(days=1)


def two_runners(budget: DisruptionBudget) -> PlanningInput:
    """Three 2-GPU nodes; ``r0`` and ``r1`` (1 GPU) run on GPU 0 of ``n0`` and ``n1``."""
    return planning_input(
        [node(f"n{i}", gpus=gpus("L40S-48GB", [0, 0])) for i in range(3)],
        [
            Workload.model_validate(
                {"id": f"r{i}", "gpus": 1, "running_on": f"n{i}:0", "started_at": LONG_AGO}
            )
            for i in range(2)
        ]
        + [Workload.model_validate({"id": "job", "gpus": 2, "replicas": 2})],
        Policy(disruption=budget),
    )


def both_moved(rounds: tuple[int, int], provenance: dict[str, object]) -> Plan:
    """Both runners moved to ``n2``, each in its round, and the two jobs started on ``n0`` and ``n1``."""
    p = plan(
        [
            assign("r0", 0, "n2", whole(0)),
            assign("r1", 0, "n2", whole(1)),
            assign("job", 0, "n0", whole(0, 1)),
            assign("job", 1, "n1", whole(0, 1)),
        ]
    )
    actions = (
        Action(kind=MIGRATE, workload="r0", replica=0, round=rounds[0]),
        Action(kind=MIGRATE, workload="r1", replica=0, round=rounds[1]),
        Action(kind=START, workload="job", replica=0, round=rounds[0]),
        Action(kind=START, workload="job", replica=1, round=rounds[1]),
    )
    return p.model_copy(update={"actions": actions, "provenance": provenance})


def test_two_moves_in_two_rounds_of_one_are_two_moves_for_a_one_round_plan() -> None:
    inp = two_runners(DisruptionBudget(max_moves_per_round=1))
    found = validate_plan(both_moved((1, 2), {}), inp)
    assert [(v.rule, v.subject) for v in found] == [("disruption-budget", "plan")]
    assert "r0#0, r1#0" in found[0].message and "max_moves_per_round (1)" in found[0].message
    # Both in round 1 break the round's budget as well.
    assert {(v.rule, v.subject) for v in validate_plan(both_moved((1, 1), {}), inp)} == {
        ("disruption-budget", "plan"),
        ("disruption-budget", "round 1"),
    }
    # A plan made for two rounds (gpuplan replan --rounds 2) may spend two rounds' worth.
    assert validate_plan(both_moved((1, 2), {"replan_rounds": 2}), inp) == []
    assert validate_plan(both_moved((1, 2), {}), two_runners(DisruptionBudget(max_moves_per_round=2))) == []


def test_one_move_within_the_budget_is_valid() -> None:
    inp = two_runners(DisruptionBudget(max_moves_per_round=1))
    p = plan(
        [
            assign("r0", 0, "n2", whole(0)),
            assign("r1", 0, "n1", whole(0)),
            assign("job", 0, "n0", whole(0, 1)),
        ],
        [wait("job", 1)],
    ).model_copy(
        update={
            "actions": (
                Action(kind=MIGRATE, workload="r0", replica=0),
                Action(kind=START, workload="job", replica=0),
            )
        }
    )
    assert validate_plan(p, inp) == []


@pytest.mark.parametrize("budget", [1, 2])
def test_a_split_fleet_shares_the_budget_among_its_parts(
    monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    # Six 2-GPU nodes in three parts of two (4 GPUs each); a runner on GPU 0 of every node and three
    # waiting 2-GPU jobs: each move frees a node for one job, in any part. Each part alone would spend
    # the whole budget; together they may move at most ``budget`` runners.
    monkeypatch.setattr(pools, "POOL_GPUS", 4)
    inp = planning_input(
        [node(f"n{i}", gpus=gpus("L40S-48GB", [0, 0])) for i in range(6)],
        [
            Workload.model_validate(
                {
                    "id": f"r{i}",
                    "tier": "background",
                    "gpus": 1,
                    "running_on": f"n{i}:0",
                    "started_at": LONG_AGO,
                }
            )
            for i in range(6)
        ]
        + [Workload.model_validate({"id": "job", "gpus": 2, "replicas": 3})],
        Policy(disruption=DisruptionBudget(max_moves_per_round=budget)),
    )
    p = make_plan(inp, now=NOW, time_limit_s=6, num_workers=1)  # validated inside
    assert p.solver.terms["parts"] == 3
    moved = [a for a in p.assignments if a.workload.startswith("r") and a.node != f"n{a.workload[1:]}"]
    moved += [a for a in p.assignments if a.workload.startswith("r") and a.gpus != whole(0)]
    assert len({a.workload for a in moved}) <= budget
    assert sum(a.workload == "job" for a in p.assignments) <= budget


def test_a_whole_plan_violation_names_ten_replicas_and_counts_them_all() -> None:
    inp = planning_input(
        [node(n, gpus=gpus("L40S-48GB", [0] * 12)) for n in ("a", "b")],
        [
            Workload.model_validate(
                {"id": f"r{i:02d}", "gpus": 1, "running_on": f"a:{i}", "started_at": LONG_AGO}
            )
            for i in range(12)
        ],
        Policy(disruption=DisruptionBudget(max_moves_per_round=12)),
    )
    p = plan([assign(f"r{i:02d}", 0, "b", whole(i)) for i in range(12)]).model_copy(
        update={"actions": tuple(Action(kind=MIGRATE, workload=f"r{i:02d}", replica=0) for i in range(12))}
    )
    assert validate_plan(p, inp) == []
    tight = inp.model_copy(update={"policy": Policy(disruption=DisruptionBudget(max_moves_per_round=6))})
    p = p.model_copy(
        update={"actions": tuple(a.model_copy(update={"round": 1 + i // 6}) for i, a in enumerate(p.actions))}
    )
    found = validate_plan(p, tight)
    assert [(v.rule, v.subject) for v in found] == [("disruption-budget", "plan")]
    assert "moves 12 running replica(s) (r00#0, " in found[0].message
    assert "r09#0, ...)" in found[0].message and "r10#0" not in found[0].message

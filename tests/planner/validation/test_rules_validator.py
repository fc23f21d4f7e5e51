"""Hand-made plans the validator used to accept: sharing changes to replicas the policy does not give,
MIG on a GPU model without MIG, and MIG layout changes without their actions. (Moves spread over rounds
beyond the budget: ``test_rules_budget.py``.)"""

from __future__ import annotations

from gpuplan.models import Action, MigLayout, NodeSharing, Plan, Policy, SharingPolicy, TimeSliced, Workload
from gpuplan.models.cluster import sharing_text
from gpuplan.models.plan import CREATE, DESTROY, SET_SHARING, START
from gpuplan.planner.validation.validate import check_plan, validate_plan
from tests._factories import (
    assign,
    frac,
    gpus,
    instances,
    layout,
    mig,
    mig_gpu,
    node,
    plan,
    planning_input,
    wait,
)


def time_sliced(replicas: int) -> TimeSliced:
    return TimeSliced.model_validate({"time-slicing": {"replicas": replicas}})


def _idle_node_plan(sharing: object, change: TimeSliced, policy: Policy) -> list[tuple[str, str, str]]:
    """The rules broken by a plan that changes idle L40S node ``ts`` (mode ``sharing``) to ``change``."""
    inp = planning_input(
        [node("ts", gpus=gpus("L40S-48GB", [0]), sharing=sharing)],
        [Workload.model_validate({"id": "nb", "gpu_milli": 100})],
        policy,
    )
    actions = (
        Action(kind=SET_SHARING, node="ts", to=sharing_text(change)),
        Action(kind=START, workload="nb", replica=0, to="ts:0=100"),
    )
    p = plan([assign("nb", 0, "ts", frac(0, 100))]).model_copy(
        update={"sharing": (NodeSharing(node="ts", sharing=change),), "actions": actions}
    )
    return [(v.rule, v.subject, v.message) for v in validate_plan(p, inp)]


def test_a_sharing_change_and_a_placement_need_their_actions() -> None:
    """A switch to time-slicing with no ``set-sharing`` action, and a new placement with no ``start``
    action (or one that starts it elsewhere), are refused, as a MIG change without its actions is."""
    inp = planning_input(
        [node("ts", gpus=gpus("L40S-48GB", [0]), sharing="exclusive")],
        [Workload.model_validate({"id": "nb", "gpu_milli": 100})],
    )
    bare = plan([assign("nb", 0, "ts", frac(0, 100))]).model_copy(
        update={"sharing": (NodeSharing(node="ts", sharing=time_sliced(4)),)}
    )
    found = [(v.rule, v.subject, v.message) for v in validate_plan(bare, inp)]
    assert [(r, s) for r, s, _ in found] == [
        ("sharing-unscheduled", "node ts"),
        ("start-unscheduled", "workload nb replica 0"),
    ]
    assert found[0][2] == (
        "The plan changes node 'ts' to time-slicing with 4 replicas (fractions only) but has no "
        "set-sharing action for it."
    )
    wrong = bare.model_copy(
        update={
            "actions": (
                Action(kind=SET_SHARING, node="ts", to="time-slicing:4"),
                Action(kind=START, workload="nb", replica=0, to="ts:0=200"),
            )
        }
    )
    assert [(v.rule, v.message) for v in validate_plan(wrong, inp)] == [
        (
            "start-unscheduled",
            "The plan places workload nb replica 0 on ts:0=100 but its start action starts it on ts:0=200.",
        )
    ]
    # A set-sharing action to another mode does not apply this change.
    other = wrong.model_copy(
        update={"actions": (Action(kind=SET_SHARING, node="ts", to="time-slicing:8"), *wrong.actions[1:])}
    )
    assert "sharing-unscheduled" in {v.rule for v in validate_plan(other, inp)}


def test_a_node_switched_to_time_slicing_gets_the_policys_replicas() -> None:
    found = _idle_node_plan("exclusive", time_sliced(64), Policy())
    assert [(r, s) for r, s, _ in found] == [("sharing-change", "node ts")]
    assert "time-slicing with 64 replicas" in found[0][2] and "policy's 4 replicas" in found[0][2]
    assert _idle_node_plan("exclusive", time_sliced(4), Policy()) == []
    assert _idle_node_plan("exclusive", time_sliced(64), Policy(sharing=SharingPolicy(replicas=64))) == []


def test_a_plan_does_not_change_the_replicas_of_a_time_sliced_node() -> None:
    # 2 -> 8 is no mode switch, whether or not the policy's replicas are 8.
    for policy in (Policy(), Policy(sharing=SharingPolicy(replicas=8))):
        found = _idle_node_plan({"time-slicing": {"replicas": 2}}, time_sliced(8), policy)
        assert [(r, s) for r, s, _ in found] == [("sharing-change", "node ts")]
        assert "time-sliced with 2 replicas already" in found[0][2]


def test_mig_on_a_gpu_model_without_mig_is_refused() -> None:
    inp = planning_input(
        [node("l", gpus=gpus("L40S-48GB", [0, 0]))],
        [Workload.model_validate({"id": "q", "mig_profile": "1g.10gb"})],
    )
    on = plan([], [wait("q", 0)], [layout("l", 0)])  # MIG mode on, no instance
    assert [(v.rule, v.subject) for v in validate_plan(on, inp)] == [("gpu-model", "node l gpu 0")]
    used = plan([assign("q", 0, "l", mig(1, "1g.10gb", 0))], [], [layout("l", 1, ("1g.10gb", 0))])
    assert ("gpu-model", "node l gpu 1") in {(v.rule, v.subject) for v in validate_plan(used, inp)}


#: 10 nodes x 8 A100-80GB, each GPU one idle 7g.80gb.
NODES, GPUS = 10, 8
SEVEN_SMALL = tuple(("1g.10gb", s) for s in range(7))


def _repartitioned() -> tuple[Plan, list[Action]]:
    """Every GPU re-partitioned from 7g.80gb to seven 1g.10gb, and the 8 actions each change needs."""
    layouts = [
        MigLayout(node=f"a{n}", gpu=g, instances=instances(*SEVEN_SMALL))
        for n in range(NODES)
        for g in range(GPUS)
    ]
    actions = [
        Action(kind=kind, node=lay.node, gpu=lay.gpu, detail=detail)
        for lay in layouts
        for kind, detail in [(DESTROY, "7g.80gb@0"), *((CREATE, f"{p}@{s}") for p, s in SEVEN_SMALL)]
    ]
    return plan([], [], layouts), actions


def test_mig_layout_changes_need_their_actions() -> None:
    full = [{"index": g, "model": "A100-SXM4-80GB", **mig_gpu(g, ("7g.80gb", 0))} for g in range(GPUS)]
    inp = planning_input(
        [node(f"a{n}", gpus=full) for n in range(NODES)],
        [],
        Policy.model_validate({"mig": {"allow_repartition": True}}),
    )
    p, actions = _repartitioned()
    found = validate_plan(p, inp)  # actions: []
    assert len(found) == NODES * GPUS and {v.rule for v in found} == {"mig-unscheduled"}
    assert found[0].subject == "node a0 gpu 0"
    assert "destroy-mig 7g.80gb@0" in found[0].message and "create-mig 1g.10gb@6" in found[0].message
    assert validate_plan(p.model_copy(update={"actions": tuple(actions)}), inp) == []
    # One create missing: only that GPU, naming only that instance.
    fewer = [a for a in actions if (a.node, a.gpu, a.detail) != ("a3", 5, "1g.10gb@2")]
    found = validate_plan(p.model_copy(update={"actions": tuple(fewer)}), inp)
    assert [(v.rule, v.subject) for v in found] == [("mig-unscheduled", "node a3 gpu 5")]
    assert found[0].message.endswith("no action for create-mig 1g.10gb@2.")
    # A trial plan checked before its actions are derived says the family was skipped.
    report = check_plan(p, inp, actions_derived=False)
    assert report.valid and [k.family for k in report.skipped] == ["actions"]

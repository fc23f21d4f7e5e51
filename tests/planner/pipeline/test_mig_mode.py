"""Turning MIG mode off or on: an action like a re-partition (issue 24, item 8).

A whole-GPU request beside idle MIG GPUs, or an 8-GPU job on a node whose other seven GPUs are in MIG
mode, is placed by turning MIG off on the idle GPUs when the policy allows re-partitioning; the plan
says so with a ``set-mig-mode`` action before the starts, the validator checks the rules of a mode
change, the executor's simulator applies it, and the Kubernetes export changes the node's
``nvidia.com/mig.config``. When the policy forbids it, the reason names the switch, never NEVER_FITS.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import MigMode, Plan, PlanningInput, Policy, Workload, default_catalog
from gpuplan.models.plan import CREATE, SET_MIG_MODE, START, Action
from gpuplan.planner.executor import Executor, SimCluster, unfit
from gpuplan.planner.io.exporters import kubernetes, migparted
from gpuplan.planner.io.importers.kubernetes import MigPartedConfig
from gpuplan.planner.pipeline.actions import plan_actions
from gpuplan.planner.planning import make_plan
from gpuplan.planner.presentation import summary
from gpuplan.planner.store.history import plan_diff
from gpuplan.planner.validation.validate import validate_plan
from tests._factories import assign, layout, mig, node, plan, planning_input, wait, whole

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
H100 = "H100-80GB"
A100 = "A100-SXM4-80GB"
ALLOWED = {"mig": {"allow_repartition": True, "repartition_cost": 7}}
FORBIDDEN = {"mig": {"allow_repartition": False}}
SOLVERS = ["greedy-fgd", "first-fit", "best-fit", "cpsat", "milp-highs"]


def _mig(index: int, model: str = H100, *pairs: tuple[str, int]) -> dict[str, Any]:
    return {
        "index": index,
        "model": model,
        "mig": {"instances": [{"profile": p, "start": s} for p, s in pairs]},
    }


def two_idle_mig_gpus(policy: dict[str, Any], **work: Any) -> PlanningInput:
    """The issue's first case: node m1's two H100s are in MIG mode (a 3g.40gb each, idle); one whole-GPU
    training job waits."""
    gpus = [_mig(i, H100, ("3g.40gb", 0)) for i in range(2)]
    job = Workload.model_validate({"id": "train", "gpus": 1, **work})
    return planning_input([node("m1", gpus=gpus)], [job], Policy.model_validate(policy))


def seven_mig_one_plain(policy: dict[str, Any], gang: bool) -> PlanningInput:
    """The issue's second case: an 8 x H100 node with seven idle GPUs in MIG mode and one plain; an
    8-GPU job (one replica of 8 GPUs, or a gang of eight 1-GPU replicas) waits."""
    gpus = [_mig(i, H100, ("7g.80gb", 0)) for i in range(7)] + [{"index": 7, "model": H100}]
    shape = {"gpus": 1, "replicas": 8, "gang": "g8"} if gang else {"gpus": 8}
    job = Workload.model_validate({"id": "big", **shape})
    return planning_input([node("dgx", gpus=gpus)], [job], Policy.model_validate(policy))


def _modes(p: Plan) -> list[tuple[int, str, int | None, str | None, str | None]]:
    return [(a.round, a.node or "", a.gpu, a.from_, a.to) for a in p.actions if a.kind == SET_MIG_MODE]


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_whole_gpu_request_turns_mig_off_on_one_idle_gpu(solver: str) -> None:
    inp = two_idle_mig_gpus(ALLOWED)
    p = make_plan(inp, solver=solver, now=NOW, time_limit_s=10)
    assert validate_plan(p, inp) == []
    assert not p.unplaced
    (a,) = p.assignments
    assert a.node == "m1" and len(a.gpus) == 1 and a.gpus[0].kind == "whole"
    gpu = a.gpus[0].index
    # Only the GPU the job takes is switched; the other keeps its instance.
    assert p.mig_modes == (MigMode(node="m1", gpu=gpu, enabled=False),)
    assert _modes(p) == [(1, "m1", gpu, "on", "off")]
    kinds = [x.kind for x in p.actions]
    assert kinds.index(SET_MIG_MODE) < kinds.index(START)
    # One mode change at the policy's re-partition cost (7) and nothing else disturbed.
    assert p.solver.terms["disruption"] == 7
    assert p.solver.terms["mig_mode_changes"] == 1
    assert p.metrics["mig_mode_changes"] == 1


@pytest.mark.parametrize("solver", ["greedy-fgd", "cpsat"])
def test_when_the_policy_forbids_it_the_reason_names_the_switch_not_never_fits(solver: str) -> None:
    inp = two_idle_mig_gpus(FORBIDDEN)
    p = make_plan(inp, solver=solver, now=NOW, time_limit_s=10)
    assert validate_plan(p, inp) == []
    assert p.mig_modes == () and not p.assignments
    (u,) = p.unplaced
    assert u.code == "MIG_MODE"
    assert "turning MIG off on m1 GPU 0, m1 GPU 1 would serve it" in u.reason
    assert "mig.allow_repartition is false" in u.reason


@pytest.mark.parametrize("gang", [False, True], ids=["one-8-gpu-replica", "gang-of-8"])
@pytest.mark.parametrize("solver", ["greedy-fgd", "cpsat"])
def test_seven_idle_mig_gpus_serve_an_8_gpu_job(solver: str, gang: bool) -> None:
    inp = seven_mig_one_plain(ALLOWED, gang)
    p = make_plan(inp, solver=solver, now=NOW, time_limit_s=10)
    assert validate_plan(p, inp) == []
    assert not p.unplaced
    assert sorted(g.index for a in p.assignments for g in a.gpus) == list(range(8))
    assert sorted((m.gpu, m.enabled) for m in p.mig_modes) == [(i, False) for i in range(7)]
    assert sorted(m[2] or 0 for m in _modes(p)) == list(range(7))
    assert p.solver.terms["disruption"] == 7 * 7


@pytest.mark.parametrize("gang", [False, True], ids=["one-8-gpu-replica", "gang-of-8"])
def test_seven_idle_mig_gpus_under_a_policy_that_forbids_switching(gang: bool) -> None:
    inp = seven_mig_one_plain(FORBIDDEN, gang)
    p = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10)
    assert validate_plan(p, inp) == []
    assert p.mig_modes == ()
    assert all(u.code != "NEVER_FITS" for u in p.unplaced)
    seven = "turning MIG off on dgx GPU 0, dgx GPU 1, dgx GPU 2, dgx GPU 3 and 3 more"
    if not gang:
        (u,) = p.unplaced
        assert u.code == "MIG_MODE"
        assert f"{seven} would serve it" in u.reason
    else:
        # The members fit one by one on the plain GPU: the gang waits, and its reason says what would help.
        assert {u.code for u in p.unplaced} == {"GANG"}
        assert all(f"{seven} would give it room now" in u.reason for u in p.unplaced)
    assert all(
        "but the policy does not allow it (mig.allow_repartition is false)" in u.reason for u in p.unplaced
    )


def test_work_blocked_by_capacity_is_told_which_idle_mig_gpu_would_give_it_room() -> None:
    """GPU 0 runs a job, GPU 1 is an idle MIG GPU; the default policy forbids switching it."""
    gpus = [{"index": 0, "model": H100}, _mig(1, H100, ("3g.40gb", 0))]
    work = [
        Workload.model_validate({"id": "run", "gpus": 1, "running_on": "m1:0"}),
        Workload.model_validate({"id": "new", "gpus": 1}),
    ]
    inp = planning_input([node("m1", gpus=gpus)], work, Policy())
    p = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10)
    (u,) = p.unplaced
    assert u.code == "NO_CAPACITY"
    assert u.reason.endswith(
        "turning MIG off on m1 GPU 1 would give it room now, but the policy does not allow it "
        "(mig.allow_repartition is false)"
    )


def test_a_busy_mig_gpu_is_not_switched() -> None:
    """GPU 0 runs a MIG service; a 2-GPU job cannot have it, a 1-GPU job gets GPU 1 only."""
    gpus = [_mig(0, H100, ("3g.40gb", 0)), _mig(1, H100, ("3g.40gb", 0))]
    svc = Workload.model_validate({"id": "svc", "mig_profile": "3g.40gb", "running_on": "m1:0/3g.40gb@0"})
    for n, placed in ((2, False), (1, True)):
        job = Workload.model_validate({"id": "train", "gpus": n})
        inp = planning_input([node("m1", gpus=gpus)], [svc, job], Policy.model_validate(ALLOWED))
        p = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10)
        assert validate_plan(p, inp) == []
        assert all(m.gpu == 1 for m in p.mig_modes)
        assert ("svc", 0) in {(a.workload, a.replica) for a in p.assignments}
        if placed:
            assert [(a.workload, a.gpus) for a in p.assignments if a.workload == "train"] == [
                ("train", whole(1))
            ]
        else:
            (u,) = p.unplaced
            assert u.code == "MIG_MODE" and "m1 GPU 0 is not drained" in u.reason


def test_mig_work_turns_mig_on_on_an_idle_plain_gpu() -> None:
    """An A100 with MIG off and three 1g.10gb notebooks waiting: MIG goes on, then the instances."""
    inp = planning_input(
        [node("a", gpus=[{"index": 0, "model": A100}])],
        [Workload.model_validate({"id": "nb", "mig_profile": "1g.10gb", "replicas": 3})],
        Policy.model_validate(ALLOWED),
    )
    p = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10)
    assert validate_plan(p, inp) == []
    assert not p.unplaced
    assert p.mig_modes == (MigMode(node="a", gpu=0, enabled=True),)
    kinds = [x.kind for x in p.actions]
    assert kinds[0] == SET_MIG_MODE and kinds.count(CREATE) == 3 and kinds.count(START) == 3
    assert _modes(p) == [(1, "a", 0, "off", "on")]


def _switch_plan(inp: PlanningInput, gpu: int = 0, *, actions: bool = True) -> Plan:
    """A hand-made plan: MIG off on m1's ``gpu``, the training job there whole."""
    modes = (MigMode(node="m1", gpu=gpu, enabled=False),)
    assignments = (assign("train", 0, "m1", whole(gpu)),)
    p = plan(assignments).model_copy(update={"mig_modes": modes})
    if actions:
        p = p.model_copy(
            update={"actions": plan_actions(inp, assignments, (), default_catalog(), NOW, mig_modes=modes)}
        )
    return p


def _rules(p: Plan, inp: PlanningInput) -> set[str]:
    return {v.rule for v in validate_plan(p, inp)}


def test_the_validator_checks_every_rule_of_a_mode_change() -> None:
    allowed = two_idle_mig_gpus(ALLOWED)
    assert _rules(_switch_plan(allowed), allowed) == set()
    # The policy's switch.
    forbidden = two_idle_mig_gpus(FORBIDDEN)
    assert _rules(_switch_plan(forbidden), forbidden) == {"mig-mode-change"}
    # Its action.
    assert _rules(_switch_plan(allowed, actions=False), allowed) == {"mig-unscheduled", "start-unscheduled"}
    # Whole use of a GPU left in MIG mode.
    left_on = plan((assign("train", 0, "m1", whole(0)),))
    assert "mig-mixed-fraction" in _rules(left_on, allowed)
    # A layout on a GPU the plan turns off.
    laid = _switch_plan(allowed).model_copy(update={"mig_layouts": (layout("m1", 0, ("3g.40gb", 0)),)})
    assert "mig-mode" in _rules(laid, allowed)
    # A GPU that keeps running work is not drained.
    busy = planning_input(
        allowed.cluster.nodes,
        [
            *allowed.workloads,
            Workload.model_validate({"id": "svc", "mig_profile": "3g.40gb", "running_on": "m1:0/3g.40gb@0"}),
        ],
        allowed.policy,
    )
    kept = _switch_plan(busy).model_copy(
        update={
            "assignments": (*_switch_plan(busy).assignments, assign("svc", 0, "m1", mig(0, "3g.40gb", 0)))
        }
    )
    assert "mig-mode-change" in _rules(kept, busy)
    # A GPU that does not support MIG, and one that does not exist.
    l40s = planning_input(
        [node("m1", gpus=[{"index": 0, "model": "L40S-48GB"}])],
        [Workload.model_validate({"id": "train", "gpus": 1})],
        Policy.model_validate(ALLOWED),
    )
    on = plan((), (wait("train", 0),)).model_copy(
        update={"mig_modes": (MigMode(node="m1", gpu=0, enabled=True),)}
    )
    assert "gpu-model" in _rules(on, l40s)
    ghost = plan((), (wait("train", 0),)).model_copy(
        update={"mig_modes": (MigMode(node="m1", gpu=5, enabled=False),)}
    )
    assert "unknown-ref" in _rules(ghost, allowed)


def test_the_simulator_applies_the_mode_change_and_starts_the_job() -> None:
    inp = two_idle_mig_gpus(ALLOWED)
    p = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=5)
    sim = SimCluster(inp.cluster, default_catalog(), NOW)
    before = sim.observe().cluster.node_by_name["m1"]  # observed before the change, then after it
    assert all(g.mig is not None for g in before.gpus)
    outcomes = sim.apply(p.actions, {(a.workload, a.replica): a for a in p.assignments})
    assert all(o.ok for o in outcomes), outcomes
    (m,) = p.mig_modes
    seen = sim.observe().cluster.node_by_name["m1"]
    assert seen.gpu_by_index[m.gpu].mig is None
    assert seen.gpu_by_index[1 - m.gpu].mig is not None
    # A second switch of a GPU that now runs the job fails: it is not drained.
    again = Action(kind=SET_MIG_MODE, node="m1", gpu=m.gpu, from_="off", to="on")
    (o,) = sim.apply([again], {})
    assert not o.ok and "not drained" in (o.reason or "")


def test_the_kubernetes_export_relabels_the_node_with_mig_off_on_that_gpu() -> None:
    inp = two_idle_mig_gpus(ALLOWED, image="registry.example/train:1")
    p = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10)
    (m,) = p.mig_modes
    # The export adds its config to the GPU Operator's mig-parted ConfigMap (an empty one here).
    operator = MigPartedConfig(name="default-mig-parted-config", namespace="gpu-operator", text="x",
                               document={"version": "v1", "mig-configs": {}})  # fmt: skip
    options = kubernetes.ExportOptions(mig_parted=operator)
    steps = kubernetes.steps(p, inp, kubernetes.Images(default="registry.example/train:1"), options=options)
    kinds = [s.kind for s in steps]
    assert kinds.index("mig") < kinds.index("start")
    mig_step = steps[kinds.index("mig")]
    config_map, node = mig_step.patches
    assert config_map.body[0] == {"op": "test", "path": "/data/config.yaml", "value": "x"}
    doc = yaml.safe_load(config_map.body[1]["value"])
    assert migparted.check_config(doc) == []
    (name,) = doc["mig-configs"]
    entries = doc["mig-configs"][name]
    assert {"devices": [m.gpu], "mig-enabled": False} in entries
    assert {"devices": [1 - m.gpu], "mig-enabled": True, "mig-devices": {"3g.40gb": 1}} in entries
    assert (node.kind, node.name) == ("node", "m1")
    assert node.body["metadata"]["labels"] == {kubernetes.MIG_CONFIG_LABEL: name}
    for d in (d for s in steps for d in s.objects if d["kind"] != "PodGroup"):
        for version in ("1.29", "1.30", "1.31"):
            kubernetes_validate.validate(d, version, strict=True)
    # The mig-parted file of the plan says the same.
    rendered = yaml.safe_load(migparted.render(inp.cluster, p.mig_layouts, p.mig_modes))
    assert rendered == doc


def test_a_node_whose_last_mig_gpu_goes_off_keeps_a_config() -> None:
    inp = planning_input(
        [node("m1", gpus=[_mig(0, H100, ("7g.80gb", 0))])],
        [Workload.model_validate({"id": "train", "gpus": 1})],
        Policy.model_validate(ALLOWED),
    )
    doc = yaml.safe_load(migparted.render(inp.cluster, (), (MigMode(node="m1", gpu=0, enabled=False),)))
    assert list(doc["mig-configs"].values()) == [[{"devices": [0], "mig-enabled": False}]]


#: Tiny fleets: one node, two A100s each in MIG mode (one idle 3g.40gb) or not, the first maybe running
#: a MIG service or a whole job; one waiting whole-GPU job or MIG notebook; the policy's switch on or off.
TINY = list(
    itertools.product([True, False], [True, False], ["none", "mig", "whole"], ["whole", "mig"], [True, False])
)


@pytest.mark.parametrize(("mig0", "mig1", "running", "ask", "allow"), TINY)
def test_every_tiny_instance_plans_valid_and_places_exactly_when_a_gpu_can_serve(
    mig0: bool, mig1: bool, running: str, ask: str, allow: bool
) -> None:
    gpus = [_mig(0, A100, ("3g.40gb", 0)) if mig0 else {"index": 0, "model": A100}]
    gpus.append(_mig(1, A100, ("3g.40gb", 0)) if mig1 else {"index": 1, "model": A100})
    work = []
    if running == "mig" and mig0:
        work.append(
            Workload.model_validate({"id": "run", "mig_profile": "3g.40gb", "running_on": "a:0/3g.40gb@0"})
        )
    elif running == "whole" and not mig0:
        work.append(Workload.model_validate({"id": "run", "gpus": 1, "running_on": "a:0"}))
    shape = {"gpus": 1} if ask == "whole" else {"mig_profile": "1g.10gb"}
    work.append(Workload.model_validate({"id": "new", **shape}))
    policy = {"mig": {"allow_repartition": allow, "allow_create": True}}
    inp = planning_input([node("a", gpus=gpus)], work, Policy.model_validate(policy))
    # Expected by hand: GPU i serves the ask as it is, or after a switch when idle and allowed.
    busy0 = len(work) == 2
    modes = [mig0, mig1]
    idle = [not busy0, True]
    if ask == "whole":
        serves = [(not modes[i] and idle[i]) or (modes[i] and idle[i] and allow) for i in range(2)]
    else:
        # A MIG GPU has free slices beside its 3g.40gb (and may be re-partitioned); a plain one must switch.
        serves = [modes[i] or (idle[i] and allow) for i in range(2)]
    for solver in ("greedy-fgd", "cpsat"):
        p = make_plan(inp, solver=solver, now=NOW, time_limit_s=5)
        assert validate_plan(p, inp) == [], (solver, p.mig_modes)
        placed = any(a.workload == "new" for a in p.assignments)
        assert placed == any(serves), (solver, [(u.code, u.reason) for u in p.unplaced])
        assert all(u.code != "NEVER_FITS" for u in p.unplaced)
        if not allow:
            assert p.mig_modes == ()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_small_mig_fleets_give_valid_plans_and_never_never_fits_for_a_gpu_that_fits(
    data: st.DataObject,
) -> None:
    """Random A100 fleets (each GPU in MIG mode with an idle instance or not, some running work), whole,
    fractional and MIG asks, the switch on or off: the plan is valid, its mode changes are on GPUs the
    plan leaves drained, and a 1-GPU ask is never NEVER_FITS (every A100 could serve it)."""
    nodes = []
    running: list[Workload] = []
    for n in range(data.draw(st.integers(1, 2))):
        gpus = []
        for i in range(data.draw(st.integers(1, 2))):
            on = data.draw(st.booleans())
            gpus.append(_mig(i, A100, ("3g.40gb", 0)) if on else {"index": i, "model": A100})
            if data.draw(st.integers(0, 3)) == 0:
                spec = (
                    {"mig_profile": "3g.40gb", "running_on": f"n{n}:{i}/3g.40gb@0"}
                    if on
                    else {"gpus": 1, "running_on": f"n{n}:{i}"}
                )
                running.append(Workload.model_validate({"id": f"r{n}{i}", **spec}))
        nodes.append(node(f"n{n}", gpus=gpus, sharing="exclusive"))
    asks = data.draw(st.lists(st.sampled_from(["whole", "mig"]), min_size=1, max_size=3))
    waiting = [
        Workload.model_validate(
            {"id": f"w{k}", **({"gpus": 1} if a == "whole" else {"mig_profile": "1g.10gb"})}
        )
        for k, a in enumerate(asks)
    ]
    allow = data.draw(st.booleans())
    inp = planning_input(
        nodes, [*running, *waiting], Policy.model_validate({"mig": {"allow_repartition": allow}})
    )
    p = make_plan(inp, solver=data.draw(st.sampled_from(["greedy-fgd", "cpsat"])), now=NOW, time_limit_s=5)
    assert validate_plan(p, inp) == []
    held = {
        (a.node, g.index) for a in p.assignments for g in a.gpus if (a.workload, a.replica) not in _new(inp)
    }
    for m in p.mig_modes:
        assert allow
        assert (m.node, m.gpu) not in {
            (pl.node, g.index) for w in running for pl in w.running_on for g in pl.gpus
        } or (m.node, m.gpu) not in held
    assert all(u.code != "NEVER_FITS" for u in p.unplaced)


def _new(inp: PlanningInput) -> set[tuple[str, int]]:
    return {(w.id, r) for w in inp.workloads for r in range(len(w.running_on), w.replicas)}


def test_the_summary_says_why_a_plan_with_switchable_gpus_is_not_called_optimal() -> None:
    inp = two_idle_mig_gpus(ALLOWED)
    p = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10)
    # Both GPUs could switch (the plan switched one): the solve fixed their modes.
    assert p.status.value == "FEASIBLE" and p.solver.terms["mig_modes_fixed"] == 2
    assert p.solver.best_bound == 0 and p.solver.bound_source == "knapsack"
    assert "the pre-pass fixed the MIG modes of 2 GPU(s) whose mode could change" in summary.render(p, inp)


def test_the_plan_diff_names_a_gpu_turned_off() -> None:
    inp = two_idle_mig_gpus(FORBIDDEN)
    before = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=5)
    after = make_plan(two_idle_mig_gpus(ALLOWED), solver="greedy-fgd", now=NOW, time_limit_s=5)
    (m,) = after.mig_modes
    diff = plan_diff(before, after)
    assert f"m1:{m.gpu}: 3g.40gb@0 -> MIG off" in diff.layouts


def test_the_executor_switches_mig_off_and_starts_the_gang_then_has_nothing_left() -> None:
    """Through the executor on the simulator: round one turns MIG off on the seven idle GPUs and starts
    the eight members; the next round plans on the observed GPUs and changes nothing."""
    inp = seven_mig_one_plain(ALLOWED, gang=True)
    sim = SimCluster(inp.cluster, default_catalog(), NOW)
    ex = Executor(sim, lambda i, now: make_plan(i, solver="greedy-fgd", now=now), inp.policy)
    report = ex.round(list(inp.workloads))
    assert not report.failed
    kinds = [o.action.kind for o in report.outcomes]
    assert kinds.count(SET_MIG_MODE) == 7 and kinds.count(START) == 8
    assert all(g.mig is None for g in sim.observe().cluster.node_by_name["dgx"].gpus)
    again = ex.round(list(inp.workloads))
    assert again.plan.mig_modes == () and not again.outcomes


@pytest.mark.parametrize(("policy", "dropped"), [(ALLOWED, []), (FORBIDDEN, ["big"])])
def test_work_that_fits_once_idle_gpus_switch_is_not_dropped_as_unfit(
    policy: dict[str, Any], dropped: list[str]
) -> None:
    """The executor's ``drop_unfit`` check (the FGD paper's protocol): an 8-GPU job on a node with seven
    idle MIG GPUs fits when the policy lets them switch, and is dropped only when it does not."""
    inp = seven_mig_one_plain(policy, gang=False)
    sim = SimCluster(inp.cluster, default_catalog(), NOW)
    assert unfit(sim.observe(), list(inp.workloads), inp.policy, default_catalog()) == dropped

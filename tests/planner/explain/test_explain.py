"""Why-not explanations: one crafted instance per reason code, where the change that places the
workload, and where it lands, are known by hand. Each test checks the code, that the counterfactual
names that change (workload, node, GPU, quota amount ...) and that a CP-SAT plan of the input edited by
hand as the change says (written out in the test) places the workload; and a hypothesis check that
explanations never contradict the plan."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.cli import main
from gpuplan.models import Assignment, Plan, PlanningInput, Policy, Workload, default_catalog
from gpuplan.models.cluster import MigConfig
from gpuplan.models.plan import Counterfactual, Explanation
from gpuplan.models.workload import GpuRef, Placement
from gpuplan.planner.explain.findings import BLOCKED, FITS_NOW, GANG, SOLVER_LIMIT, TRADE_OFF
from gpuplan.planner.explain.reasons import explain_all, explain_workload, target_of
from gpuplan.planner.planning import make_plan
from tests import _factories as factories
from tests._factories import gpus, node, planning_input

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
EARLIER = (NOW - timedelta(minutes=10)).isoformat()
CATALOG = default_catalog()
#: What a counterfactual may change.
KINDS = {"migrate", "preempt", "wait", "raise_quota", "repartition", "relax_topology", "allow_model",
         "allow_team", "add_node", "replan"}  # fmt: skip


def _links(n: int, nv: set[tuple[int, int]]) -> list[dict[str, Any]]:
    return [
        {"a": a, "b": b, "kind": "NV4" if (a, b) in nv else "SYS"} for a in range(n) for b in range(a + 1, n)
    ]


def _w(wid: str, **fields: Any) -> Workload:
    return Workload.model_validate({"id": wid, "cpu_milli": 1000, "memory_mib": 1024, **fields})


def _plan(inp: PlanningInput) -> Plan:
    return make_plan(inp, solver="cpsat", now=NOW, time_limit_s=5.0, num_workers=1)


def _placed(inp: PlanningInput, workload: str) -> list[Assignment]:
    """Where a CP-SAT plan of ``inp`` puts the replicas of ``workload`` that do not run yet."""
    running = len(inp.workload_by_id[workload].running_on)
    return [a for a in _plan(inp).assignments if a.workload == workload and a.replica >= running]


def _gpus(a: Assignment | None) -> list[int]:
    assert a is not None
    return sorted(g.index for g in a.gpus)


def _explain(inp: PlanningInput, workload: str) -> tuple[Plan, Explanation]:
    plan = _plan(inp)
    found = explain_workload(inp, plan, workload, catalog=CATALOG, time_limit_s=2.0)
    assert len(found) == 1, found
    return plan, found[0]


def _check(inp: PlanningInput, workload: str, code: str, kind: str) -> tuple[Explanation, Counterfactual]:
    """The explanation of the waiting ``workload`` has ``code`` and a verified counterfactual of
    ``kind``; the explanation and the first such counterfactual."""
    plan, e = _explain(inp, workload)
    assert (workload, 0) in {(u.workload, u.replica) for u in plan.unplaced}
    assert e.code == code, (e.code, e.reason)
    assert e.reason
    kinds = [c.kind for c in e.counterfactuals]
    assert kind in kinds, [c.summary for c in e.counterfactuals]
    assert all(c.verified for c in e.counterfactuals)
    cf = next(c for c in e.counterfactuals if c.kind == kind)
    assert cf.placement is not None and cf.placement.workload == workload
    return e, cf


def _h100(name: str, count: int, **fields: Any) -> Any:
    return node(name, gpus=gpus("H100-80GB", [0] * count), links=_links(count, set()), **fields)


def test_no_capacity_waits_for_a_predicted_end() -> None:
    inp = planning_input(
        [_h100("n1", 2)],
        [
            _w("old", gpus=2, running_on="n1:0,1", duration_s=3600, queued_since=EARLIER),
            _w("new", gpus=1),
        ],
    )
    _, e = _explain(inp, "new")
    assert e.code == "NO_CAPACITY" and "n1" in e.resources
    wait = next(c for c in e.counterfactuals if c.kind == "wait")
    assert wait.summary == "after old ends on n1 at 2026-11-29 12:50 (predicted)"
    (end,) = wait.changes
    assert (end.kind, end.workload, end.replica, end.at) == ("end", "old", 0, "2026-11-29T12:50:00+00:00")
    assert wait.placement is not None and wait.placement.node == "n1" and len(wait.placement.gpus) == 1
    # Once old has ended, n1 is empty: new runs there.
    after = planning_input([_h100("n1", 2)], [_w("new", gpus=1)])
    assert [a.node for a in _placed(after, "new")] == ["n1"]


def test_no_nvlink_clique_allows_pcie() -> None:
    n1 = node("n1", gpus=gpus("H100-80GB", [0, 0, 0, 0]), links=_links(4, {(0, 1), (2, 3)}))
    running = [_w("a", gpus=1, running_on="n1:0"), _w("b", gpus=1, running_on="n1:2")]
    inp = planning_input([n1], [*running, _w("t", gpus=2, topology="nvlink")])
    _, cf = _check(inp, "t", "NO_NVLINK_CLIQUE", "relax_topology")
    assert cf.summary == "allow PCIe instead of NVLink"
    (relax,) = cf.changes
    assert (relax.workload, relax.topology) == ("t", "any")
    assert _gpus(cf.placement) == [1, 3]  # the two free GPUs, in different NVLink pairs
    after = planning_input([n1], [*running, _w("t", gpus=2)])
    assert [(a.node, _gpus(a)) for a in _placed(after, "t")] == [("n1", [1, 3])]


def test_numa_allows_gpus_across_numa_nodes() -> None:
    n1 = node("n1", gpus=gpus("H100-80GB", [0, 0, 1, 1]), links=_links(4, set()))
    running = [_w("a", gpus=1, running_on="n1:0"), _w("b", gpus=1, running_on="n1:2")]
    inp = planning_input([n1], [*running, _w("t", gpus=2, topology="numa")])
    _, cf = _check(inp, "t", "NUMA", "relax_topology")
    assert cf.summary == "allow GPUs across NUMA nodes" and _gpus(cf.placement) == [1, 3]
    after = planning_input([n1], [*running, _w("t", gpus=2)])
    assert [(a.node, _gpus(a)) for a in _placed(after, "t")] == [("n1", [1, 3])]


def test_gpu_model_allows_another_model() -> None:
    nodes = [_h100("h1", 1), node("l1", gpus=gpus("L40S-48GB", [0]))]
    running = _w("a", gpus=1, gpu_models="H100-80GB", running_on="h1:0")
    inp = planning_input(nodes, [running, _w("t", gpus=1, gpu_models="H100-80GB")])
    _, cf = _check(inp, "t", "GPU_MODEL", "allow_model")
    assert cf.summary == "allow L40S-48GB as well as H100-80GB"
    assert cf.placement is not None and cf.placement.node == "l1"
    after = planning_input(nodes, [running, _w("t", gpus=1, gpu_models=["H100-80GB", "L40S-48GB"])])
    assert [(a.node, _gpus(a)) for a in _placed(after, "t")] == [("l1", [0])]


def test_mig_layout_repartitions_a_named_gpu() -> None:
    layout = [{"profile": "4g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]
    no_repartition = Policy.model_validate({"mig": {"allow_repartition": False}})
    a = _w("a", mig_profile="4g.40gb", running_on="n1:0/4g.40gb@0")
    n1 = node("n1", gpus=[{"index": 0, "model": "H100-80GB", "mig": {"instances": layout}}])
    inp = planning_input([n1], [a, _w("t", mig_profile="1g.10gb")], no_repartition)
    _, cf = _check(inp, "t", "MIG_LAYOUT", "repartition")
    assert cf.summary == "re-partition n1 GPU 0 to 4g.40gb+1g.10gb"
    (change,) = cf.changes
    assert (change.node, change.gpu) == ("n1", 0)
    assert [(i.profile, i.start) for i in change.instances] == [("4g.40gb", 0), ("1g.10gb", 4)]
    assert cf.placement is not None and cf.placement.gpus[0].mig_profile == "1g.10gb"
    # The idle 3g.40gb instance replaced by a 1g.10gb one; a keeps its 4g.40gb instance.
    repartitioned = [{"profile": "4g.40gb", "start": 0}, {"profile": "1g.10gb", "start": 4}]
    n1_after = node("n1", gpus=[{"index": 0, "model": "H100-80GB", "mig": {"instances": repartitioned}}])
    after = planning_input([n1_after], [a, _w("t", mig_profile="1g.10gb")], no_repartition)
    (placed,) = _placed(after, "t")
    assert (placed.node, placed.gpus[0].index, placed.gpus[0].mig_profile) == ("n1", 0, "1g.10gb")


def test_quota_is_raised_by_the_shortfall() -> None:
    quota = {"teams": ["vision"], "quotas": [{"team": "vision", "gpus": 1}]}
    running = _w("a", team="vision", gpus=1, running_on="n1:0")
    inp = planning_input(
        [_h100("n1", 2)], [running, _w("t", team="vision", gpus=1)], Policy.model_validate(quota)
    )
    _, cf = _check(inp, "t", "QUOTA", "raise_quota")
    assert cf.summary == "raise team vision's quota on GPUs by 1"
    (raise_,) = cf.changes
    assert (raise_.team, raise_.index, raise_.amount) == ("vision", 0, 1.0)
    assert cf.placement is not None and (cf.placement.node, _gpus(cf.placement)) == ("n1", [1])
    raised = Policy.model_validate({"teams": ["vision"], "quotas": [{"team": "vision", "gpus": 2}]})
    after = planning_input([_h100("n1", 2)], [running, _w("t", team="vision", gpus=1)], raised)
    assert [(a.node, _gpus(a)) for a in _placed(after, "t")] == [("n1", [1])]


def test_isolation_lets_the_team_onto_a_reserved_node() -> None:
    rule = {"kind": "team-exclusive", "team": "ads", "nodes": ["n2"]}
    policy = Policy.model_validate({"teams": ["ads", "vision"], "isolation": [rule]})
    nodes = [_h100("n1", 1), _h100("n2", 1)]
    running = _w("a", team="vision", gpus=1, running_on="n1:0")
    inp = planning_input(nodes, [running, _w("t", team="vision", gpus=1)], policy)
    _, cf = _check(inp, "t", "ISOLATION", "allow_team")
    (allow,) = cf.changes
    assert (allow.node, allow.team, allow.index) == ("n2", "vision", 0)
    assert cf.placement is not None and cf.placement.node == "n2"
    open_n2 = Policy.model_validate({"teams": ["ads", "vision"]})
    after = planning_input(nodes, [running, _w("t", team="vision", gpus=1)], open_n2)
    assert [(a.node, _gpus(a)) for a in _placed(after, "t")] == [("n2", [0])]


def test_outranked_names_the_higher_tier_work() -> None:
    hi = _w("hi", tier="latency-sensitive", gpus=1, duration_s=1800)
    inp = planning_input([_h100("n1", 1)], [hi, _w("lo", tier="standard", gpus=1, queued_since=EARLIER)])
    plan, e = _explain(inp, "lo")
    assert [(a.workload, a.node) for a in plan.assignments] == [("hi", "n1")]
    assert e.code == "OUTRANKED" and "hi" in e.reason and "hi" in e.resources
    wait = next(c for c in e.counterfactuals if c.kind == "wait")
    assert wait.summary == "after hi ends on n1 at 2026-11-29 12:30 (predicted)"  # started now, 30 min
    assert [(c.kind, c.workload) for c in wait.changes] == [("end", "hi")]
    # While hi runs on n1, lo cannot start; once it has ended, lo runs there.
    running_hi = _w("hi", tier="latency-sensitive", gpus=1, duration_s=1800, running_on="n1:0")
    held = planning_input([_h100("n1", 1)], [running_hi, _w("lo", tier="standard", gpus=1)])
    assert _placed(held, "lo") == []
    after = planning_input([_h100("n1", 1)], [_w("lo", tier="standard", gpus=1)])
    assert [a.node for a in _placed(after, "lo")] == ["n1"]


def test_gang_only_part_fits() -> None:
    a = _w("a", gpus=1, running_on="n1:0", duration_s=600, queued_since=EARLIER)
    inp = planning_input([_h100("n1", 1), _h100("n2", 1)], [a, _w("g", gpus=1, replicas=2, gang="true")])
    plan = _plan(inp)
    found = explain_workload(inp, plan, "g", catalog=CATALOG, time_limit_s=2.0)
    assert [x.code for x in found] == [GANG, GANG]
    e = found[0]
    assert "only 1 of 2" in e.reason
    assert target_of(inp, plan, e).members == (("g", 0), ("g", 1))
    cf = e.counterfactuals[0]
    assert cf.verified and [(c.kind, c.workload, c.at) for c in cf.changes] == [
        ("end", "a", "2026-11-29T12:00:00+00:00")  # started 10 minutes ago for 10 minutes
    ]
    # Once a has ended, both members run, one on each node.
    after = planning_input([_h100("n1", 1), _h100("n2", 1)], [_w("g", gpus=1, replicas=2, gang="true")])
    assert sorted(a.node for a in _placed(after, "g")) == ["n1", "n2"]


def test_disruption_budget_names_the_moves() -> None:
    no_moves = Policy.model_validate({"disruption": {"max_moves_per_round": 0}})
    b = _w("b", gpus=1, running_on="n2:0")
    nodes = [_h100("n1", 2), _h100("n2", 2)]
    inp = planning_input(nodes, [_w("a", gpus=1, running_on="n1:0"), b, _w("t", gpus=2)], no_moves)
    _, cf = _check(inp, "t", "DISRUPTION_BUDGET", "migrate")
    assert cf.summary == "migrate a off n1 (to n2)" and cf.disruption == 1
    (move,) = cf.changes
    assert (move.workload, move.node, move.to, [g.index for g in move.gpus]) == ("a", "n1", "n2", [1])
    assert cf.placement is not None and (cf.placement.node, _gpus(cf.placement)) == ("n1", [0, 1])
    moved = planning_input(nodes, [_w("a", gpus=1, running_on="n2:1"), b, _w("t", gpus=2)], no_moves)
    assert [(a.node, _gpus(a)) for a in _placed(moved, "t")] == [("n1", [0, 1])]


def test_never_fits_adds_a_node() -> None:
    inp = planning_input([_h100("n1", 2)], [_w("t", gpus=4)])
    _, cf = _check(inp, "t", "NEVER_FITS", "add_node")
    assert cf.summary == "add a node new-n1 with 4 H100-80GB GPUs"
    (add,) = cf.changes
    assert (add.node, add.to, add.amount, add.model) == ("n1", "new-n1", 4.0, "H100-80GB")
    assert cf.placement is not None and (cf.placement.node, _gpus(cf.placement)) == ("new-n1", [0, 1, 2, 3])
    after = planning_input([_h100("n1", 2), _h100("new-n1", 4)], [_w("t", gpus=4)])
    assert [(a.node, _gpus(a)) for a in _placed(after, "t")] == [("new-n1", [0, 1, 2, 3])]


def test_worse_alternative_is_explained() -> None:
    inp = planning_input(
        [_h100("n1", 1), node("l1", gpus=gpus("L40S-48GB", [0]))],
        [
            _w("a", gpus=1, gpu_models="H100-80GB", running_on="n1:0"),
            _w(
                "t",
                alternatives=[
                    {"gpus": 1, "gpu_models": ["H100-80GB"]},
                    {"gpus": 1, "gpu_models": ["L40S-48GB"]},
                ],
            ),
        ],
    )
    plan, e = _explain(inp, "t")
    assert e.alternative == 1 and e.code in BLOCKED
    assert plan.assignments and any(a.workload == "t" and a.alternative == 1 for a in plan.assignments)


# --- explanations never contradict the plan --------------------------------------------------------

_SHAPES: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [
        {"gpus": 1},
        {"gpus": 2, "topology": "nvlink"},
        {"gpus": 2, "topology": "numa"},
        {"gpu_milli": 500},
        {"mig_profile": "3g.40gb"},
        {"gpus": 1, "gpu_models": "L40S-48GB"},
        {"gpus": 3},
    ]
)


@st.composite
def _instances(draw: st.DrawFn) -> PlanningInput:
    nodes = [
        node("n1", gpus=gpus("H100-80GB", [0, 0, 1, 1]), links=_links(4, {(0, 1), (2, 3)})),
        node(
            "n2",
            gpus=[
                {"index": 0, "model": "H100-80GB", "mig": {"instances": [{"profile": "4g.40gb", "start": 0}]}}
            ],
        ),
    ]
    if draw(st.booleans()):
        nodes.append(node("l1", gpus=gpus("L40S-48GB", [0, 0])))
    count = draw(st.integers(2, 6))
    tiers = st.sampled_from(["latency-sensitive", "standard", "background"])
    workloads = [
        _w(
            f"w{i}",
            tier=draw(tiers),
            replicas=draw(st.integers(1, 2)),
            duration_s=draw(st.sampled_from([None, 600, 7200])),
            preemptible=draw(st.booleans()),
            **draw(_SHAPES),
        )
        for i in range(count)
    ]
    policy = Policy.model_validate(
        {"teams": ["default"], "quotas": [{"team": "default", "gpus": draw(st.sampled_from([3, 5, 100]))}]}
    )
    return planning_input(nodes, workloads, policy)


def _plan_state(inp: PlanningInput, plan: Plan, waiting: str) -> PlanningInput:
    """The state ``plan`` leaves, written out here rather than by the explainer: every placement runs
    where the plan puts it (the default policy allows no moves or preemptions), the GPUs have the
    plan's MIG layouts, and one replica of ``waiting`` is the only work left to place."""
    layouts = {(m.node, m.gpu): m.instances for m in plan.mig_layouts}
    nodes = tuple(
        n.model_copy(update={"gpus": tuple(
            g.model_copy(update={"mig": MigConfig(instances=layouts[(n.name, g.index)])})
            if (n.name, g.index) in layouts else g
            for g in n.gpus
        )})
        for n in inp.cluster.nodes
    )  # fmt: skip
    running: dict[str, list[Placement]] = {}
    for a in plan.assignments:
        refs = tuple(GpuRef(**g.model_dump()) for g in a.gpus)
        running.setdefault(a.workload, []).append(
            Placement(node=a.node, gpus=refs, alternative=a.alternative)
        )
    workloads = []
    for w in inp.workloads:
        held = tuple(running.get(w.id, ()))
        replicas = len(held) + (w.id == waiting)
        if replicas:
            workloads.append(w.model_copy(update={"replicas": replicas, "running_on": held, "gang": None}))
    return planning_input(nodes, workloads, inp.policy)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_instances())
def test_explanations_never_contradict_the_plan(inp: PlanningInput) -> None:
    plan = make_plan(inp, solver="greedy-fgd", now=NOW)
    found = explain_all(inp, plan, catalog=CATALOG, counterfactuals=1, solver="greedy-fgd")
    waiting = {(u.workload, u.replica) for u in plan.unplaced}
    degraded = {(a.workload, a.replica) for a in plan.assignments if a.alternative > 0}
    assert {(e.workload, e.replica) for e in found if e.alternative is None} == waiting
    assert {(e.workload, e.replica) for e in found if e.alternative is not None} == degraded
    on_node = {(a.workload, a.replica): a.node for a in plan.assignments}
    names = {n.name for n in inp.cluster.nodes}
    for e in found:
        assert e.code in BLOCKED | FITS_NOW | {TRADE_OFF}
        assert len(e.details) >= 1
        alone = e.alternative is None and inp.workload_by_id[e.workload].gang_id is None
        if alone and e.code in BLOCKED:
            # "It cannot be placed on the state the plan leaves": CP-SAT agrees.
            assert _placed(_plan_state(inp, plan, e.workload), e.workload) == [], e
        for cf in e.counterfactuals:
            assert cf.kind in KINDS and cf.verified and cf.verified_by == "greedy-fgd", cf
            assert cf.placement is not None
            assert (cf.placement.workload, cf.placement.replica) == (e.workload, e.replica)
            assert cf.placement.node in names | {c.to for c in cf.changes if c.kind == "add_node"}
            for c in cf.changes:
                if c.kind in ("migrate", "preempt", "end"):  # work the plan places, where it places it
                    assert c.workload is not None and c.replica is not None
                    assert (c.workload, c.replica) in on_node, c
                    assert c.node is None or c.node == on_node[(c.workload, c.replica)], c
                if c.kind == "end":
                    assert c.at is not None and datetime.fromisoformat(c.at) >= NOW


# --- the plan hook and the command line ------------------------------------------------------------


def _small() -> PlanningInput:
    return planning_input(
        [_h100("n1", 2)],
        [
            _w("old", gpus=2, running_on="n1:0,1", duration_s=3600, queued_since=EARLIER),
            _w("new", gpus=1),
        ],
    )


def test_make_plan_explains_waiting_replicas() -> None:
    plan = make_plan(_small(), solver="greedy-fgd", now=NOW, explain=True)
    (u,) = plan.unplaced
    assert u.code == "NO_CAPACITY" and "n1" in u.reason
    assert [c.kind for c in u.counterfactuals][:1] == ["wait"]
    assert all(c.verified and c.verified_by == "greedy-fgd" for c in u.counterfactuals)
    assert Plan.model_validate_json(plan.model_dump_json(by_alias=True)) == plan


def test_cli_explain_prints_the_code_and_verified_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = _small()
    cluster, workloads, out = tmp_path / "cluster.json", tmp_path / "workloads.json", tmp_path / "plan.json"
    cluster.write_text(inp.cluster.model_dump_json(exclude_none=True))
    workloads.write_text(json.dumps({"workloads": [w.model_dump(mode="json") for w in inp.workloads]}))
    assert main(["plan", "--cluster", str(cluster), "--workloads", str(workloads), "--out", str(out),
                 "--now", NOW.isoformat(), "--time-limit", "2"]) == 0  # fmt: skip
    capsys.readouterr()
    args = ["explain", "--plan", str(out), "--cluster", str(cluster), "--workloads", str(workloads)]
    assert main([*args, "new"]) == 0
    text = capsys.readouterr().out
    assert "new replica 0: waiting — NO_CAPACITY" in text
    assert "1. after old ends on n1 at 2026-11-29 12:50 (predicted)" in text and "cpsat" in text
    assert main([*args, "old"]) == 0
    assert "nothing to explain" in capsys.readouterr().out
    assert main([*args, "nope"]) == 2
    assert "no workload or gang named 'nope'" in capsys.readouterr().err
    # The plan names the files it was made from: explain reads them again without --cluster and --workloads.
    assert main(["explain", "--plan", str(out), "new"]) == 0
    assert "new replica 0: waiting — NO_CAPACITY" in capsys.readouterr().out
    workloads.write_text(json.dumps({"workloads": [{"id": "new", "gpus": 1}]}))
    assert main([*args, "new"]) == 2
    assert "made from other inputs (workloads changed" in capsys.readouterr().err


def test_room_left_by_the_solver_is_a_solver_limit() -> None:
    inp = planning_input(
        [_h100("n1", 2)],
        [_w("a", gpus=1, running_on="n1:0"), _w("t", gpus=1), _w("g", gpus=1, replicas=1, gang="true")],
    )
    held = make_plan(inp, solver="greedy-fgd", now=NOW)
    mine = next(a for a in held.assignments if a.workload == "a")
    plan = factories.plan([mine], [factories.wait("t", 0), factories.wait("g", 0)])
    plan = plan.model_copy(update={"provenance": {"now": NOW.isoformat()}})
    found = {e.workload: e for e in explain_all(inp, plan, catalog=CATALOG, time_limit_s=2.0)}
    for wid, extra in (("t", {}), ("g", {"gang": "true"})):
        e = found[wid]
        assert e.code == SOLVER_LIMIT and "n1" in e.reason
        assert [c.kind for c in e.counterfactuals] == ["replan"]
        # With a running on GPU 0 as the plan leaves it, GPU 1 is free for either of them.
        alone = planning_input(
            [_h100("n1", 2)], [_w("a", gpus=1, running_on="n1:0"), _w(wid, gpus=1, **extra)]
        )
        assert [(a.node, _gpus(a)) for a in _placed(alone, wid)] == [("n1", [1])]


def test_absent_gpu_model_adds_a_mig_node() -> None:
    inp = planning_input(
        [node("l1", gpus=gpus("L40S-48GB", [0]))], [_w("t", mig_profile="1g.10gb", gpu_models="H100-80GB")]
    )
    e, cf = _check(inp, "t", "GPU_MODEL", "add_node")
    assert cf.summary == "add a node new-node with 1 H100-80GB GPUs"
    assert "none of the allowed GPU models (H100-80GB) exists" in e.reason
    (add,) = cf.changes
    assert (add.to, add.amount, add.model) == ("new-node", 1.0, "H100-80GB")
    assert cf.placement is not None and cf.placement.node == "new-node"
    mig_h100 = node("new-node", gpus=[{"index": 0, "model": "H100-80GB", "mig": {"instances": []}}])
    after = planning_input([node("l1", gpus=gpus("L40S-48GB", [0])), mig_h100],
                           [_w("t", mig_profile="1g.10gb", gpu_models="H100-80GB")])  # fmt: skip
    (placed,) = _placed(after, "t")
    assert (placed.node, placed.gpus[0].index, placed.gpus[0].mig_profile) == ("new-node", 0, "1g.10gb")

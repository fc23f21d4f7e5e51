"""Why-not explanations: one crafted instance per reason code (code, counterfactual, and the
counterfactual really placing the workload when applied and re-planned by CP-SAT), and a hypothesis
check that explanations never contradict the plan."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import Plan, PlanningInput, Policy, Workload, default_catalog
from gpuplan.models.plan import Counterfactual, Explanation
from gpuplan.planner.cli import main
from gpuplan.planner.counterfactual import Target, apply_counterfactual
from gpuplan.planner.explain import (
    BLOCKED,
    GANG,
    SOLVER_LIMIT,
    TRADE_OFF,
    explain_all,
    explain_workload,
    target_of,
)
from gpuplan.planner.planning import make_plan
from tests import _factories as factories
from tests._factories import gpus, node, planning_input

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
EARLIER = (NOW - timedelta(minutes=10)).isoformat()
CATALOG = default_catalog()


def _links(n: int, nv: set[tuple[int, int]]) -> list[dict[str, Any]]:
    return [
        {"a": a, "b": b, "kind": "NV4" if (a, b) in nv else "SYS"} for a in range(n) for b in range(a + 1, n)
    ]


def _w(wid: str, **fields: Any) -> Workload:
    return Workload.model_validate({"id": wid, "cpu_milli": 1000, "memory_mib": 1024, **fields})


def _plan(inp: PlanningInput) -> Plan:
    return make_plan(inp, solver="cpsat", now=NOW, time_limit_s=5.0, num_workers=1)


def _explain(inp: PlanningInput, workload: str) -> tuple[Plan, Explanation]:
    plan = _plan(inp)
    found = explain_workload(inp, plan, workload, catalog=CATALOG, time_limit_s=2.0)
    assert len(found) == 1, found
    return plan, found[0]


def _placed_after(inp: PlanningInput, plan: Plan, e: Explanation, cf: Counterfactual) -> bool:
    """Apply ``cf`` to the state the plan leaves (whole cluster) and re-plan with CP-SAT: is every
    replica of the target placed?"""
    target = target_of(inp, plan, e)
    return _places(inp, plan, target, cf)


def _places(inp: PlanningInput, plan: Plan, target: Target, cf: Counterfactual) -> bool:
    after = apply_counterfactual(inp, plan, target, cf, CATALOG)
    replan = _plan(after)
    held = {w.id: len(w.running_on) for w in after.workloads}
    for wid in {k[0] for k in target.members}:
        want = sum(1 for k in target.members if k[0] == wid)
        got = [a for a in replan.assignments if a.workload == wid and a.replica >= held[wid]]
        if len(got) < want:
            return False
    return True


def _check(inp: PlanningInput, workload: str, code: str, kind: str) -> Explanation:
    plan, e = _explain(inp, workload)
    assert e.code == code, (e.code, e.reason)
    assert e.reason
    kinds = [c.kind for c in e.counterfactuals]
    assert kind in kinds, [c.summary for c in e.counterfactuals]
    assert all(c.verified for c in e.counterfactuals)
    cf = next(c for c in e.counterfactuals if c.kind == kind)
    assert _placed_after(inp, plan, e, cf), cf.summary
    nothing = Counterfactual(summary="no change", kind="none", changes=())
    assert not _placed_after(inp, plan, e, nothing)
    return e


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
    e = _check(inp, "new", "NO_CAPACITY", "wait")
    wait = next(c for c in e.counterfactuals if c.kind == "wait")
    assert wait.summary == "after old ends on n1 at 2026-11-29 12:50 (predicted)"
    assert "n1" in e.resources


def test_no_nvlink_clique_allows_pcie() -> None:
    n1 = node("n1", gpus=gpus("H100-80GB", [0, 0, 0, 0]), links=_links(4, {(0, 1), (2, 3)}))
    inp = planning_input(
        [n1],
        [
            _w("a", gpus=1, running_on="n1:0"),
            _w("b", gpus=1, running_on="n1:2"),
            _w("t", gpus=2, topology="nvlink"),
        ],
    )
    e = _check(inp, "t", "NO_NVLINK_CLIQUE", "relax_topology")
    assert e.counterfactuals[0].summary == "allow PCIe instead of NVLink"
    assert "NVLink clique" in e.reason


def test_numa_allows_gpus_across_numa_nodes() -> None:
    n1 = node("n1", gpus=gpus("H100-80GB", [0, 0, 1, 1]), links=_links(4, set()))
    inp = planning_input(
        [n1],
        [
            _w("a", gpus=1, running_on="n1:0"),
            _w("b", gpus=1, running_on="n1:2"),
            _w("t", gpus=2, topology="numa"),
        ],
    )
    _check(inp, "t", "NUMA", "relax_topology")


def test_gpu_model_allows_another_model() -> None:
    inp = planning_input(
        [_h100("h1", 1), node("l1", gpus=gpus("L40S-48GB", [0]))],
        [_w("a", gpus=1, gpu_models="H100-80GB", running_on="h1:0"), _w("t", gpus=1, gpu_models="H100-80GB")],
    )
    e = _check(inp, "t", "GPU_MODEL", "allow_model")
    assert "L40S-48GB" in e.counterfactuals[0].summary


def test_mig_layout_repartitions_a_named_gpu() -> None:
    layout = [{"profile": "4g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]
    n1 = node("n1", gpus=[{"index": 0, "model": "H100-80GB", "mig": {"instances": layout}}])
    inp = planning_input(
        [n1],
        [_w("a", mig_profile="4g.40gb", running_on="n1:0/4g.40gb@0"), _w("t", mig_profile="1g.10gb")],
        Policy.model_validate({"mig": {"allow_repartition": False}}),
    )
    e = _check(inp, "t", "MIG_LAYOUT", "repartition")
    assert e.counterfactuals[0].summary.startswith("re-partition n1 GPU 0 to 4g.40gb+1g.10gb")


def test_quota_is_raised_by_the_shortfall() -> None:
    policy = Policy.model_validate({"teams": ["vision"], "quotas": [{"team": "vision", "gpus": 1}]})
    inp = planning_input(
        [_h100("n1", 2)],
        [_w("a", team="vision", gpus=1, running_on="n1:0"), _w("t", team="vision", gpus=1)],
        policy,
    )
    e = _check(inp, "t", "QUOTA", "raise_quota")
    assert e.counterfactuals[0].summary == "raise team vision's quota on GPUs by 1"
    assert "by 1 GPU-equivalents" in e.reason


def test_isolation_lets_the_team_onto_a_reserved_node() -> None:
    policy = Policy.model_validate(
        {
            "teams": ["ads", "vision"],
            "isolation": [{"kind": "team-exclusive", "team": "ads", "nodes": ["n2"]}],
        }
    )
    inp = planning_input(
        [_h100("n1", 1), _h100("n2", 1)],
        [_w("a", team="vision", gpus=1, running_on="n1:0"), _w("t", team="vision", gpus=1)],
        policy,
    )
    e = _check(inp, "t", "ISOLATION", "allow_team")
    assert "n2" in e.counterfactuals[0].summary


def test_outranked_names_the_higher_tier_work() -> None:
    inp = planning_input(
        [_h100("n1", 1)],
        [
            _w("hi", tier="latency-sensitive", gpus=1, duration_s=1800),
            _w("lo", tier="standard", gpus=1, queued_since=EARLIER),
        ],
    )
    e = _check(inp, "lo", "OUTRANKED", "wait")
    assert "hi" in e.reason and "hi" in e.resources


def test_gang_only_part_fits() -> None:
    inp = planning_input(
        [_h100("n1", 1), _h100("n2", 1)],
        [
            _w("a", gpus=1, running_on="n1:0", duration_s=600, queued_since=EARLIER),
            _w("g", gpus=1, replicas=2, gang="true"),
        ],
    )
    plan = _plan(inp)
    found = explain_workload(inp, plan, "g", catalog=CATALOG, time_limit_s=2.0)
    assert [x.code for x in found] == [GANG, GANG]
    e = found[0]
    assert "only 1 of 2" in e.reason
    assert e.counterfactuals
    assert _placed_after(inp, plan, e, e.counterfactuals[0])
    assert target_of(inp, plan, e).members == (("g", 0), ("g", 1))


def test_disruption_budget_names_the_moves() -> None:
    inp = planning_input(
        [_h100("n1", 2), _h100("n2", 2)],
        [_w("a", gpus=1, running_on="n1:0"), _w("b", gpus=1, running_on="n2:0"), _w("t", gpus=2)],
        Policy.model_validate({"disruption": {"max_moves_per_round": 0}}),
    )
    e = _check(inp, "t", "DISRUPTION_BUDGET", "migrate")
    move = next(c for c in e.counterfactuals if c.kind == "migrate")
    assert move.disruption == 1 and move.changes[0].to in ("n1", "n2")


def test_never_fits_adds_a_node() -> None:
    inp = planning_input([_h100("n1", 2)], [_w("t", gpus=4)])
    e = _check(inp, "t", "NEVER_FITS", "add_node")
    assert e.counterfactuals[0].summary == "add a node new-n1 with 4 H100-80GB GPUs"


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


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_instances())
def test_explanations_never_contradict_the_plan(inp: PlanningInput) -> None:
    plan = make_plan(inp, solver="greedy-fgd", now=NOW)
    found = explain_all(inp, plan, catalog=CATALOG, counterfactuals=1, solver="greedy-fgd")
    waiting = {(u.workload, u.replica) for u in plan.unplaced}
    degraded = {(a.workload, a.replica) for a in plan.assignments if a.alternative > 0}
    assert {(e.workload, e.replica) for e in found if e.alternative is None} == waiting
    assert {(e.workload, e.replica) for e in found if e.alternative is not None} == degraded
    nothing = Counterfactual(summary="no change", kind="none", changes=())
    for e in found:
        assert e.code in BLOCKED | {SOLVER_LIMIT, TRADE_OFF}
        assert len(e.details) >= 1
        target = target_of(inp, plan, e)
        if e.code in BLOCKED and e.code != GANG:
            # "It cannot be placed on the state the plan leaves": CP-SAT agrees.
            assert not _places(inp, plan, target, nothing), e
        for cf in e.counterfactuals:
            assert _places(inp, plan, target, cf), (e, cf.summary)


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
    assert "unknown workload 'nope'" in capsys.readouterr().err
    assert main(["explain", "--plan", str(out), "new"]) == 2
    assert "--cluster" in capsys.readouterr().err
    workloads.write_text(json.dumps({"workloads": [{"id": "new", "gpus": 1}]}))
    assert main([*args, "new"]) == 2
    assert "other inputs" in capsys.readouterr().err


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
    for wid in ("t", "g"):
        e = found[wid]
        assert e.code == SOLVER_LIMIT and "n1" in e.reason
        assert [c.kind for c in e.counterfactuals] == ["replan"]
        assert _placed_after(inp, plan, e, e.counterfactuals[0])


def test_absent_gpu_model_adds_a_mig_node() -> None:
    inp = planning_input(
        [node("l1", gpus=gpus("L40S-48GB", [0]))], [_w("t", mig_profile="1g.10gb", gpu_models="H100-80GB")]
    )
    e = _check(inp, "t", "GPU_MODEL", "add_node")
    assert e.counterfactuals[0].summary == "add a node new-node with 1 H100-80GB GPUs"
    assert "none of the allowed GPU models (H100-80GB) exists" in e.reason

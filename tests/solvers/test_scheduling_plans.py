"""kube-scheduler's filters are rules of every solver (issue 40): on hand-made fleets with taints, node
selectors, required node affinity and advertised resources, cpsat, milp-highs, greedy-fgd and first-fit
(through ``make_plan``) never place or move a replica onto a node that refuses it, their plans validate,
a running replica the filters now refuse stays where it runs (kept, ``stays_broken``), the validator
rejects a hand plan that breaks the rule, and the explainer names the taint, selector or resource that
keeps a replica waiting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuplan.models import PlanningInput, default_catalog
from gpuplan.models.plan import Plan
from gpuplan.models.rules.scheduling import admits
from gpuplan.planner.explain.findings import BLOCKED
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.validate import check_plan, validate_plan
from tests._factories import assign, plan, wait, whole, with_actions

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
SOLVERS = ("cpsat", "milp-highs", "greedy-fgd", "first-fit")
QUEUED = (NOW - timedelta(hours=2)).isoformat()


def _h100(n: int) -> list[dict[str, Any]]:
    return [{"index": i, "model": "H100-80GB"} for i in range(n)]


def _l40s(n: int) -> list[dict[str, Any]]:
    return [{"index": i, "model": "L40S-48GB"} for i in range(n)]


NODES: list[dict[str, Any]] = [
    # Dedicated to vision: tainted, H100s, advertises whole GPUs.
    {"name": "vision", "gpus": _h100(8), "taints": ["dedicated=vision:NoSchedule"],
     "labels": {"zone": "a", "accelerator": "h100"}, "resources": ["nvidia.com/gpu"], "sharing": "exclusive"},
    {"name": "gen-a", "gpus": _h100(2), "labels": {"zone": "a", "accelerator": "h100"},
     "resources": ["nvidia.com/gpu"], "sharing": "exclusive"},
    # Time-sliced L40S: shares only, advertised as nvidia.com/gpu.shared.
    {"name": "gen-b", "gpus": _l40s(2), "labels": {"zone": "b", "cores": "16"},
     "resources": ["nvidia.com/gpu.shared"], "sharing": {"time-slicing": {"replicas": 4}}},
    # PreferNoSchedule only (ignored), resources not known.
    {"name": "spot", "gpus": _h100(2), "taints": ["spot=true:PreferNoSchedule"], "labels": {"zone": "c"},
     "sharing": "exclusive"},
]  # fmt: skip

WORKLOADS: list[dict[str, Any]] = [
    {"id": "vision-train", "gpus": 4, "tolerations": "dedicated=vision:NoSchedule", "queued_since": QUEUED},
    {"id": "plain", "gpus": 2, "replicas": 2, "resource": "nvidia.com/gpu", "queued_since": QUEUED},
    # Only the tainted node has room for four whole GPUs: waits (TAINT).
    {"id": "blocked", "gpus": 4, "resource": "nvidia.com/gpu"},
    # No zone c node but spot; zone d nowhere: waits (NODE_AFFINITY).
    {"id": "zonal", "gpus": 1, "node_affinity": "zone in (d) | zone in (e),accelerator", "tolerations": "*"},
    {"id": "shared", "gpu_milli": 250, "replicas": 3, "resource": "nvidia.com/gpu.shared"},
    # Shares only on gen-b, which has no accelerator label: waits (NODE_AFFINITY).
    {"id": "shared-h100", "gpu_milli": 250, "resource": "nvidia.com/gpu.shared",
     "node_selector": {"accelerator": "h100"}},
    # HAMi's memory share: gen-b does not offer nvidia.com/gpumem (RESOURCE).
    {"id": "hami", "gpu_milli": 100, "gpu_memory_mib": 4000, "resource": "nvidia.com/gpumem"},
    # Zone b with a numeric label: the shares fit on gen-b (cores > 8).
    {"id": "numeric", "gpu_milli": 500, "node_affinity": "cores>8,!spot",
     "resource": "nvidia.com/gpu.shared"},
]  # fmt: skip


def _input(
    nodes: list[dict[str, Any]], workloads: list[dict[str, Any]], policy: dict[str, Any] | None = None
) -> PlanningInput:
    full = [{"cpu_milli": 256000, "memory_mib": 1048576, **n} for n in nodes]
    return PlanningInput.model_validate(
        {"cluster": {"nodes": full}, "workloads": workloads, "policy": policy or {}}
    )


def _admitted_everywhere(p: Plan, inp: PlanningInput) -> None:
    nodes = inp.cluster.node_by_name
    for a in p.assignments:
        w = inp.workload_by_id[a.workload]
        stays = w.stays(a.replica, a.node, a.gpus)
        reason = admits(nodes[a.node], w, w.shapes[a.alternative])
        assert reason is None or stays, (a.workload, a.node, reason)


@pytest.fixture(scope="module")
def fleet() -> PlanningInput:
    return _input(NODES, WORKLOADS)


@pytest.mark.parametrize("solver", SOLVERS)
def test_no_solver_places_work_where_the_filters_refuse_it(fleet: PlanningInput, solver: str) -> None:
    p = make_plan(fleet, solver=solver, now=NOW, time_limit_s=10, num_workers=1, deterministic=True)
    assert validate_plan(p, fleet) == []
    _admitted_everywhere(p, fleet)
    where = {(a.workload, a.replica): a.node for a in p.assignments}
    assert where[("vision-train", 0)] == "vision"
    assert {where[("plain", 0)], where[("plain", 1)]} == {"gen-a", "spot"}
    assert {where[("shared", r)] for r in range(3)} == {"gen-b"}
    assert where[("numeric", 0)] == "gen-b"
    codes = {u.workload: u.code for u in p.unplaced}
    assert codes == {
        "blocked": "TAINT",
        "zonal": "NODE_AFFINITY",
        "shared-h100": "NODE_AFFINITY",
        "hami": "RESOURCE",
    }
    reasons = {u.workload: u.reason for u in p.unplaced}
    assert "vision could host 4 whole GPUs" in reasons["blocked"]
    assert "no toleration for dedicated=vision:NoSchedule" in reasons["blocked"]
    assert "node selector accelerator=h100 not matched" in reasons["shared-h100"]
    assert "node does not offer nvidia.com/gpumem" in reasons["hami"]
    assert {"TAINT", "NODE_AFFINITY", "RESOURCE"} <= BLOCKED
    resources = {u.workload: u.resources for u in p.unplaced}
    assert list(resources["blocked"][:2]) == ["vision", "dedicated=vision:NoSchedule"]


def test_the_compile_gives_each_alternative_its_refused_nodes(fleet: PlanningInput) -> None:
    problem = compile_problem(fleet, default_catalog(), NOW)
    refused = {q.workload: q.shapes[0].refused for q in problem.requests}
    assert refused["vision-train"] == frozenset()  # it tolerates the taint, asks for no resource
    assert refused["plain"] == frozenset({"vision", "gen-b"})
    assert refused["shared"] == frozenset({"vision", "gen-a"})  # spot's resources are not known
    assert refused["zonal"] == frozenset({"vision", "gen-a", "gen-b", "spot"})
    # Equal asks share one set; an input without filters refuses nothing.
    plain = _input([{"name": "n", "gpus": _h100(1)}], [{"id": "w", "gpus": 1}])
    assert all(not s.refused for q in compile_problem(plain, problem.catalog, NOW).requests for s in q.shapes)


DRIFT_NODES = [
    {"name": "vision", "gpus": _h100(2), "taints": ["dedicated=vision:NoSchedule"], "sharing": "exclusive"},
    {"name": "gen", "gpus": _h100(2), "sharing": "exclusive"},
]
#: Runs on the tainted node without a toleration (the taint came after it started).
DRIFTED = {
    "id": "old", "gpus": 1, "started_at": (NOW - timedelta(hours=5)).isoformat(), "preemptible": True,
    "running_on": [{"node": "vision", "gpus": [{"index": 0}]}],
}  # fmt: skip


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_drifted_running_replica_stays_and_is_kept(solver: str) -> None:
    inp = _input(DRIFT_NODES, [DRIFTED, {"id": "new", "gpus": 2}])
    p = make_plan(inp, solver=solver, now=NOW, time_limit_s=10, num_workers=1, deterministic=True)
    assert validate_plan(p, inp) == []
    where = {(a.workload, a.replica): a.node for a in p.assignments}
    assert where[("old", 0)] == "vision" and where[("new", 0)] == "gen"
    assert [b.rule for b in p.stays_broken] == ["scheduling"]


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_drifted_replica_that_moves_goes_where_it_is_admitted(solver: str) -> None:
    """With moves allowed, a plan may move it, but only to a node that admits it."""
    nodes = [DRIFT_NODES[0], {**DRIFT_NODES[1], "gpus": _h100(1)}]
    inp = _input(
        nodes,
        [
            DRIFTED,
            {"id": "tolerant", "gpus": 2, "tolerations": "dedicated:NoSchedule", "tier": "latency-sensitive"},
        ],
        {"disruption": {"max_moves_per_round": 1}},
    )
    p = make_plan(inp, solver=solver, now=NOW, time_limit_s=10, num_workers=1, deterministic=True)
    assert validate_plan(p, inp) == []
    _admitted_everywhere(p, inp)
    where = {(a.workload, a.replica): a.node for a in p.assignments}
    if solver in ("cpsat", "milp-highs"):  # the exact paths make the move; the greedy ones never move work
        assert where.get(("tolerant", 0)) == "vision" and where.get(("old", 0)) == "gen"


def test_the_validator_rejects_a_placement_the_filters_refuse_and_keeps_one_that_stays() -> None:
    inp = _input(DRIFT_NODES, [DRIFTED, {"id": "new", "gpus": 1}])
    bad = with_actions(
        plan([assign("old", 0, "vision", whole(0)), assign("new", 0, "vision", whole(1))]), inp
    )
    violations = validate_plan(bad, inp)
    assert [(v.rule, v.subject) for v in violations] == [("scheduling", "workload new replica 0")]
    assert "no toleration for dedicated=vision:NoSchedule" in violations[0].message
    good = with_actions(plan([assign("old", 0, "vision", whole(0)), assign("new", 0, "gen", whole(1))]), inp)
    report = check_plan(good, inp)
    assert report.valid and [k.rule for k in report.kept] == ["scheduling"]
    # The same replica started there (it does not run now) breaks it, and so does one moved to other GPUs.
    fresh = _input(DRIFT_NODES, [{**DRIFTED, "running_on": []}, {"id": "new", "gpus": 1}])
    started = with_actions(plan([assign("old", 0, "vision", whole(0))], [wait("new", 0)]), fresh)
    assert [v.rule for v in validate_plan(started, fresh)] == ["scheduling"]
    other = plan([assign("old", 0, "vision", whole(1))], [wait("new", 0)])
    assert "scheduling" in [v.rule for v in validate_plan(other, inp)]


def test_workloads_rebuilt_from_the_plan_skip_the_rule() -> None:
    inp = _input(DRIFT_NODES, [{"id": "new", "gpus": 1, "tolerations": "*"}])
    p = with_actions(plan([assign("new", 0, "vision", whole(0))]), inp)
    assert validate_plan(p, inp) == []
    from gpuplan.planner.validation.validate import implied_workloads

    implied = inp.model_copy(update={"workloads": implied_workloads(p)})
    report = check_plan(p, implied, workloads_implied=True)
    assert report.valid and "scheduling" in {s.family for s in report.skipped}


def test_a_sharing_change_gives_the_node_the_shared_resource() -> None:
    """A drained exclusive node switched to time-slicing advertises nvidia.com/gpu.shared: shares that ask
    for it may go there in the same plan."""
    inp = _input(
        [{"name": "n", "gpus": _h100(1), "sharing": "exclusive", "resources": ["nvidia.com/gpu"]}],
        [{"id": "f", "gpu_milli": 500, "replicas": 2, "resource": "nvidia.com/gpu.shared"}],
        {"sharing": {"allow_change": True, "replicas": 2}},
    )
    for solver in ("cpsat", "greedy-fgd"):
        p = make_plan(inp, solver=solver, now=NOW, time_limit_s=10, num_workers=1, deterministic=True)
        assert validate_plan(p, inp) == []
        assert len(p.assignments) == 2 and [c.node for c in p.sharing] == ["n"]

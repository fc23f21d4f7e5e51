"""The plan and ``gpuplan explain`` give the same reason: for every waiting replica, the code, the
sentence and the named resources (node first) that ``make_plan`` attaches equal what
:func:`explain_workload` computes afresh from the plan file, on hand-made clusters whose reason is known
by hand, on the bundled demo and on hypothesis-generated small inputs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.cli import common
from gpuplan.models import Plan, PlanningInput, Policy, Workload, default_catalog
from gpuplan.models.catalog import data_dir
from gpuplan.models.plan import Action, Unplaced
from gpuplan.planner.explain.reasons import explain_workload
from gpuplan.planner.planning import make_plan
from tests import _factories as factories
from tests._factories import gpus, node, planning_input

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CATALOG = default_catalog()


def _w(wid: str, **fields: Any) -> Workload:
    return Workload.model_validate({"id": wid, "cpu_milli": 1000, "memory_mib": 1024, **fields})


def _reasons(inp: PlanningInput, plan: Plan, counterfactuals: int = 0) -> dict[tuple[str, int], Any]:
    """What ``gpuplan explain`` says of each waiting replica: (code, reason, resources)."""
    out: dict[tuple[str, int], Any] = {}
    for wid in sorted({u.workload for u in plan.unplaced}):
        found = explain_workload(inp, plan, wid, catalog=CATALOG, counterfactuals=counterfactuals)
        out.update({(e.workload, e.replica): e for e in found if e.alternative is None})
    return out


def assert_agree(inp: PlanningInput, plan: Plan) -> dict[str, Unplaced]:
    """Every waiting replica: the plan's code, sentence and resources are explain's; the plan's
    entries by workload (first replica)."""
    said = _reasons(inp, plan)
    assert set(said) == {(u.workload, u.replica) for u in plan.unplaced}
    for u in plan.unplaced:
        e = said[(u.workload, u.replica)]
        assert (u.code, u.reason, u.resources) == (e.code, e.reason, e.resources), (u, e)
    return {u.workload: u for u in reversed(plan.unplaced)}


def test_the_node_named_is_the_first_by_name_whatever_came_before() -> None:
    """Team vision is at its 1-GPU quota, so ``t`` waits (QUOTA) although dgx-01 (2 free GPUs) and
    dgx-02 (1 free) have room: the sentence names dgx-01, the first by name. The gang ``g`` (2 x 2
    GPUs, only dgx-01 holds 2) is explained first in the plan; before, trying it reordered the nodes and
    the plan said "dgx-02 has room" where ``gpuplan explain t`` said "dgx-01 has room"."""
    policy = Policy.model_validate({"teams": ["vision", "ads"], "quotas": [{"team": "vision", "gpus": 1}]})
    nodes = [node("dgx-01", gpus=gpus("H100-80GB", [0, 0])), node("dgx-02", gpus=gpus("H100-80GB", [0, 0]))]
    work = [
        _w("g", team="ads", gpus=2, replicas=2, gang="true"),
        _w("r", team="vision", gpus=1, running_on="dgx-02:0"),
        _w("t", team="vision", gpus=1),
    ]
    inp = planning_input(nodes, work, policy)
    plan = make_plan(inp, solver="greedy-fgd", now=NOW, explain=True)
    waiting = assert_agree(inp, plan)
    assert [u.workload for u in plan.unplaced] == ["g", "g", "t"]
    t = waiting["t"]
    assert t.code == "QUOTA" and t.reason.endswith("; dgx-01 has room"), t
    assert t.resources[-1] == "dgx-01"


def test_input_order_does_not_choose_the_node() -> None:
    """The same question on a cluster listed in the other order names the same node."""
    inp = planning_input(
        [node("b-2", gpus=gpus("H100-80GB", [0])), node("a-1", gpus=gpus("H100-80GB", [0]))],
        [_w("t", gpus=1)],
    )
    plan = factories.plan([], [factories.wait("t", 0)]).model_copy(
        update={"provenance": {"now": NOW.isoformat()}}
    )
    (e,) = explain_workload(inp, plan, "t", catalog=CATALOG, counterfactuals=0)
    assert e.code == "SOLVER_LIMIT" and e.reason.startswith("a-1 has room") and e.resources == ("a-1",)


def _mig_gpu() -> dict[str, Any]:
    """An H100 with two 1g.10gb instances."""
    return {"index": 0, "model": "H100-80GB", "mig": {"instances": [
        {"profile": "1g.10gb", "start": 0}, {"profile": "1g.10gb", "start": 1}]}}  # fmt: skip


def _mig_node() -> Any:
    return node("n", gpus=[_mig_gpu()])


def test_a_free_reserved_mig_instance_is_reserved_for_earlier_work_not_no_capacity() -> None:
    """One H100 with two 1g.10gb instances (no new ones may be created); ``r`` runs on the first until
    13:00. The latency-sensitive gang ``ls`` (two 1g.10gb for an hour) cannot start before then and is
    reserved on both instances from 13:00. The notebook ``nb`` (two hours) fits in the free instance now
    but would hold it past 13:00: it waits, reserved from 14:00 when ``ls`` ends. Its reason says so,
    and explain says the same (before: the plan said RESERVED_FOR_EARLIER "a replica ahead", or
    NO_CAPACITY from the solver, while explain said SOLVER_LIMIT "n has room")."""
    policy = Policy.model_validate({"mig": {"allow_create": False}})
    work = [
        _w(
            "r",
            mig_profile="1g.10gb",
            running_on="n:0/1g.10gb@0",
            started_at=NOW.isoformat(),
            duration_s=3600,
        ),
        _w("ls", tier="latency-sensitive", mig_profile="1g.10gb", replicas=2, gang="true", duration_s=3600),
        _w("nb", tier="background", mig_profile="1g.10gb", duration_s=7200),
    ]
    inp = planning_input([_mig_node()], work, policy)
    for solver in ("cpsat", "greedy-fgd"):
        plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=5.0, num_workers=1)
        waiting = assert_agree(inp, plan)
        nb = waiting["nb"]
        assert nb.predicted_start == (NOW + timedelta(hours=2)).isoformat()
        assert nb.code == "RESERVED_FOR_EARLIER", nb
        assert nb.reason.startswith(
            "n has room for it now, but starting it now would delay the reserved start of ls#0, ls#1 "
            "ahead of it in the queue (from 2026-11-29 13:00)"
        )
        assert "is reserved for it from 2026-11-29 14:00 (predicted start)" in nb.reason
        assert nb.resources == ("n", "ls#0", "ls#1")


def test_capacity_reserved_by_the_plan_and_free_now_is_planned_later() -> None:
    """A hand-made plan that reserves n GPU 0 for ``t`` from 13:00 while it is free now and nothing
    ahead needs it: PLANNED_LATER with the predicted start; when the plan creates the reserved MIG
    instance in its second round, the reason is that re-partition."""
    later = (NOW + timedelta(hours=1)).isoformat()
    held = Unplaced(workload="t", replica=0, code="NO_CAPACITY", reason="no free capacity",
                    predicted_start=later, reserved_node="n", reserved_gpus=factories.whole(0))  # fmt: skip
    inp = planning_input([node("n", gpus=gpus("H100-80GB", [0]))], [_w("t", gpus=1)])
    plan = factories.plan([], [held]).model_copy(update={"provenance": {"now": NOW.isoformat()}})
    (e,) = explain_workload(inp, plan, "t", catalog=CATALOG, counterfactuals=1, solver="greedy-fgd")
    assert e.code == "PLANNED_LATER" and e.resources == ("n",)
    assert e.reason.startswith("n GPU 0 is reserved for it from 2026-11-29 13:00 (predicted start); no "
                               "reservation ahead of it needs that room now")  # fmt: skip
    assert [c.kind for c in e.counterfactuals] == ["replan"] and e.counterfactuals[0].verified

    mig = held.model_copy(update={"reserved_gpus": factories.mig(0, "1g.10gb", 0)})
    inp = planning_input([_mig_node()], [_w("t", mig_profile="1g.10gb")])
    create = Action(round=2, kind="create-mig", node="n", gpu=0, detail="1g.10gb@0")
    plan = factories.plan([], [mig]).model_copy(
        update={"provenance": {"now": NOW.isoformat()}, "actions": (create,)}
    )
    (e,) = explain_workload(inp, plan, "t", catalog=CATALOG, counterfactuals=0)
    assert e.code == "PLANNED_LATER"
    assert e.reason == (
        "n GPU 0 (1g.10gb at 0) is reserved for it from 2026-11-29 13:00 (predicted start); it waits for "
        "the MIG re-partition of n GPU 0 in round 2 of this plan"
    )


def test_a_gang_that_fits_only_across_racks_names_its_domain() -> None:
    """Two racks of two 2-GPU nodes, one GPU busy in each rack: 6 GPUs free, 3 per rack. A gang of four
    1-GPU replicas that must stay in one rack waits with GANG_DOMAIN naming the rack with the most free
    (r1, first by name among equals) and its 3 free GPUs against the 4 asked."""
    nodes = [
        node(name, gpus=gpus("L40S-48GB", [0, 0]), labels={"rack": rack})
        for name, rack in (("a", "r1"), ("b", "r1"), ("c", "r2"), ("d", "r2"))
    ]
    work = [
        _w("busy", gpus=1, replicas=2, running_on="a:0;c:0"),
        _w("g", gpus=1, replicas=4, gang="true", gang_domain="rack"),
    ]
    inp = planning_input(nodes, work)
    plan = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=5.0, num_workers=1)
    waiting = assert_agree(inp, plan)
    assert {(u.workload, u.code) for u in plan.unplaced} == {("g", "GANG_DOMAIN")}
    g = waiting["g"]
    assert g.reason == (
        "gang 'g' fits only across several values of node label 'rack': it asks for 4 GPUs inside one; "
        "the one with the most room, rack=r1, has 3 free GPUs (a, b)"
    )
    assert g.resources == ("rack=r1", "a", "b")
    # A gang of MIG instances counts replicas: each rack's H100 has two free 1g.10gb instances.
    racks = [node(n, gpus=[_mig_gpu()], labels={"rack": r}) for n, r in (("m1", "r1"), ("m2", "r2"))]
    mig_gang = _w("m", mig_profile="1g.10gb", replicas=3, gang="true", gang_domain="rack")
    inp = planning_input(racks, [mig_gang], Policy.model_validate({"mig": {"allow_create": False}}))
    m = assert_agree(inp, make_plan(inp, solver="greedy-fgd", now=NOW))["m"]
    assert m.code == "GANG_DOMAIN" and m.resources == ("rack=r1", "m1")
    assert "it asks for 3 x MIG instance 1g.10gb" in m.reason
    assert m.reason.endswith("inside one; the one with the most room, rack=r1, holds 2 of them (m1)")
    # Inside one rack (a third node in r1), the same gang is placed.
    more = planning_input([*nodes, node("e", gpus=gpus("L40S-48GB", [0]), labels={"rack": "r1"})], work)
    assert not make_plan(more, solver="cpsat", now=NOW, time_limit_s=5.0, num_workers=1).unplaced


def test_eight_nvlink_gpus_on_a_dgx1_name_the_missing_clique() -> None:
    """A DGX-1 (V100 hybrid cube-mesh) has 8 GPUs but no 8 joined all-to-all by NVLink: its largest
    NVLink cliques have 4 GPUs (each quad of the cube). An 8-GPU all-NVLink request waits with
    NO_NVLINK_CLIQUE naming the node, 8 and 4, and "allow PCIe" is verified to place it."""
    dgx1 = node("dgx1-01", topology="dgx1-v100", gpu_model="V100-SXM2-32GB")
    inp = planning_input([dgx1], [_w("t", gpus=8, topology="nvlink")])
    plan = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=5.0, num_workers=1)
    waiting = assert_agree(inp, plan)
    t = waiting["t"]
    assert t.code == "NO_NVLINK_CLIQUE" and t.resources == ("dgx1-01",)
    assert t.reason == (
        "no node has 8 GPUs joined all-to-all by NVLink: dgx1-01 has 8 GPUs but its largest NVLink "
        "clique has 4"
    )
    (e,) = explain_workload(inp, plan, "t", catalog=CATALOG, counterfactuals=2, solver="cpsat")
    assert (e.code, e.reason) == (t.code, t.reason)
    relax = [c for c in e.counterfactuals if c.kind == "relax_topology"]
    assert relax and relax[0].verified and relax[0].placement is not None
    assert relax[0].placement.node == "dgx1-01" and len(relax[0].placement.gpus) == 8


def test_the_demo_plan_and_explain_agree_on_every_waiting_replica() -> None:
    """The bundled example (14 nodes, 189 workloads) planned without counterfactuals, as the API plans:
    before, its waiting replicas kept the solver's "no node has room" (NO_CAPACITY) while explain gave
    MIG_LAYOUT, GPU_MODEL, ... ."""
    ex = data_dir() / "examples"
    inp = common.load_input(ex / "cluster.yaml", ex / "workloads.yaml", ex / "policy.yaml", CATALOG)
    now = datetime.fromisoformat((ex / "now.txt").read_text().strip())
    plan = make_plan(inp, solver="greedy-fgd", now=now, time_limit_s=10.0)
    assert len(plan.unplaced) > 20
    assert_agree(inp, plan)
    assert not any(u.reason.startswith("no node has room") for u in plan.unplaced)


_SHAPES: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [
        {"gpus": 1},
        {"gpus": 2},
        {"gpus": 2, "topology": "nvlink"},
        {"gpus": 4, "topology": "nvlink"},
        {"gpu_milli": 500},
        {"mig_profile": "1g.10gb"},
        {"mig_profile": "3g.40gb", "gpu_models": "H100-80GB"},
    ]
)


@st.composite
def _inputs(draw: st.DrawFn) -> PlanningInput:
    """Two to four small nodes (names drawn out of order, racks), a few workloads with durations,
    tiers, gangs with a rack domain, teams under a quota."""
    names = draw(st.permutations(["n1", "n2", "n3", "n4"]))[: draw(st.integers(2, 4))]
    nodes = []
    for i, name in enumerate(names):
        count = draw(st.sampled_from([1, 2, 4]))
        nvlink = {(a, b) for a in range(count) for b in range(a + 1, count) if a // 2 == b // 2}
        links = [{"a": a, "b": b, "kind": "NV4" if (a, b) in nvlink else "SYS"}
                 for a in range(count) for b in range(a + 1, count)]  # fmt: skip
        fields: dict[str, Any] = {"gpus": gpus("H100-80GB", [0] * count), "links": links}
        if draw(st.booleans()):
            fields["gpus"][0]["mig"] = {"instances": [{"profile": "1g.10gb", "start": 0}]}
        nodes.append(node(name, labels={"rack": f"r{i % 2}"}, **fields))
    workloads = []
    for i in range(draw(st.integers(2, 6))):
        gang = draw(st.sampled_from([None, None, "true"]))
        shape: dict[str, Any] = draw(_SHAPES) if gang is None else {"gpus": 1}
        workloads.append(
            _w(
                f"w{i}",
                team=draw(st.sampled_from(["a", "b"])),
                tier=draw(st.sampled_from(["latency-sensitive", "standard", "background"])),
                replicas=draw(st.integers(1, 3)),
                gang=gang,
                gang_domain="rack" if gang and draw(st.booleans()) else None,
                duration_s=draw(st.sampled_from([None, 600, 7200])),
                **shape,
            )
        )
    policy = Policy.model_validate(
        {"teams": ["a", "b"], "quotas": [{"team": "a", "gpus": draw(st.sampled_from([1, 3, 100]))}]}
    )
    return planning_input(nodes, workloads, policy)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_inputs(), st.sampled_from(["greedy-fgd", "cpsat"]))
def test_plan_and_explain_agree_on_small_inputs(inp: PlanningInput, solver: str) -> None:
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=3.0, num_workers=1)
    assert_agree(inp, plan)

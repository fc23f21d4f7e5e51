"""Changing a node's sharing mode: an action with a drain cost, like a MIG
re-partition. The planner switches a drained node whose mode blocks waiting demand (unless the policy
forbids it), every back-end plans on the new mode, the executor applies the change, and the validator
checks the placements against the mode after the change and that the node was drained."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.api import create_app
from gpuplan.api.settings import Settings
from gpuplan.models import (
    NodeSharing,
    Plan,
    PlanningInput,
    PlanStatus,
    Policy,
    TimeSliced,
    Workload,
    default_catalog,
)
from gpuplan.planner.executor import Executor, SimCluster
from gpuplan.planner.pipeline import sharing
from gpuplan.planner.pipeline.actions import SET_SHARING, START
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.occupancy import Holding, Occupancy
from gpuplan.planner.validation.validate import validate_plan
from gpuplan.solvers.cpsat import solver as cpsat_solver
from tests._api import KEYS, PLANNER, auth, tiny_body
from tests._factories import assign, frac, node, plan, planning_input, wait, whole, with_actions

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
L40S = [{"index": i, "model": "L40S-48GB"} for i in range(2)]
SOLVERS = ["first-fit", "best-fit", "greedy-fgd", "cpsat", "milp-highs", "fleet"]
FOUR_SHARES = TimeSliced.model_validate({"time-slicing": {"replicas": 4}})
FORBIDDEN = Policy.model_validate({"sharing": {"allow_change": False}})


def only_free_node_exclusive(policy: Policy | None = None) -> PlanningInput:
    """Two exclusive L40S nodes: ``busy`` runs a 2-GPU job, ``ex`` is empty; five notebooks wait."""
    return planning_input(
        [node("busy", gpus=L40S, sharing="exclusive"), node("ex", gpus=L40S, sharing="exclusive")],
        [
            Workload.model_validate({"id": "job", "gpus": 2, "running_on": "busy:0,1"}),
            Workload.model_validate({"id": "nb", "gpu_milli": 250, "replicas": 5}),
        ],
        policy,
    )


def _fractions_per_gpu(p: Plan) -> Counter[tuple[str, int]]:
    return Counter((a.node, g.index) for a in p.assignments for g in a.gpus if g.milli is not None)


@pytest.mark.parametrize("solver", SOLVERS)
def test_the_only_free_node_goes_time_sliced_for_waiting_fractions(
    solver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if solver == "fleet":
        monkeypatch.setattr(cpsat_solver, "MONOLITHIC_REPLICAS", 0)
    inp = only_free_node_exclusive()
    p = make_plan(inp, solver="cpsat" if solver == "fleet" else solver, now=NOW, time_limit_s=10)
    assert validate_plan(p, inp) == []
    assert p.sharing == (NodeSharing(node="ex", sharing=FOUR_SHARES),)
    changes = [(a.round, a.node, a.from_, a.to) for a in p.actions if a.kind == SET_SHARING]
    assert changes == [(1, "ex", "exclusive", "time-slicing:4")]
    # The change comes before the starts on the node; the job keeps running; all notebooks start.
    kinds = [a.kind for a in p.actions]
    assert kinds.index(SET_SHARING) < kinds.index(START)
    assert {a.node for a in p.assignments if a.workload == "nb"} == {"ex"}
    assert sum(a.workload == "nb" for a in p.assignments) == 5 and not p.unplaced
    assert all(n <= 4 for n in _fractions_per_gpu(p).values())
    assert p.metrics["sharing_changes"] == 1


def test_a_policy_that_forbids_mode_changes_leaves_the_work_waiting_with_a_reason() -> None:
    inp = only_free_node_exclusive(FORBIDDEN)
    p = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10)
    assert p.sharing == () and not any(a.kind == SET_SHARING for a in p.actions)
    # The fleet could host them in another mode: not NEVER_FITS, though the policy keeps the modes.
    assert [(u.workload, u.code) for u in p.unplaced] == [("nb", "SHARING_MODE")] * 5
    assert p.unplaced[0].reason.endswith(
        "the sharing mode of busy, ex does not offer it and the policy does not allow changing a node's "
        "mode (sharing.allow_change is false)"
    )


def test_a_node_with_running_work_keeps_its_mode() -> None:
    # ``ex`` runs a whole GPU: not drained, so the notebooks wait on it rather than evict it.
    inp = planning_input(
        [node("ex", gpus=L40S, sharing="exclusive")],
        [
            Workload.model_validate({"id": "job", "gpus": 1, "running_on": "ex:0"}),
            Workload.model_validate({"id": "nb", "gpu_milli": 250}),
        ],
    )
    p = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10)
    assert p.sharing == () and [u.workload for u in p.unplaced] == ["nb"]
    assert p.unplaced[0].reason.endswith(
        "the sharing mode of ex does not offer it and none of them is drained"
    )


def test_whole_gpus_wait_no_longer_on_an_idle_time_sliced_node() -> None:
    inp = planning_input(
        [node("ts", gpus=L40S, sharing={"time-slicing": {"replicas": 4}})],
        [Workload.model_validate({"id": "train", "gpus": 2, "tier": "latency-sensitive"})],
    )
    p = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10)
    assert validate_plan(p, inp) == []
    assert p.sharing == (NodeSharing(node="ts", sharing="exclusive"),)
    assert [(a.node, a.gpus) for a in p.assignments] == [("ts", whole(0, 1))]


def test_validator_rejects_hand_made_mode_changes() -> None:
    inp = planning_input(
        [node("ex", gpus=L40S, sharing="exclusive")],
        [
            Workload.model_validate({"id": "job", "gpus": 1, "running_on": "ex:0"}),
            Workload.model_validate({"id": "nb", "gpu_milli": 250, "replicas": 2}),
        ],
        FORBIDDEN,
    )
    to_shares = (NodeSharing(node="ex", sharing=FOUR_SHARES),)
    # The job stays on its whole GPU: the node is not drained, the mode forbids the whole GPU, and the
    # policy forbids the change.
    bad = plan([assign("job", 0, "ex", whole(0)), assign("nb", 0, "ex", frac(1, 250))], [wait("nb", 1)])
    bad = with_actions(bad.model_copy(update={"sharing": to_shares}), inp)
    found = [(v.rule, v.subject, v.message) for v in validate_plan(bad, inp)]
    changed = "The plan changes node 'ex' to time-slicing with 4 replicas (fractions only)"
    assert found == [
        (
            "sharing-mode",
            "node ex gpu 0",
            "workload job replica 0 uses whole GPU 0 of node 'ex', whose sharing mode is time-slicing with 4 "
            "replicas (fractions only).",
        ),
        (
            "sharing-change",
            "node ex",
            f"{changed}, but the policy does not allow it (sharing.allow_change is false).",
        ),
        (
            "sharing-change",
            "node ex",
            f"{changed}, but workload job replica 0 keeps running on whole GPU 0 there: the node must be "
            "drained first.",
        ),
    ]
    # Without the change, a fraction on the exclusive node breaks its mode; a change of an unknown node
    # is an unknown reference.
    no_change = plan([assign("job", 0, "ex", whole(0)), assign("nb", 0, "ex", frac(1, 250))], [wait("nb", 1)])
    assert [v.rule for v in validate_plan(with_actions(no_change, inp), inp)] == ["sharing-mode"]
    ghost = plan([assign("job", 0, "ex", whole(0))], [wait("nb", 0), wait("nb", 1)])
    ghost = ghost.model_copy(update={"sharing": (NodeSharing(node="ghost", sharing="exclusive"),)})
    assert [(v.rule, v.subject) for v in validate_plan(ghost, inp)] == [("unknown-ref", "node ghost")]


def test_the_simulated_cluster_applies_the_change_and_reports_the_new_mode() -> None:
    inp = only_free_node_exclusive()
    sim = SimCluster(inp.cluster, default_catalog(), NOW)
    sim.place(assign("job", 0, "busy", whole(0, 1)))
    ex = Executor(sim, lambda i, now: make_plan(i, solver="greedy-fgd", now=now), Policy())
    report = ex.round(list(inp.workloads))
    assert not report.failed
    assert [o.action.kind for o in report.outcomes].count(SET_SHARING) == 1
    observed = {n.name: n.sharing for n in sim.observe().cluster.nodes}
    assert observed == {"busy": "exclusive", "ex": FOUR_SHARES}
    assert sum(k[0] == "nb" for k in sim.occ.holders) == 5
    # The next round plans on the new mode: nothing to change, nothing to start.
    again = ex.round(list(inp.workloads))
    assert again.plan.sharing == () and not again.outcomes


def test_occupancy_changes_the_mode_of_drained_nodes_only() -> None:
    inp = only_free_node_exclusive()
    occ = Occupancy.of(inp.cluster, inp.workloads, default_catalog())
    assert (
        occ.set_sharing_problem("busy")
        == "node 'busy' is not drained (2 replica(s) still run on its non-MIG GPUs)"
    )
    assert occ.set_sharing_problem("ex") is None
    occ.set_sharing(NodeSharing(node="ex", sharing=FOUR_SHARES))
    assert (
        occ.problem(("x", 0), Holding("ex", whole(0)))
        == "ex:0 is time-slicing with 4 replicas (fractions only)"
    )


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app in-process on a real SQLite store (no solver process is needed here)."""
    db = tmp_path_factory.mktemp("changes") / "gpuplan.db"
    settings = Settings(database=str(db), api_keys=KEYS, prestart_solvers=False)
    with TestClient(create_app(settings), headers=auth(PLANNER)) as c:
        yield c


def test_api_names_a_bad_sharing_policy_and_validates_mode_changes(client: TestClient) -> None:
    body = tiny_body()
    body["policy"] = {"sharing": {"replicas": 0}}
    r = client.post("/v1/plans", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "policy", "sharing", "replicas"]
    inp = only_free_node_exclusive()
    cluster = inp.cluster.model_dump(mode="json", by_alias=True, exclude_none=True)
    # Whole GPUs kept on a node the plan makes time-sliced: its mode is checked after the change.
    p = plan([assign("job", 0, "busy", whole(0, 1))], [wait("nb", r) for r in range(5)])
    p = with_actions(p.model_copy(update={"sharing": (NodeSharing(node="busy", sharing=FOUR_SHARES),)}), inp)
    r = client.post(
        "/v1/validate", json={"cluster": cluster, "plan": p.model_dump(mode="json", by_alias=True)}
    )
    assert r.status_code == 200, r.text
    assert [(v["rule"], v["subject"]) for v in r.json()["violations"]] == [
        ("sharing-mode", "node busy gpu 0"),
        ("sharing-mode", "node busy gpu 1"),
    ]


def forty_exclusive_nodes() -> PlanningInput:
    """40 drained exclusive L40S nodes (one GPU each) and 80 waiting half-GPU fractions: with every node
    time-sliced all 80 start (2 per GPU), so the true optimum of the queue term is 0."""
    one = [{"index": 0, "model": "L40S-48GB"}]
    return planning_input(
        [node(f"n{i:02d}", gpus=one, sharing="exclusive") for i in range(40)],
        [
            Workload.model_validate(
                {"id": "nb", "gpu_milli": 500, "replicas": 80, "queued_since": "2026-11-30T10:00:00Z"}
            )
        ],
        Policy.model_validate({"sharing": {"allow_change": True}}),
    )


@pytest.mark.parametrize("solver", ["cpsat", "milp-highs"])
def test_the_pre_pass_flips_as_many_nodes_as_help(solver: str) -> None:
    inp = forty_exclusive_nodes()
    p = make_plan(inp, solver=solver, now=NOW, time_limit_s=20)
    assert validate_plan(p, inp) == []
    assert len(p.assignments) == 80 and not p.unplaced
    assert len(p.sharing) == 40 and p.solver.objective == 0
    # Modes fixed before the solve: the model was a restriction, so nothing is proved optimal.
    assert p.status is not PlanStatus.OPTIMAL
    assert p.solver.best_bound is not None and p.solver.best_bound <= 0


def test_a_plan_missing_some_set_sharing_and_start_actions_is_refused() -> None:
    """The planner's own plan (40 nodes switched, 80 fractions started) with 8 of its 40 set-sharing
    actions and 16 of its 80 starts taken out: each missing action is one violation, by name."""
    inp = forty_exclusive_nodes()
    p = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=20)
    sets = [a for a in p.actions if a.kind == SET_SHARING]
    starts = [a for a in p.actions if a.kind == START]
    assert (len(sets), len(starts)) == (40, 80)
    gone = {id(a) for a in sets[::5] + starts[::5]}
    cut = p.model_copy(update={"actions": tuple(a for a in p.actions if id(a) not in gone)})
    found = validate_plan(cut, inp)
    assert sorted((v.rule, v.subject) for v in found) == sorted(
        [("sharing-unscheduled", f"node {a.node}") for a in sets[::5]]
        + [("start-unscheduled", f"workload {a.workload} replica {a.replica}") for a in starts[::5]]
    )


@pytest.mark.parametrize("solver", ["cpsat", "milp-highs", "greedy-fgd"])
def test_modes_the_pre_pass_fixed_prove_nothing(solver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A pre-pass that tries nothing leaves every node exclusive: the solver proves the queue term of
    # that restriction (all 80 wait), not of the problem, whose optimum is 0 (every node flipped).
    monkeypatch.setattr(sharing, "MAX_TRIALS", 0)
    inp = forty_exclusive_nodes()
    p = make_plan(inp, solver=solver, now=NOW, time_limit_s=20)
    assert validate_plan(p, inp) == []
    assert p.sharing == () and len(p.unplaced) == 80
    # 80 x standard weight 3 x 50 hundredths x (8 + 2 hours waited).
    assert p.solver.objective == 80 * 3 * 50 * 10
    assert p.status is not PlanStatus.OPTIMAL
    assert p.solver.best_bound is not None and p.solver.best_bound <= 0


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.integers(1, 12), data=st.data())
def test_the_pre_pass_flips_enough_nodes_and_no_more_than_help(nodes: int, data: st.DataObject) -> None:
    # ``nodes`` drained exclusive one-GPU nodes; ``jobs`` whole GPUs and ``halves`` half-GPU fractions
    # wait, few enough to all start once ceil(halves / 2) nodes are time-sliced and the rest exclusive.
    halves = data.draw(st.integers(1, 2 * nodes))
    jobs = data.draw(st.integers(0, nodes - (halves + 1) // 2))
    one = [{"index": 0, "model": "L40S-48GB"}]
    work = [Workload.model_validate({"id": "nb", "gpu_milli": 500, "replicas": halves})]
    if jobs:
        work.append(Workload.model_validate({"id": "job", "gpus": 1, "replicas": jobs}))
    inp = planning_input([node(f"n{i:02d}", gpus=one, sharing="exclusive") for i in range(nodes)], work)
    p = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=10, deterministic=True)
    assert validate_plan(p, inp) == []
    assert not p.unplaced and p.solver.objective == 0
    assert p.solver.best_bound is not None and p.solver.best_bound <= 0
    assert len(p.sharing) >= (halves + 1) // 2


def busy_exclusive_nodes(n: int) -> PlanningInput:
    """``n`` exclusive 2 x L4 nodes, a preemptible background replica on GPU 0 of each, and ``4n``
    latency-sensitive halves: preempting the ``n`` replicas and switching every node to time-slicing
    places all the halves, at a queue term of n x 1 x 100 x 8 (the preempted work waits)."""
    started = (NOW - timedelta(hours=5)).isoformat()
    return planning_input(
        [
            node(f"n{i}", gpus=[{"index": g, "model": "L4-24GB"} for g in range(2)], sharing="exclusive")
            for i in range(n)
        ],
        [
            *(
                Workload.model_validate(
                    {
                        "id": f"r{i}", "gpus": 1, "tier": "background", "preemptible": True,
                        "started_at": started, "running_on": f"n{i}:0",
                    }
                )
                for i in range(n)
            ),
            Workload.model_validate(
                {"id": "f", "tier": "latency-sensitive", "gpu_milli": 500, "replicas": 4 * n}
            ),
        ],
        Policy.model_validate(
            {"sharing": {"allow_change": True, "replicas": 2}, "disruption": {"max_preemptions_per_round": n}}
        ),
    )  # fmt: skip


@pytest.mark.parametrize("n", [1, 10])
@pytest.mark.parametrize("solver", ["cpsat", "milp-highs", "greedy-fgd"])
def test_a_busy_node_the_budget_could_drain_is_never_a_false_optimum(solver: str, n: int) -> None:
    """Issue 39's busy-sharing case: the exact solvers preempt the background work and switch the nodes
    (n x 800); a greedy plan that cannot is FEASIBLE with a bound no higher, and no waiting half is
    NEVER_FITS (a mode change would host it)."""
    inp = busy_exclusive_nodes(n)
    p = make_plan(inp, solver=solver, now=NOW, time_limit_s=20, deterministic=True, num_workers=1)
    assert validate_plan(p, inp) == []
    assert p.status is PlanStatus.FEASIBLE
    bound, objective = p.solver.best_bound, p.solver.objective
    assert bound is not None and objective is not None and bound <= n * 800 <= objective
    assert "NEVER_FITS" not in {u.code for u in p.unplaced}
    if solver != "greedy-fgd":
        assert p.solver.objective == n * 800
        assert len(p.sharing) == n and {a.kind for a in p.actions} == {"preempt", "set-sharing", "start"}
    else:
        assert {u.code for u in p.unplaced if u.workload == "f"} == {"SHARING_MODE"}


def test_a_mode_change_is_kept_for_work_on_a_gpu_the_mig_pre_pass_turned_off() -> None:
    """An exclusive node whose GPU 1 is in MIG mode and GPU 0 idle: the sharing pre-pass makes it
    time-sliced, the MIG pre-pass turns MIG off on GPU 1 (and on for GPU 0), and the fraction lands on
    GPU 1. The change was dropped as unused (GPU 1 was a MIG GPU in the input), which left a fraction on
    an exclusive node (a hypothesis draw of test_solvers_valid)."""
    inp = planning_input(
        [
            node(
                "n0",
                sharing="exclusive",
                gpus=[
                    {"index": 0, "model": "H100-80GB"},
                    {
                        "index": 1,
                        "model": "H100-80GB",
                        "mig": {"instances": [{"profile": "7g.80gb", "start": 0}]},
                    },
                ],
            )
        ],
        [
            Workload.model_validate({"id": "f", "gpu_memory_mib": 16384, "cpu_milli": 1000}),
            Workload.model_validate({"id": "m", "mig_profile": "7g.80gb", "cpu_milli": 1000}),
        ],
        Policy.model_validate({"mig": {"allow_repartition": True}}),
    )
    for solver in ("first-fit", "greedy-fgd", "cpsat"):
        p = make_plan(inp, solver=solver, now=NOW, time_limit_s=10, deterministic=True)
        assert validate_plan(p, inp) == []
        fractions = [a for a in p.assignments if a.workload == "f"]
        assert all(
            any(c.node == a.node for c in p.sharing)
            for a in fractions
            if a.gpus and a.gpus[0].milli is not None
        )

"""A node's GPU sharing mode (issue 15 item 2): the device plugin offers a node's non-MIG GPUs either
whole (``exclusive``) or as time-sliced shares, never both, so every back-end keeps fractions off
exclusive nodes and whole GPUs off time-sliced ones, and the validator checks it on its own."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuplan.api import create_app
from gpuplan.api.settings import Settings
from gpuplan.models import Cluster, Node, Plan, PlanningInput, Policy, TimeSliced, Workload
from gpuplan.planner.io.importers.kubernetes import read_state
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.validate import validate_plan
from gpuplan.solvers.cpsat import solver as cpsat_solver
from tests._api import KEYS, PLANNER, auth, tiny_body
from tests._factories import assign, frac, mig, mig_gpu, node, plan, planning_input, wait, whole, with_actions
from tests._paths import TESTS_DATA

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
TIME_SLICED = {"time-slicing": {"replicas": 4}}
L40S = [{"index": i, "model": "L40S-48GB"} for i in range(2)]
FIXED_MODES = Policy.model_validate({"sharing": {"allow_change": False}})
#: Every back-end; ``fleet`` is CP-SAT made to plan by target configurations (column generation).
SOLVERS = ["first-fit", "best-fit", "greedy-fgd", "cpsat", "milp-highs", "milp-cbc", "fleet"]


def _fleet() -> list[Node]:
    # The time-sliced node comes first, so that a mode-blind first fit would give it whole GPUs.
    return [node("ts", gpus=L40S, sharing=TIME_SLICED), node("ex", gpus=L40S, sharing="exclusive")]


def _mixed_demand() -> list[Workload]:
    # Three latency-sensitive whole GPUs outweigh four background shares: ignoring the modes, the best
    # plan puts the third whole GPU on the time-sliced node. Keeping them, it waits.
    return [
        Workload.model_validate({"id": "train", "tier": "latency-sensitive", "gpus": 1, "replicas": 3}),
        Workload.model_validate({"id": "nb", "tier": "background", "gpu_milli": 250, "replicas": 4}),
    ]


def _mode_breaches(inp: PlanningInput, p: Plan) -> list[str]:
    """Uses that break a node's mode (after the plan's mode changes), found without the validator or the
    solvers' rule."""
    modes = {n.name: n.sharing for n in inp.cluster.nodes} | {m.node: m.sharing for m in p.sharing}
    out = []
    for a in p.assignments:
        for g in a.gpus:
            if modes[a.node] == "exclusive" and g.milli is not None:
                out.append(f"{a.workload}#{a.replica}: fraction of exclusive {a.node}:{g.index}")
            if isinstance(modes[a.node], TimeSliced) and g.milli is None and g.mig_profile is None:
                out.append(f"{a.workload}#{a.replica}: whole time-sliced {a.node}:{g.index}")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("solver", SOLVERS)
def test_every_solver_keeps_each_node_in_its_mode(solver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if solver == "fleet":
        monkeypatch.setattr(cpsat_solver, "MONOLITHIC_REPLICAS", 0)
    # Modes fixed: otherwise the plan would switch the idle time-sliced node to exclusive for the third
    # whole GPU (tests/planner/pipeline/test_sharing_changes.py).
    inp = planning_input(_fleet(), _mixed_demand(), FIXED_MODES)
    p = make_plan(inp, solver="cpsat" if solver == "fleet" else solver, now=NOW, time_limit_s=10)
    if solver == "fleet":
        assert p.solver.bound_source in ("configuration LP", "knapsack")
    assert validate_plan(p, inp) == []
    assert _mode_breaches(inp, p) == []
    placed = {(a.workload, a.replica): a.node for a in p.assignments}
    assert sorted(k for k, n in placed.items() if k[0] == "train") == [("train", 0), ("train", 1)]
    assert {n for k, n in placed.items() if k[0] == "train"} == {"ex"}
    assert {n for k, n in placed.items() if k[0] == "nb"} == {"ts"} and len(placed) == 6
    assert [(u.workload, u.replica) for u in p.unplaced] == [("train", 2)]


@pytest.mark.parametrize("solver", ["first-fit", "cpsat"])
def test_nodes_without_a_mode_still_mix(solver: str) -> None:
    # Legacy inputs (no ``sharing``) keep their meaning: whole GPUs and shares may share a node.
    inp = planning_input(
        [node("n", gpus=L40S)],
        [
            Workload.model_validate({"id": "train", "gpus": 1}),
            Workload.model_validate({"id": "nb", "gpu_milli": 500, "replicas": 2}),
        ],
    )
    p = make_plan(inp, solver=solver, now=NOW, time_limit_s=10)
    assert len(p.assignments) == 3 and not p.unplaced


def test_mig_gpus_of_a_time_sliced_node_keep_serving_instances() -> None:
    # The mode concerns the non-MIG GPUs; a MIG GPU of the same node serves its instances as before.
    n = node(
        "h", gpus=[{"index": 0, "model": "H100-80GB"}, {**mig_gpu(1, ("3g.40gb", 4)), "model": "H100-80GB"}]
    )
    n = n.model_copy(update={"sharing": TimeSliced.model_validate(TIME_SLICED)})
    work = [
        Workload.model_validate({"id": "m", "mig_profile": "3g.40gb"}),
        Workload.model_validate({"id": "s", "gpu_milli": 300}),
        Workload.model_validate({"id": "w", "gpus": 1}),
    ]
    inp = planning_input([n], work, FIXED_MODES)
    p = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10)
    uses = {a.workload: a.gpus for a in p.assignments}
    assert uses["m"] == mig(1, "3g.40gb", 4) and uses["s"] == frac(0, 300)
    assert [u.workload for u in p.unplaced] == ["w"]


def _hand_made() -> PlanningInput:
    return planning_input(
        _fleet(),
        [
            Workload.model_validate({"id": "big", "gpus": 1, "replicas": 2}),
            Workload.model_validate({"id": "nb", "gpu_milli": 250, "replicas": 2}),
        ],
    )


def test_validator_rejects_uses_against_the_mode() -> None:
    inp = _hand_made()
    ok = plan(
        [
            assign("big", 0, "ex", whole(0)),
            assign("nb", 0, "ts", frac(0, 250)),
        ],
        [wait("big", 1), wait("nb", 1)],
    )
    ok = with_actions(ok, inp)
    assert validate_plan(ok, inp) == []
    bad = plan(
        [
            assign("big", 0, "ex", whole(0)),
            assign("big", 1, "ts", whole(1)),
            assign("nb", 0, "ts", frac(0, 250)),
            assign("nb", 1, "ex", frac(1, 250)),
        ]
    )
    found = [(v.rule, v.subject, v.message) for v in validate_plan(with_actions(bad, inp), inp)]
    assert found == [
        (
            "sharing-mode",
            "node ts gpu 1",
            "workload big replica 1 uses whole GPU 1 of node 'ts', whose sharing mode is time-slicing "
            "with 4 replicas (fractions only).",
        ),
        (
            "sharing-mode",
            "node ex gpu 1",
            "workload nb replica 1 uses 250 milli of GPU 1 of node 'ex', whose sharing mode is exclusive "
            "(whole GPUs only).",
        ),
    ]


def test_the_mode_reads_and_writes_as_the_format_says() -> None:
    raw: dict[str, Any] = {"nodes": [{"name": "ts", "cpu_milli": 1, "memory_mib": 1, "sharing": TIME_SLICED}]}
    cluster = Cluster.model_validate(raw)
    sharing = cluster.nodes[0].sharing
    assert isinstance(sharing, TimeSliced) and sharing.time_slicing.replicas == 4
    dumped = cluster.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["nodes"][0]["sharing"] == TIME_SLICED
    assert Cluster.model_validate(dumped) == cluster
    assert Node.model_validate(
        {"name": "e", "cpu_milli": 1, "memory_mib": 1, "sharing": "exclusive"}
    ).sharing == ("exclusive")


def test_running_work_against_the_mode_is_an_input_error() -> None:
    with pytest.raises(
        ValueError, match=r"workload 'old' field running_on\[0\]: runs on whole GPU 0 of node 'ts'"
    ):
        planning_input(_fleet(), [Workload.model_validate({"id": "old", "gpus": 1, "running_on": "ts:0"})])
    with pytest.raises(
        ValueError, match=r"runs on a fraction of GPU 1 of node 'ex', whose sharing mode is exclusive"
    ):
        planning_input(
            _fleet(), [Workload.model_validate({"id": "s", "gpu_milli": 100, "running_on": "ex:1=100"})]
        )


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app in-process on a real SQLite store (no solver process is needed here)."""
    db = tmp_path_factory.mktemp("sharing") / "gpuplan.db"
    settings = Settings(database=str(db), api_keys=KEYS, prestart_solvers=False)
    with TestClient(create_app(settings), headers=auth(PLANNER)) as c:
        yield c


def test_api_names_a_bad_mode_and_validates_the_mode(client: TestClient) -> None:
    body = tiny_body()
    body["cluster"]["nodes"][0]["sharing"] = "timeslice"
    r = client.post("/v1/plans", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "cluster", "nodes", 0, "sharing"]
    assert "'timeslice' is not a sharing mode" in r.text
    cluster = {"nodes": [n.model_dump(mode="json", by_alias=True, exclude_none=True) for n in _fleet()]}
    p = plan([assign("big", 0, "ts", whole(0))])
    r = client.post(
        "/v1/validate", json={"cluster": cluster, "plan": p.model_dump(mode="json", by_alias=True)}
    )
    assert r.status_code == 200, r.text
    assert [(v["rule"], v["subject"]) for v in r.json()["violations"]] == [("sharing-mode", "node ts gpu 0")]


def test_an_imported_fleet_is_planned_in_its_modes() -> None:
    # The Kubernetes fixture has time-sliced and exclusive L40S nodes; its pending shares and whole-GPU
    # pods go only where the device plugin could serve them.
    data = TESTS_DATA / "kubernetes"
    state = read_state(data / "nodes.json", data / "pods.json")
    modes = {n.name: n.sharing for n in state.cluster.nodes}
    assert isinstance(modes["l40s-ts-01"], TimeSliced) and modes["l40s-02"] == "exclusive"
    inp = PlanningInput(cluster=state.cluster, workloads=state.workloads)
    p = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10)
    assert validate_plan(p, inp) == [] and _mode_breaches(inp, p) == []
    kinds = {a.gpus[0].kind for a in p.assignments if a.node == "l40s-ts-01" and a.gpus}
    assert kinds == {"fraction"}

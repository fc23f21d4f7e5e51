"""Time-slicing replicas (issue 15 item 2): the device plugin offers a time-sliced GPU as ``replicas``
shares and each fractional pod takes one, so at most ``replicas`` fractions run on one GPU whatever
their milli-GPU. Every back-end keeps the count, the validator checks it on its own, and running work
over it is refused as input."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from gpuplan.api import create_app
from gpuplan.api.settings import Settings
from gpuplan.models import Node, Plan, Workload
from gpuplan.models.catalog import default_catalog
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.occupancy import running_conflicts
from gpuplan.planner.validation.validate import validate_plan
from gpuplan.solvers.cpsat import solver as cpsat_solver
from tests._api import KEYS, PLANNER, auth
from tests._factories import assign, frac, node, plan, planning_input, wait, with_actions

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
L40S = [{"index": i, "model": "L40S-48GB"} for i in range(2)]
#: Every back-end; ``fleet`` is CP-SAT made to plan by target configurations (column generation).
SOLVERS = ["first-fit", "best-fit", "greedy-fgd", "cpsat", "milp-highs", "milp-cbc", "fleet"]


def _two_shares() -> Node:
    return node("ts", gpus=L40S, sharing={"time-slicing": {"replicas": 2}})


def _fractions_per_gpu(p: Plan) -> Counter[tuple[str, int]]:
    """Fractions on each GPU, counted without the validator or the solvers' rule."""
    return Counter((a.node, g.index) for a in p.assignments for g in a.gpus if g.milli is not None)


@pytest.mark.slow
@pytest.mark.parametrize("solver", SOLVERS)
def test_every_solver_keeps_at_most_replicas_fractions_per_gpu(
    solver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Six 100-milli notebooks would fit in milli-GPU on one L40S; two shares per GPU take four of them,
    # and the one already running on GPU 0 leaves three.
    if solver == "fleet":
        monkeypatch.setattr(cpsat_solver, "MONOLITHIC_REPLICAS", 0)
    work = [
        Workload.model_validate({"id": "nb", "gpu_milli": 100, "replicas": 6}),
        Workload.model_validate({"id": "old", "gpu_milli": 100, "running_on": "ts:0=100"}),
    ]
    inp = planning_input([_two_shares()], work)
    p = make_plan(inp, solver="cpsat" if solver == "fleet" else solver, now=NOW, time_limit_s=10)
    assert validate_plan(p, inp) == []
    counts = _fractions_per_gpu(p)
    assert counts == {("ts", 0): 2, ("ts", 1): 2}
    assert sum(a.workload == "nb" for a in p.assignments) == 3 and len(p.unplaced) == 3


def test_validator_rejects_more_fractions_than_replicas() -> None:
    inp = planning_input(
        [_two_shares()], [Workload.model_validate({"id": "nb", "gpu_milli": 100, "replicas": 3})]
    )
    ok = plan([assign("nb", 0, "ts", frac(0, 100)), assign("nb", 1, "ts", frac(0, 100))], [wait("nb", 2)])
    assert validate_plan(with_actions(ok, inp), inp) == []
    bad = with_actions(plan([assign("nb", r, "ts", frac(1, 100)) for r in range(3)]), inp)
    found = [(v.rule, v.subject, v.message) for v in validate_plan(bad, inp)]
    assert found == [
        (
            "sharing-replicas",
            "node ts gpu 1",
            "GPU 1 of node 'ts' holds 3 fractions; time-slicing offers it as 2 replicas.",
        )
    ]


#: Three fractions running on GPU 1 of a node with two shares per GPU.
OVER_REPLICAS = [
    {"id": "a", "gpu_milli": 100, "replicas": 2, "running_on": "ts:1=100;ts:1=100"},
    {"id": "b", "gpu_milli": 100, "running_on": "ts:1=100"},
]


def test_running_work_over_replicas_is_an_input_error() -> None:
    inp = planning_input([_two_shares()], [Workload.model_validate(w) for w in OVER_REPLICAS])
    assert running_conflicts(inp.cluster, inp.workloads, default_catalog()) == [
        (
            1,
            0,
            "workload 'b' field running_on[0]: ts:1 has no time-sliced share left (its 2 replicas are taken)",
        )
    ]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app in-process on a real SQLite store (no solver process is needed here)."""
    db = tmp_path_factory.mktemp("replicas") / "gpuplan.db"
    settings = Settings(database=str(db), api_keys=KEYS, prestart_solvers=False)
    with TestClient(create_app(settings), headers=auth(PLANNER)) as c:
        yield c


def test_api_refuses_running_work_over_replicas(client: TestClient) -> None:
    cluster = {"nodes": [_two_shares().model_dump(mode="json", by_alias=True, exclude_none=True)]}
    body = {
        "cluster": cluster,
        "workloads": OVER_REPLICAS,
        "options": {"solver": "first-fit", "now": NOW.isoformat()},
    }
    r = client.post("/v1/plans", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "workloads", 1, "running_on", 0]
    assert "ts:1 has no time-sliced share left" in detail["msg"]

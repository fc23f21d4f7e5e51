"""GPU memory per workload: fractions of one GPU share its memory, whole GPUs and MIG instances must hold
the ask, every back-end keeps to it, running work that over-commits it is bad input, plans report it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.cli import main
from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.planner.io.exporters.workbook import build_tables
from gpuplan.planner.io.files import load_workloads
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.planning import make_plan
from gpuplan.planner.presentation.summary import render
from gpuplan.solvers.cpsat import solver as cpsat_solver
from gpuplan.solvers.fleet.classes import node_classes, request_classes
from gpuplan.solvers.fleet.engine import _placer
from gpuplan.solvers.fleet.pricing import price
from tests._api import PLANNER, Server, live
from tests._factories import node_data

__all__ = ["live"]

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
#: Every back-end; ``fleet`` is CP-SAT forced onto the target-configuration (pricing) path.
SOLVERS = ["first-fit", "best-fit", "greedy-fgd", "cpsat", "milp-highs", "fleet"]
L40S_MIB = 49152


def _plan(
    nodes: list[dict[str, Any]], work: list[dict[str, Any]], solver: str, mp: pytest.MonkeyPatch
) -> Any:
    """A validated plan (``make_plan`` validates every plan it returns)."""
    if solver == "fleet":
        mp.setattr(cpsat_solver, "MONOLITHIC_REPLICAS", 0)
        solver = "cpsat"
    inp = PlanningInput.model_validate({"cluster": {"nodes": nodes}, "workloads": work})
    return make_plan(inp, solver=solver, now=NOW, time_limit_s=5)


@pytest.mark.slow
@pytest.mark.parametrize("solver", SOLVERS)
def test_gpu_memory_bounds_the_fractions_of_a_gpu(solver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # One L40S (48 GiB): compute would take ten 100-milli replicas, memory only two of 20 GiB and then
    # one memory-only ask of 8 GiB; a fraction without a memory ask still fits beside them.
    nodes = [node_data("l40s", "L40S-48GB", 1, sharing={"time-slicing": {"replicas": 4}})]
    work = [
        {"id": "kv", "gpu_milli": 100, "gpu_memory_mib": 20480, "replicas": 4, "tier": "latency-sensitive"},
        {"id": "small", "gpu_memory_mib": 8192, "replicas": 2},
        {"id": "plain", "gpu_milli": 100, "tier": "background"},
    ]
    plan = _plan(nodes, work, solver, monkeypatch)
    placed: dict[str, int] = {}
    for a in plan.assignments:
        placed[a.workload] = placed.get(a.workload, 0) + 1
    assert placed == {"kv": 2, "small": 1, "plain": 1}
    small = next(a for a in plan.assignments if a.workload == "small")
    assert small.gpu_memory_mib == 8192 and small.gpus[0].milli == 1
    assert plan.metrics["gpu_memory_allocated_mib"] == 2 * 20480 + 8192
    assert plan.metrics["allocated_gpu_memory_fraction"] == pytest.approx(49152 / L40S_MIB)


@pytest.mark.slow
@pytest.mark.parametrize("solver", SOLVERS)
def test_whole_and_mig_asks_go_where_the_memory_is(solver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # 60000 MiB fits an H100 (80 GiB), not an L40S; 40400 MiB fits H100's 3g.40gb (40448 MiB), not
    # A100-80GB's (40192 MiB), where a 3g.40gb instance is free or may be created. One of each fits.
    full = {"mig": {"instances": [{"profile": "4g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]}}
    half = {"mig": {"instances": [{"profile": "3g.40gb", "start": 4}]}}
    h100 = [{"index": 0, "model": "H100-80GB"}, {"index": 1, "model": "H100-80GB", **full}]
    nodes = [
        node_data("l40s", "L40S-48GB", 2, sharing="exclusive"),
        node_data("h100", "H100-80GB", 2) | {"gpus": h100},
        node_data("a100", "A100-SXM4-80GB", 1) | {"gpus": [{"index": 0, "model": "A100-SXM4-80GB", **half}]},
    ]
    work = [
        {"id": "big", "gpus": 1, "gpu_memory_mib": 60000, "replicas": 2},
        {"id": "q", "mig_profile": "3g.40gb", "gpu_memory_mib": 40400, "replicas": 2},
    ]
    plan = _plan(nodes, work, solver, monkeypatch)
    assert [(a.workload, a.node) for a in sorted(plan.assignments, key=lambda a: a.workload)] == [
        ("big", "h100"),
        ("q", "h100"),
    ]


def _files(tmp_path: Path, work: list[dict[str, Any]]) -> list[str]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"nodes": [node_data("l40s", "L40S-48GB", 1)]}))
    workloads = tmp_path / "w.yaml"
    workloads.write_text(yaml.safe_dump({"workloads": work}))
    return ["plan", "--cluster", str(cluster), "--workloads", str(workloads)]


#: Two running fractions holding 30 GiB each of one 48 GiB L40S: a state that cannot exist.
OVERCOMMITTED = [
    {"id": "a", "gpu_milli": 200, "gpu_memory_mib": 30720, "running_on": "l40s:0=200"},
    {"id": "b", "gpu_milli": 200, "gpu_memory_mib": 30720, "running_on": "l40s:0=200"},
]


def test_running_work_over_gpu_memory_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_files(tmp_path, OVERCOMMITTED))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert (
        "workload 'b' field running_on[0]: l40s:0 lacks GPU memory: 30720 MiB used + 30720 MiB asked" in err
    )


def test_an_ask_no_gpu_model_holds_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        _files(tmp_path, [{"id": "huge", "gpus": 1, "gpu_models": "L40S-48GB", "gpu_memory_mib": 60000}])
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "workload 'huge' field gpu_memory_mib: asks for 60000 MiB of GPU memory per GPU" in err
    assert "49152 MiB" in err


def test_api_refuses_running_work_over_gpu_memory(live: Server) -> None:
    body = {
        "cluster": {"nodes": [node_data("l40s", "L40S-48GB", 1)]},
        "workloads": OVERCOMMITTED,
        "options": {"solver": "first-fit", "time_limit_s": 1.0, "now": NOW.isoformat()},
    }
    with live.client(PLANNER) as c:
        r = c.post("/v1/plans", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "workloads", 1, "running_on", 0]
    assert "lacks GPU memory" in detail["msg"]


def test_csv_column(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("id,gpu_milli,gpu_memory_mib,running_on\nkv,250,20480,l40s:0=250\nmo,,16384,\n")
    kv, mo = load_workloads(path)
    assert (kv.gpu_memory_mib, kv.shapes[0].kind, mo.gpu_memory_mib, mo.shapes[0].kind) == (
        20480,
        "fraction",
        16384,
        "fraction",
    )
    assert mo.shapes[0].share_milli == 1


def test_plans_report_gpu_memory_per_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # An L40S shared by two 20 GiB asks, and an H100 given whole (its 80 GiB count as held).
    nodes = [node_data("l40s", "L40S-48GB", 1), node_data("h100", "H100-80GB", 1, sharing="exclusive")]
    work = [
        {"id": "kv", "gpu_milli": 100, "gpu_memory_mib": 20480, "replicas": 2},
        {"id": "train", "gpus": 1, "gpu_models": "H100-80GB"},
    ]
    plan = _plan(nodes, work, "cpsat", monkeypatch)
    inp = PlanningInput.model_validate({"cluster": {"nodes": nodes}, "workloads": work})
    tables = build_tables(plan, default_catalog(), inp)
    gpus = tables["Nodes"][tables["Nodes"]["level"] == "gpu"].set_index("node")
    assert gpus.loc["l40s", "used_gpu_memory_mib"] == 40960
    assert gpus.loc["l40s", "free_gpu_memory_mib"] == L40S_MIB - 40960
    assert gpus.loc["h100", "used_gpu_memory_mib"] == 81920 and gpus.loc["h100", "free_gpu_memory_mib"] == 0
    assert sorted(tables["Placements"]["gpu_memory_mib"]) == [0, 20480, 20480]
    assert plan.metrics["gpu_memory_total_mib"] == L40S_MIB + 81920
    assert "GPU memory: 120.0 of 128 GiB (93.8%)" in render(plan, inp)


def test_pricing_counts_gpu_memory() -> None:
    """The fleet engine's per-node pricing (exact CP-SAT) packs fractions by GPU memory too: an L40S
    (49152 MiB) holds two 20 GiB shares and one 8 GiB share (value 3 + 3 + 1), where milli-GPU alone
    would take two 20 GiB and six 8 GiB shares."""
    inp = PlanningInput.model_validate(
        {
            "cluster": {"nodes": [node_data("n", "L40S-48GB", 2)]},
            "workloads": [
                {"id": "kv", "gpu_milli": 100, "gpu_memory_mib": 20480, "replicas": 10},
                {"id": "kv2", "gpu_milli": 100, "gpu_memory_mib": 8192, "replicas": 10},
            ],
        }
    )
    problem = compile_problem(inp, default_catalog(), NOW)
    classes = request_classes(problem, range(len(problem.requests)))
    by_workload = {problem.requests[c.members[0]].workload: c.index for c in classes}
    (nc,) = node_classes(_placer(problem))
    priced = price(nc, classes, {by_workload["kv"]: 3.0, by_workload["kv2"]: 1.0}, time_limit_s=10)
    assert priced.proved and priced.best == pytest.approx(2 * (3 + 3 + 1))


def test_explanations_relax_models_only_to_those_with_the_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    # The H100 goes to higher-tier work; the free L40S has too little memory for the 60000 MiB ask, so
    # "allow L40S" is no way out (it used to be proposed, and its verification raised a bad input).
    nodes = [node_data("h100", "H100-80GB", 1), node_data("l40s", "L40S-48GB", 1)]
    work = [
        {"id": "a", "gpus": 1, "gpu_models": "H100-80GB", "tier": "latency-sensitive"},
        {"id": "big", "gpus": 1, "gpu_memory_mib": 60000},
    ]
    inp = PlanningInput.model_validate({"cluster": {"nodes": nodes}, "workloads": work})
    plan = make_plan(inp, now=NOW, time_limit_s=5, explain=True)
    (wait,) = plan.unplaced
    assert wait.workload == "big" and "l40s" not in wait.reason
    assert all(c.kind != "allow_model" for c in wait.counterfactuals)

"""What a plan's report claims: status, objective of the plan returned, a bound valid for the full problem,
a signed gap, one measure for every solver, determinism, and no move that buys nothing.

Queue penalties written out by hand below follow the documented rule: tier weight (latency-sensitive 10,
standard 3, background 1) x GPU demand in hundredths of a GPU x (8 + hours waited).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuplan.models import Plan, PlanningInput, PlanStatus
from gpuplan.models.plan import Assignment, GpuUse
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.repair import without_idle_moves
from gpuplan.planner.planning import make_plan
from gpuplan.solvers.base import CUT, SolveResult
from gpuplan.solvers.cpsat import pools, solver
from gpuplan.solvers.problem import PlacementProblem

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
STAMP = NOW.isoformat()
SOLVERS = ("first-fit", "best-fit", "greedy-fgd", "cpsat", "milp-highs", "milp-cbc")


def l40s_nodes(count: int, gpus: int = 1) -> list[dict[str, Any]]:
    return [
        {
            "name": f"n{i:03d}",
            "cpu_milli": 64000,
            "memory_mib": 262144,
            "gpus": [{"index": g, "model": "L40S-48GB"} for g in range(gpus)],
        }
        for i in range(count)
    ]


def planning(
    nodes: list[dict[str, Any]], work: list[dict[str, Any]], policy: dict[str, Any]
) -> PlanningInput:
    return PlanningInput.model_validate({"cluster": {"nodes": nodes}, "workloads": work, "policy": policy})


def fractions_everywhere(nodes: int) -> PlanningInput:
    """Every one-GPU node runs a movable half-GPU background replica; one whole GPU is wanted."""
    running = [
        {"id": f"bg{i}", "tier": "background", "gpu_milli": 500, "running_on": f"n{i:03d}:0=500"}
        for i in range(nodes)
    ]
    wanted = {"id": "ls", "tier": "latency-sensitive", "gpus": 1, "queued_since": STAMP}
    return planning(l40s_nodes(nodes), [*running, wanted], {"disruption": {"max_moves_per_round": 1}})


@pytest.mark.parametrize("nodes", [20, 150])
def test_a_move_frees_a_gpu_on_small_and_restricted_models(nodes: int) -> None:
    """150 nodes are too many for one model (the search works on neighbourhoods): the waiting replica
    must still be placed, by moving one fraction, and the plan is FEASIBLE there, never OPTIMAL."""
    plan = make_plan(fractions_everywhere(nodes), now=NOW, time_limit_s=20)
    assert not plan.unplaced
    assert sum(a.kind == "migrate" for a in plan.actions) == 1
    assert plan.solver.objective == 0 and plan.solver.best_bound == 0
    full = plan.solver.model_size.get("restricted") == 0  # one model of the whole problem
    assert full == (nodes == 20)
    assert plan.status is (PlanStatus.OPTIMAL if full else PlanStatus.FEASIBLE)


def test_never_fits_only_when_no_empty_node_could_host_it() -> None:
    inp = fractions_everywhere(150)
    policy = inp.policy.model_copy(
        update={"disruption": inp.policy.disruption.model_copy(update={"max_moves_per_round": 0})}
    )
    big = {"id": "big", "gpus": 2, "queued_since": STAMP}
    inp = planning(
        l40s_nodes(150),
        [*(w.model_dump(mode="json") for w in inp.workloads), big],
        policy.model_dump(mode="json"),
    )
    plan = make_plan(inp, now=NOW, time_limit_s=20)
    codes = {u.workload: u.code for u in plan.unplaced}
    assert codes["ls"] != "NEVER_FITS"  # an empty node holds it: only the running fractions block it
    assert codes["big"] == "NEVER_FITS"  # no node has two GPUs


def preemptible_on_every_gpu() -> PlanningInput:
    running = [
        {
            "id": f"bg{i}", "tier": "background", "gpus": 1, "preemptible": True, "queued_since": STAMP,
            "running_on": f"n00{i}:0",
        }
        for i in range(2)
    ]  # fmt: skip
    wanted = {"id": "ls", "tier": "latency-sensitive", "gpus": 1, "queued_since": STAMP}
    return planning(l40s_nodes(2), [*running, wanted], {"disruption": {"max_preemptions_per_round": 1}})


@pytest.mark.parametrize("path", ["monolithic", "lns", "pop", "milp-highs", "milp-cbc", "greedy-fgd"])
def test_bound_is_valid_for_the_full_problem_on_every_path(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Preempting a background replica (800) for the latency-sensitive one (8000) is optimal: no path
    may report a bound above 800, and each reports a signed gap against its own plan's objective."""
    if path == "lns":
        monkeypatch.setattr(solver, "MONOLITHIC_REPLICAS", 0)
    if path == "pop":
        monkeypatch.setattr(pools, "POOL_GPUS", 1)
    name = path if path.startswith(("milp", "greedy")) else "cpsat"
    plan = make_plan(preemptible_on_every_gpu(), solver=name, now=NOW, time_limit_s=10)
    report = plan.solver
    assert report.best_bound is not None and report.objective is not None and report.gap is not None
    assert report.best_bound == 800
    assert report.objective in (800, 8000)  # the best plan, or keeping what runs
    assert report.gap == pytest.approx((report.objective - 800) / report.objective)
    if path in ("monolithic", "milp-highs", "milp-cbc"):
        assert plan.status is PlanStatus.OPTIMAL and report.objective == 800
    if path in ("lns", "pop", "greedy-fgd"):
        assert plan.status is not PlanStatus.OPTIMAL


def test_report_describes_the_plan_after_the_predicted_start_pass() -> None:
    """The solver starts the background replica now; the predicted-start pass holds it back because it
    would delay the two-GPU latency-sensitive replica reserved once the running one ends. The report
    must count both waiting replicas: 10 x 200 x 8 + 1 x 100 x 8 = 16800."""
    running = {
        "id": "r", "tier": "standard", "gpus": 1, "running_on": "n000:0",
        "started_at": STAMP, "duration_s": 3600,
    }  # fmt: skip
    ls = {"id": "ls", "tier": "latency-sensitive", "gpus": 2, "queued_since": STAMP}
    bg = {"id": "bg", "tier": "background", "gpus": 1, "queued_since": STAMP, "duration_s": 7200}
    plan = make_plan(planning(l40s_nodes(1, gpus=2), [running, ls, bg], {}), now=NOW, time_limit_s=10)
    codes = {u.workload: u.code for u in plan.unplaced}
    assert codes == {"ls": codes["ls"], "bg": "RESERVED_FOR_EARLIER"}
    assert plan.solver.objective == 16800 and plan.solver.terms["queue"] == 16800
    assert plan.status is PlanStatus.FEASIBLE
    assert plan.solver.best_bound is not None and plan.solver.best_bound <= 16800


@pytest.mark.parametrize("name", SOLVERS)
def test_every_solver_reports_the_same_terms(name: str) -> None:
    """One GPU, two standard one-GPU replicas: every solver places one; the other waits (3 x 100 x 8)."""
    work = [{"id": f"w{i}", "gpus": 1, "queued_since": STAMP} for i in range(2)]
    plan = make_plan(planning(l40s_nodes(1), work, {}), solver=name, now=NOW, time_limit_s=10)
    terms = plan.solver.terms
    assert terms["queue"] == 2400 and plan.solver.objective == 2400
    assert terms["disruption"] == 0 and terms["topology"] == 0 and terms["fragmentation"] == 0
    assert plan.solver.best_bound == 2400 and plan.solver.gap == 0


@pytest.mark.parametrize("backend", ["milp-highs", "milp-cbc"])
def test_milp_engines_prove_optimality_to_a_zero_gap(backend: str) -> None:
    """Two GPUs; a standard two-GPU replica waiting 4 h (3 x 200 x (8 + 4) = 7200 if it waits) or two
    background one-GPU replicas waiting 10 h (1 x 100 x (8 + 10) = 1800 each). Placing the big one
    leaves 3600 waiting, the two small ones 7200: the optimum is 3600, proved."""
    work = [
        {"id": "big", "tier": "standard", "gpus": 2, "queued_since": (NOW - timedelta(hours=4)).isoformat()},
        {"id": "small", "tier": "background", "gpus": 1, "replicas": 2,
         "queued_since": (NOW - timedelta(hours=10)).isoformat()},
    ]  # fmt: skip
    plan = make_plan(planning(l40s_nodes(1, gpus=2), work, {}), solver=backend, now=NOW, time_limit_s=10)
    assert [a.workload for a in plan.assignments] == ["big"]
    assert plan.status is PlanStatus.OPTIMAL
    assert plan.solver.objective == 3600 and plan.solver.best_bound == 3600 and plan.solver.gap == 0


@pytest.mark.slow
def test_lns_keeps_quotas_and_gangs_across_neighbourhoods(monkeypatch: pytest.MonkeyPatch) -> None:
    """More waiting replicas than one model takes: the team under quota gets exactly its 5 GPUs and the
    gang of 4 is placed whole (the plan passes the validator inside make_plan)."""
    monkeypatch.setattr(solver, "MONOLITHIC_REPLICAS", 20)
    nodes = [
        {"name": f"h{i}", "cpu_milli": 256000, "memory_mib": 2097152,
         "gpus": [{"index": g, "model": "H100-80GB"} for g in range(8)]}
        for i in range(4)
    ]  # fmt: skip
    work = [
        {"id": "a", "team": "a", "gpus": 1, "replicas": 60},
        {"id": "g", "team": "b", "gpus": 1, "replicas": 4, "gang": "g1"},
    ]
    policy = {"teams": ["a", "b"], "quotas": [{"team": "a", "gpus": 5}]}
    plan = make_plan(planning(nodes, work, policy), now=NOW, time_limit_s=6)
    placed = [a.workload for a in plan.assignments]
    assert placed.count("a") == 5 and placed.count("g") == 4
    assert plan.solver.terms["lns_steps"] >= 1


def _comparable(plan: Plan) -> dict[str, Any]:
    """A plan's JSON without wall-clock times."""
    data = plan.model_dump(mode="json")
    data["solver"]["wall_s"] = 0
    data["solver"]["terms"] = {k: v for k, v in data["solver"]["terms"].items() if "wall" not in k}
    return data


@pytest.mark.parametrize("lns", [False, True])
def test_deterministic_runs_give_the_same_plan(lns: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if lns:
        monkeypatch.setattr(solver, "MONOLITHIC_REPLICAS", 10)
    work = [
        {"id": f"w{i}", "gpu_milli": (700, 450, 350, 550, 250)[i % 5], "queued_since": STAMP}
        for i in range(40)
    ]
    inp = planning(l40s_nodes(6, gpus=4), work, {})
    a, b = (
        _comparable(make_plan(inp, now=NOW, time_limit_s=4, deterministic=True, seed=7)) for _ in range(2)
    )
    # Same plan, unless a busy machine reached the time limit itself before a deterministic solve or a
    # pass after it ended: every such wall-clock cut says so (CUT); none happens before the limit.
    cut = CUT in a["solver"]["terms"] or CUT in b["solver"]["terms"]
    assert a == b or cut


def _dgx_pair() -> tuple[PlanningInput, PlacementProblem]:
    nodes = [
        {"name": f"d{i}", "cpu_milli": 224000, "memory_mib": 2097152, "topology": "dgx-h100"}
        for i in range(2)
    ]
    work = [
        {"id": "train", "gpus": 8, "topology": "nvlink", "running_on": "d0:0,1,2,3,4,5,6,7",
         "started_at": (NOW - timedelta(days=3)).isoformat(), "duration_s": 259200 * 2},
        {"id": "svc", "tier": "latency-sensitive", "gpus": 8, "queued_since": STAMP},
    ]  # fmt: skip
    inp = planning(nodes, work, {"disruption": {"max_moves_per_round": 2}})
    from gpuplan.models.catalog import default_catalog

    return inp, compile_problem(inp, default_catalog(), NOW)


def _result(*placed: Assignment) -> SolveResult:
    return SolveResult(status=PlanStatus.FEASIBLE, solver="test", assignments=placed)


def test_a_move_to_an_identical_empty_node_is_undone() -> None:
    inp, problem = _dgx_pair()
    from gpuplan.models.catalog import default_catalog

    moved = Assignment(
        workload="train", replica=0, node="d1", gpus=tuple(GpuUse(index=g) for g in range(8)),
        cpu_milli=0, memory_mib=0,
    )  # fmt: skip
    waiting = problem.requests[1]
    from gpuplan.models.plan import Unplaced

    result = SolveResult(
        status=PlanStatus.FEASIBLE,
        solver="test",
        assignments=(moved,),
        unplaced=(Unplaced(workload=waiting.workload, replica=0, code="NO_CAPACITY", reason="x"),),
    )
    repaired = without_idle_moves(inp, problem, result, default_catalog())
    (train,) = [a for a in repaired.assignments if a.workload == "train"]
    assert train.node == "d0" and [g.index for g in train.gpus] == list(range(8))
    assert repaired.terms["idle_moves_undone"] == 1


def test_a_move_that_makes_room_is_kept() -> None:
    """``train`` (4 GPUs) moves off d0 so that ``svc`` gets all 8 GPUs there: d1, where ``other`` runs on
    the other 4 GPUs, has no room for ``svc``, so the move bought something and stays."""
    nodes = [
        {"name": f"d{i}", "cpu_milli": 224000, "memory_mib": 2097152, "topology": "dgx-h100"}
        for i in range(2)
    ]
    work = [
        {"id": "train", "gpus": 4, "topology": "nvlink", "running_on": "d0:0,1,2,3",
         "started_at": (NOW - timedelta(days=3)).isoformat()},
        {"id": "other", "gpus": 4, "topology": "nvlink", "running_on": "d1:4,5,6,7",
         "started_at": (NOW - timedelta(days=3)).isoformat()},
        {"id": "svc", "tier": "latency-sensitive", "gpus": 8, "queued_since": STAMP},
    ]  # fmt: skip
    inp = planning(nodes, work, {"disruption": {"max_moves_per_round": 2}})
    from gpuplan.models.catalog import default_catalog

    problem = compile_problem(inp, default_catalog(), NOW)
    other = Assignment(
        workload="other", replica=0, node="d1", gpus=tuple(GpuUse(index=g) for g in range(4, 8))
    )
    moved = Assignment(workload="train", replica=0, node="d1", gpus=tuple(GpuUse(index=g) for g in range(4)))
    svc = Assignment(workload="svc", replica=0, node="d0", gpus=tuple(GpuUse(index=g) for g in range(8)))
    result = _result(moved, other, svc)
    assert without_idle_moves(inp, problem, result, default_catalog()) == result


def test_cpsat_never_returns_a_plan_that_waits_more_than_its_fgd_hint() -> None:
    """A search cut short may end on a plan worse than the FGD plan it started from: that plan is
    returned instead (two one-GPU replicas on one free GPU: the hint places one, the search none)."""
    from gpuplan.solvers.cpsat.solver import _never_worse, fits_model

    inp = planning(l40s_nodes(1), [{"id": f"w{i}", "gpus": 1, "queued_since": STAMP} for i in range(2)], {})
    from gpuplan.models.catalog import default_catalog

    problem = compile_problem(inp, default_catalog(), NOW)
    hint = _result(Assignment(workload="w0", replica=0, node="n000", gpus=(GpuUse(index=0),)))
    nothing = SolveResult(status=PlanStatus.FEASIBLE, solver="cpsat", assignments=(), best_bound=2400.0)
    kept = _never_worse(problem, nothing, hint, lambda: fits_model(problem, None, set(), hint))
    assert [a.workload for a in kept.assignments] == ["w0"]
    assert kept.best_bound == 2400.0 and kept.terms["kept_hint"] == 1.0
    assert _never_worse(problem, hint, nothing, lambda: fits_model(problem, None, set(), nothing)) is hint


def test_cpsat_never_trades_its_plan_for_an_fgd_plan_that_breaks_a_rule() -> None:
    """An FGD plan that waits less but is no solution of the model (both replicas on the one GPU) is
    not returned instead of CP-SAT's own plan."""
    from gpuplan.models.catalog import default_catalog
    from gpuplan.solvers.cpsat.solver import _never_worse, fits_model

    inp = planning(l40s_nodes(1), [{"id": f"w{i}", "gpus": 1, "queued_since": STAMP} for i in range(2)], {})
    problem = compile_problem(inp, default_catalog(), NOW)
    one = _result(Assignment(workload="w0", replica=0, node="n000", gpus=(GpuUse(index=0),)))
    both = _result(
        Assignment(workload="w0", replica=0, node="n000", gpus=(GpuUse(index=0),)),
        Assignment(workload="w1", replica=0, node="n000", gpus=(GpuUse(index=0),)),
    )
    assert fits_model(problem, None, set(), one)
    assert not fits_model(problem, None, set(), both)
    assert _never_worse(problem, one, both, lambda: fits_model(problem, None, set(), both)) is one

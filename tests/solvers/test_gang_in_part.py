"""A gang that runs only in part (fleets drift; a partly started gang): one rule on every path.

README, "A current state that already breaks a rule is legal input": a plan may keep such a gang as it
runs (every running replica where it runs, no other one placed: listed in ``stays_broken``), complete it
(its other replicas all together, inside its running replicas' value of ``gang_domain``) or stop it
(every running replica preempted, where the policy allows); it never places in part a gang that does
not run in part now (``models/rules/gang.py``).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gpuplan.models import Policy
from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import (
    MIGRATE,
    PREEMPT,
    START,
    Action,
    Assignment,
    GpuUse,
    Plan,
    PlanStatus,
    SolverReport,
    Unplaced,
)
from gpuplan.models.rules.gang import kept_in_part, runs_in_part
from gpuplan.models.workload import where
from gpuplan.planner.capacity.demand import joined_in_domain
from gpuplan.planner.executor import Executor, Failure, SimCluster
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.validate import check_plan, validate_plan
from gpuplan.solvers.cpsat.pools import left_out, split
from gpuplan.solvers.problem import gangs_in_part
from gpuplan.solvers.run_options import RunOptions
from tests._brute import NOW, PATHS, forced

CATALOG = default_catalog()
STARTED = (NOW - timedelta(hours=5)).isoformat()
QUEUED = (NOW - timedelta(hours=1)).isoformat()
#: No move and no preemption: a path may only keep, complete or leave the gang.
STILL = {"disruption": {"max_moves_per_round": 0, "max_preemptions_per_round": 0}}


def _inp(
    nodes: list[dict[str, Any]], workloads: list[dict[str, Any]], policy: dict[str, Any]
) -> PlanningInput:
    full = [{"cpu_milli": 64000, "memory_mib": 65536, **n} for n in nodes]
    return PlanningInput.model_validate(
        {"cluster": {"nodes": full}, "workloads": workloads, "policy": policy}
    )


def _node(name: str, gpus: int, rack: str | None = None) -> dict[str, Any]:
    labels = {} if rack is None else {"rack": rack}
    return {"name": name, "labels": labels, "gpus": [{"index": i, "model": "L4-24GB"} for i in range(gpus)]}


def _gang(wid: str, replicas: int, on: list[tuple[str, int]], **extra: Any) -> dict[str, Any]:
    """A one-GPU gang workload of ``replicas``, the first ``len(on)`` running on (node, GPU)."""
    running = [{"node": n, "gpus": [{"index": g}]} for n, g in on]
    return {
        "id": wid, "gpus": 1, "replicas": replicas, "gang": extra.pop("gang", "true"), "preemptible": True,
        **({"started_at": STARTED, "running_on": running} if running else {"queued_since": QUEUED}), **extra,
    }  # fmt: skip


def _plan(inp: PlanningInput, path: str, time_limit_s: float = 3.0) -> Plan:
    with forced(path) as name:
        return make_plan(
            inp, solver=name, now=NOW, time_limit_s=time_limit_s, deterministic=True, num_workers=1
        )


def _placed(plan: Plan) -> dict[tuple[str, int], str]:
    return {(a.workload, a.replica): a.node for a in plan.assignments}


def _gang_rule(plan: Plan, inp: PlanningInput) -> list[str]:
    """The README's rule, checked apart from the validator: every gang placed whole or not at all, or, if
    it runs in part now, its running replicas alone placed, each where it runs."""
    members: defaultdict[str, list[str]] = defaultdict(list)
    for w in inp.workloads:
        if w.gang_id is not None:
            members[w.gang_id].append(w.id)
    by_id = inp.workload_by_id
    out = []
    for gang, ids in members.items():
        total = sum(by_id[i].replicas for i in ids)
        running = sum(len(by_id[i].running_on) for i in ids)
        placed = [a for a in plan.assignments if a.workload in ids]
        staying = sum(by_id[a.workload].stays(a.replica, a.node, a.gpus) for a in placed)
        if 0 < len(placed) < total and not kept_in_part(total, running, len(placed), staying):
            out.append(f"gang {gang}: {len(placed)} of {total} placed, {running} running, {staying} staying")
    return out


# --- the rule ------------------------------------------------------------------------------------------


def test_the_predicates() -> None:
    assert [runs_in_part(r, 3) for r in range(4)] == [False, True, True, False]
    assert kept_in_part(3, 1, 1, 1) and kept_in_part(3, 2, 2, 2)
    assert not kept_in_part(3, 2, 1, 1)  # a running replica stopped: neither kept nor stopped whole
    assert not kept_in_part(3, 1, 2, 1)  # a replica placed beside the running one, not all of them
    assert not kept_in_part(3, 1, 1, 0)  # the running replica moved
    assert not kept_in_part(2, 2, 1, 1)  # a gang that runs whole is never cut


def _plan_of(inp: PlanningInput, placed: dict[tuple[str, int], tuple[str, int]]) -> Plan:
    """A plan placing ``placed`` ((workload, replica) -> (node, GPU)), with the actions it needs."""
    assignments: list[Assignment] = []
    unplaced: list[Unplaced] = []
    actions: list[Action] = []
    for w in inp.workloads:
        for r in range(w.replicas):
            run = w.running_on[r] if r < len(w.running_on) else None
            at = placed.get((w.id, r))
            if at is None:
                unplaced.append(Unplaced(workload=w.id, replica=r, code="WAITING", reason="-"))
                if run is not None:
                    actions.append(Action(round=1, kind=PREEMPT, workload=w.id, replica=r, node=run.node))
                continue
            gpus = (GpuUse(index=at[1]),)
            assignments.append(
                Assignment(workload=w.id, replica=r, node=at[0], gpus=gpus, cpu_milli=0, memory_mib=0)
            )
            if run is None:
                actions.append(Action(round=1, kind=START, workload=w.id, replica=r, to=where(at[0], gpus)))
            elif not w.stays(r, at[0], gpus):
                actions.append(Action(round=1, kind=MIGRATE, workload=w.id, replica=r, node=run.node))
    return Plan(
        status=PlanStatus.FEASIBLE, solver=SolverReport(name="by hand"), assignments=tuple(assignments),
        unplaced=tuple(unplaced), actions=tuple(actions), provenance={"now": NOW.isoformat()},
    )  # fmt: skip


def test_the_validator_keeps_a_gang_in_part_only_as_it_runs() -> None:
    """Of a gang of 3 with g#0 and g#1 running: kept as it runs (stays broken), whole, or stopped are
    valid; one running replica stopped, one moved, or one more placed beside them is not."""
    budget = {"max_moves_per_round": 2, "max_preemptions_per_round": 2, "preempt_only_for_higher_tier": False}
    policy = {"disruption": budget}
    inp = _inp([_node("n", 4)], [_gang("g", 3, [("n", 0), ("n", 1)], preemptible=True)], policy)
    g0, g1, g2 = ("g", 0), ("g", 1), ("g", 2)
    cases: list[tuple[dict[tuple[str, int], tuple[str, int]], list[str], list[str]]] = [
        ({g0: ("n", 0), g1: ("n", 1)}, [], ["gang"]),  # kept as it runs
        ({g0: ("n", 0), g1: ("n", 1), g2: ("n", 2)}, [], []),  # completed
        ({g0: ("n", 3), g1: ("n", 1), g2: ("n", 2)}, [], []),  # completed, one moved
        ({}, [], []),  # stopped
        ({g0: ("n", 0)}, ["gang"], []),  # g1 preempted, g0 kept: in part, not as it runs
        ({g0: ("n", 3), g1: ("n", 1)}, ["gang"], []),  # in part, g0 moved
        ({g2: ("n", 2)}, ["gang"], []),  # both running preempted, the third started
    ]
    for placed, broken, kept in cases:
        report = check_plan(_plan_of(inp, placed), inp, CATALOG)
        assert [v.rule for v in report.violations] == broken, (placed, report.violations)
        assert [k.rule for k in report.kept] == kept, placed
    # A gang that runs whole is never cut: one replica preempted and the other kept is a violation.
    whole = _inp([_node("n", 2)], [_gang("g", 2, [("n", 0), ("n", 1)])], policy)
    assert [v.rule for v in validate_plan(_plan_of(whole, {g0: ("n", 0)}), whole, CATALOG)] == ["gang"]


# --- every path --------------------------------------------------------------------------------------------

CASES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]] = {
    # One GPU, half the gang on it: kept as it runs, the other replica waits (3 x 100 x 8).
    "keep": ([_node("n", 1)], [_gang("g", 2, [("n", 0)])], STILL),
    # Room for the rest: the gang is completed beside its running replica.
    "complete": ([_node("n", 1), _node("m", 2)], [_gang("g", 3, [("n", 0)])], STILL),
    # The running replica holds rack r0, which is full: the rest never goes to r1.
    "domain-keep": (
        [_node("a", 1, "r0"), _node("b", 2, "r1")], [_gang("g", 2, [("a", 0)], gang_domain="rack")], STILL
    ),
    # Room in r0 on another node: the rest joins the running replica there, not r1.
    "domain-join": (
        [_node("a", 1, "r0"), _node("b", 2, "r1"), _node("c", 1, "r0")],
        [_gang("g", 2, [("a", 0)], gang_domain="rack")],
        STILL,
    ),
    # A gang of two workloads (lead runs, two workers wait) that cannot be completed: kept, and the free
    # GPU goes to a single replica.
    "two-workloads": (
        [_node("n", 2)],
        [
            _gang("lead", 1, [("n", 0)], gang="train"),
            _gang("workers", 2, [], gang="train"),
            {"id": "s", "gpus": 1, "queued_since": QUEUED},
        ],
        STILL,
    ),
    # CPU-only replicas and one more waiting: the predicted-start pass started the kept replica again
    # (OverCommitError "already runs"); all run.
    "cpu-only": (
        [{"name": "n", "cpu_milli": 4000, "gpus": [{"index": 0, "model": "L4-24GB"}]}],
        [
            {"id": "g", "cpu_milli": 1000, "replicas": 2, "gang": "true", "started_at": STARTED,
             "running_on": [{"node": "n"}]},
            {"id": "w", "cpu_milli": 1000},
        ],
        {},
    ),
}  # fmt: skip


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_path_plans_a_gang_that_runs_in_part(case: str, path: str) -> None:
    nodes, workloads, policy = CASES[case]
    inp = _inp(nodes, workloads, policy)
    plan = _plan(inp, path)
    assert validate_plan(plan, inp, CATALOG) == []
    assert _gang_rule(plan, inp) == []
    placed = _placed(plan)
    kept = [k.rule for k in plan.stays_broken]
    if case == "keep":
        assert placed == {("g", 0): "n"} and kept == ["gang"] and plan.solver.objective == 2400
    elif case == "complete":
        assert set(placed) == {("g", 0), ("g", 1), ("g", 2)} and placed[("g", 0)] == "n" and kept == []
    elif case == "domain-keep":
        assert placed == {("g", 0): "a"} and kept == ["gang"]
        assert {u.code for u in plan.unplaced} == {"GANG_DOMAIN"}
    elif case == "domain-join":
        assert placed == {("g", 0): "a", ("g", 1): "c"} and kept == []
    elif case == "two-workloads":
        assert placed == {("lead", 0): "n", ("s", 0): "n"} and kept == ["gang"]
    else:
        assert set(placed) == {("g", 0), ("g", 1), ("w", 0)}


def test_the_cli_plans_a_gang_that_runs_in_part(tmp_path: Path) -> None:
    """``gpuplan plan`` exits 0 and names the gang under stays broken (it raised InvalidPlanError)."""
    nodes, workloads, _ = CASES["domain-keep"]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump({"nodes": [{"cpu_milli": 64000, "memory_mib": 65536, **n} for n in nodes]})
    )
    demand = tmp_path / "workloads.yaml"
    demand.write_text(yaml.safe_dump({"workloads": workloads}))
    for solver in ("cpsat", "greedy-fgd"):
        out = tmp_path / f"{solver}.json"
        done = subprocess.run(
            [sys.executable, "-m", "gpuplan", "plan", "--cluster", str(cluster), "--workloads", str(demand),
             "--solver", solver, "--time-limit", "3", "--out", str(out)],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert "stays broken" in done.stdout and "1 gang" in done.stdout
        assert Plan.model_validate_json(out.read_text()).stays_broken[0].rule == "gang"


# --- decompositions, executor, capacity gap ---------------------------------------------------------------


def test_a_split_fleet_holds_a_gang_running_in_several_parts() -> None:
    """POP: a gang whose running replicas fall in two parts is held where it runs (none of them may move
    or be stopped by one part), and its waiting replica, which could join them inside no one value of
    its domain, is in no part: it waits (``left_out``)."""
    nodes = [_node(f"n{i}", 2, rack=f"r{i % 2}") for i in range(4)]
    inp = _inp(nodes, [_gang("g", 3, [("n0", 0), ("n1", 0)], gang_domain="rack")], {
        "disruption": {"max_moves_per_round": 2, "max_preemptions_per_round": 2}
    })  # fmt: skip
    problem = compile_problem(inp, CATALOG, NOW)
    assert gangs_in_part(problem.requests) == {"g"}
    running = {r for r, q in enumerate(problem.requests) if q.running is not None}
    spanned = False
    for seed in range(20):
        parts = split(problem, RunOptions(time_limit_s=1.0, seed=seed), 2, running)
        holding = [p for p in parts if any(q.running is not None for q in p.problem.requests)]
        if len(holding) < 2:
            continue
        spanned = True
        assert all(not p.movable for p in parts)
        assert [(u.workload, u.replica) for u in left_out(problem, parts)] == [("g", 2)]
    assert spanned


def test_the_neighbourhood_search_moves_no_replica_of_a_gang_it_sees_in_part(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LNS: lead runs and worker (its gang's other replica) waits; w fits only where lead runs. A step
    offered w but not worker saw lead's gang as whole and moved lead to the T4 for w: placed in part and
    moved, an invalid plan. Now lead is held while its gang's waiting replica is not in the step."""
    from gpuplan.solvers.cpsat import lns

    monkeypatch.setattr(lns, "WAITING_OFFERED", 1)
    t4 = {"name": "m", "gpus": [{"index": 0, "model": "T4-16GB"}]}
    workloads = [
        _gang("lead", 1, [("n", 0)], gang="g"),
        {"id": "worker", "gpus": 2, "gang": "g", "queued_since": QUEUED},
        {"id": "w", "gpus": 1, "gpu_models": ["L4-24GB"], "tier": "latency-sensitive"},
    ]
    inp = _inp([_node("n", 1), t4], workloads, {"disruption": {"max_moves_per_round": 1}})
    for seed in range(6):
        with forced("cpsat-large") as name:
            plan = make_plan(inp, solver=name, now=NOW, time_limit_s=3, deterministic=True, seed=seed)
        assert validate_plan(plan, inp, CATALOG) == []
        assert _placed(plan) == {("lead", 0): "n"}


def test_the_executor_keeps_a_gang_its_failed_start_left_in_part() -> None:
    """A start of one replica of a gang fails: the next round plans the gang that now runs in part (the
    greedy back-ends raised InvalidPlanError), keeps it while a higher tier takes the free GPU."""
    from tests.planner.executor.test_executor import NOW as EXEC_NOW
    from tests.planner.executor.test_executor import _cluster, _work

    gang = _work("g", gpus=1, replicas=2, gang="true", tier="background")
    urgent = _work("h", gpus=1, tier="latency-sensitive")
    for solver in ("greedy-fgd", "cpsat"):

        def planner(inp: PlanningInput, now: datetime, solver: str = solver) -> Plan:
            return make_plan(inp, solver=solver, now=now, time_limit_s=3)

        sim = SimCluster(_cluster(nodes=1, mig_gpus=0, gpus=2), CATALOG, EXEC_NOW)
        ex = Executor(sim, planner, Policy())
        sim.inject(Failure(START, "g"))
        ex.round([gang])
        assert Counter(k[0] for k in sim.occ.holders) == {"g": 1}
        second = ex.round([gang, urgent])
        assert [k.rule for k in second.plan.stays_broken] == ["gang"]
        assert Counter(k[0] for k in sim.occ.holders) == {"g": 1, "h": 1}


def test_the_capacity_gap_buys_no_node_for_a_gang_bound_to_its_running_domain() -> None:
    """Bought nodes carry a value of their own of every domain label: the rest of a gang that runs in part
    inside r0 cannot join it there, so it is not served by a purchase (it was bought for, and the plan
    on it would break the gang's domain)."""
    nodes, workloads, policy = CASES["domain-keep"]
    inp = _inp(nodes, [*workloads, _gang("free", 2, [])], policy)
    problem = compile_problem(inp, CATALOG, NOW)
    waiting = [q for q in problem.requests if q.running is None]
    assert set(joined_in_domain(problem, waiting)) == {("g", 1)}


# --- drawn ------------------------------------------------------------------------------------------------


@st.composite
def gangs_in_part_inputs(draw: st.DrawFn) -> PlanningInput:
    """One to three nodes of one or two L4 GPUs (racks r0, r1 or none), a gang of two or three replicas
    (one workload, or two sharing the gang) of which one or more but not all run, maybe with a rack
    domain, maybe other work (waiting, or running on a free GPU), and a disruption budget."""
    nodes = [
        _node(f"n{i}", draw(st.integers(1, 2)), draw(st.sampled_from(["r0", "r1", None])))
        for i in range(draw(st.integers(1, 3)))
    ]
    free = [(n["name"], g["index"]) for n in nodes for g in n["gpus"]]
    total = draw(st.integers(2, 3))
    running = draw(st.integers(1, min(total - 1, len(free))))
    on = draw(st.permutations(free))[:running]
    free = [f for f in free if f not in on]
    domain = {"gang_domain": "rack"} if draw(st.booleans()) else {}
    tier = {"tier": draw(st.sampled_from(["background", "standard"]))}
    if total == 3 and draw(st.booleans()):
        workloads = [
            _gang("lead", running, on, gang="g", **domain, **tier),
            _gang("rest", total - running, [], gang="g", **domain, **tier),
        ]
    else:
        workloads = [_gang("g", total, on, **domain, **tier)]
    for i in range(draw(st.integers(0, 2))):
        other: dict[str, Any] = {
            "id": f"o{i}", "gpus": 1, "preemptible": draw(st.booleans()),
            "tier": draw(st.sampled_from(["latency-sensitive", "standard", "background"])),
        }  # fmt: skip
        runs = draw(st.booleans())
        if free and runs:
            node, gpu = free.pop(0)
            other |= {"started_at": STARTED, "running_on": [{"node": node, "gpus": [{"index": gpu}]}]}
        else:
            other["queued_since"] = QUEUED
        workloads.append(other)
    policy = {
        "disruption": {
            "max_moves_per_round": draw(st.integers(0, 2)),
            "max_preemptions_per_round": draw(st.integers(0, 2)),
            "preempt_only_for_higher_tier": draw(st.booleans()),
        }
    }
    return _inp(nodes, workloads, policy)


@pytest.mark.parametrize(
    "path", ["greedy-fgd", "best-fit", "first-fit", "cpsat", "cpsat-large", "cpsat-fleet", "cpsat-pop"]
)
@settings(
    max_examples=25, deadline=None, derandomize=True, database=None,
    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
)  # fmt: skip
@given(inp=gangs_in_part_inputs())
def test_drawn_gangs_in_part_plan_under_the_rule(inp: PlanningInput, path: str) -> None:
    plan = _plan(inp, path, time_limit_s=2.0)
    assert validate_plan(plan, inp, CATALOG) == [], inp.model_dump_json(exclude_defaults=True)
    assert _gang_rule(plan, inp) == [], inp.model_dump_json(exclude_defaults=True)

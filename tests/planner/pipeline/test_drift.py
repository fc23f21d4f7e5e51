"""A current state that already breaks a rule (a team over its quota, work on a node reserved for another
team or on a GPU shared against an isolation rule, a running replica whose GPUs lack the NVLink it asks
for) is legal input: every solver plans it without a traceback, the plan never adds to the breakage, and
the plan lists what stays broken."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import Action, GpuUse, Plan, PlanningInput
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.validate import check_plan
from gpuplan.solvers.cpsat import solver as cpsat
from tests import _factories as factories
from tests._factories import DRIFT_CLIQUES, drifted_inputs

NOW = datetime(2026, 12, 1, tzinfo=UTC)
SOLVERS = ["cpsat", "milp-highs", "greedy-fgd", "best-fit", "first-fit"]
#: CP-SAT forced onto its large-input paths on small inputs: target configurations with the
#: neighbourhood search, and the fleet split into two parts.
FORCED = ["cpsat-fleet", "cpsat-parts"]
#: Tier weights of the default policy (``latency-sensitive`` 10, ``standard`` 3, ``background`` 1).
TIERS = [
    {"name": "latency-sensitive", "weight": 10, "target_wait_s": 300, "may_be_preempted": False},
    {"name": "standard", "weight": 3, "target_wait_s": 3600},
    {"name": "background", "weight": 1, "target_wait_s": 86400},
]


#: Two L4s on n0 and one L40S on n1 (64 cores, 256 GiB each).
L4_AND_L40S = {
    "nodes": [
        {"name": "n0", "cpu_milli": 64000, "memory_mib": 262144, "gpus": [
            {"index": 0, "model": "L4-24GB"}, {"index": 1, "model": "L4-24GB"}]},
        {"name": "n1", "cpu_milli": 64000, "memory_mib": 262144, "gpus": [
            {"index": 0, "model": "L40S-48GB"}]},
    ]
}  # fmt: skip


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``gpuplan ARGS`` in a new process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "gpuplan.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=300,
        check=False,
    )


def _write(tmp: Path, name: str, data: dict[str, Any]) -> str:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _over_quota_case(tmp: Path) -> list[str]:
    """One node with an L4 and an L40S; ``r0`` (team a, preemptible, background) runs on the L4 while
    team a's quota is half a GPU; ``w0`` (team b, latency-sensitive) waits for one GPU."""
    cluster = {
        "nodes": [
            {
                "name": "n0",
                "cpu_milli": 64000,
                "memory_mib": 262144,
                "gpus": [{"index": 0, "model": "L4-24GB"}, {"index": 1, "model": "L40S-48GB"}],
            }
        ]
    }
    r0 = {"id": "r0", "team": "a", "tier": "background", "preemptible": True, "gpus": 1, "running_on": "n0:0"}
    w0 = {
        "id": "w0",
        "team": "b",
        "tier": "latency-sensitive",
        "gpus": 1,
        "queued_since": "2026-11-30T20:00:00Z",
    }
    workloads = {"workloads": [r0, w0]}
    policy = {
        "tiers": TIERS,
        "teams": ["a", "b"],
        "quotas": [{"team": "a", "gpus": 0.5}],
        "disruption": {"max_preemptions_per_round": 2},
    }
    return [
        "--cluster", _write(tmp, "cluster", cluster),
        "--workloads", _write(tmp, "workloads", workloads),
        "--policy", _write(tmp, "policy", policy),
        "--now", NOW.isoformat(),
    ]  # fmt: skip


def _nvlink_case(tmp: Path) -> list[str]:
    """A running 4-GPU ``topology: nvlink`` job on a node that declares no links (as an imported node
    without topology), and a waiting one-GPU job that fits nowhere."""
    cluster = {
        "nodes": [
            {
                "name": "n0",
                "cpu_milli": 64000,
                "memory_mib": 262144,
                "gpus": [{"index": i, "model": "H100-80GB"} for i in range(4)],
            }
        ]
    }
    workloads = {
        "workloads": [
            {"id": "train", "team": "a", "gpus": 4, "topology": "nvlink", "running_on": "n0:0,1,2,3"},
            {"id": "w0", "team": "a", "gpus": 1, "queued_since": "2026-11-30T20:00:00Z"},
        ]
    }
    return [
        "--cluster", _write(tmp, "cluster", cluster),
        "--workloads", _write(tmp, "workloads", workloads),
        "--now", NOW.isoformat(),
    ]  # fmt: skip


@pytest.mark.parametrize("solver", ["cpsat", "milp-highs"])
def test_a_team_over_quota_keeps_its_running_work_and_others_are_placed(tmp_path: Path, solver: str) -> None:
    """Keeping ``r0`` (already over team a's quota) and placing ``w0`` on the L40S waits for nothing:
    objective 0, proved. Preempting ``r0`` instead (what the model used to force) costs a queue term."""
    out = tmp_path / "plan.json"
    done = _cli(
        "plan", *_over_quota_case(tmp_path), "--solver", solver, "--time-limit", "10", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "stays broken" in done.stdout
    plan = Plan.model_validate(json.loads(out.read_text()))
    placed = {a.workload: (a.node, [g.index for g in a.gpus]) for a in plan.assignments}
    assert placed == {"r0": ("n0", [0]), "w0": ("n0", [1])}
    assert plan.status.value == "OPTIMAL"
    assert plan.solver.objective == 0 and plan.solver.best_bound == 0
    assert [(b.rule, b.subject) for b in plan.stays_broken] == [("quota", "team a")]
    assert not [a for a in plan.actions if a.kind in ("preempt", "migrate")]


@pytest.mark.slow
def test_capacity_gap_with_a_running_nvlink_job_on_a_node_without_links(tmp_path: Path) -> None:
    done = _cli("capacity-gap", *_nvlink_case(tmp_path), "--time-limit", "5")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    out = tmp_path / "plan.json"
    done = _cli("plan", *_nvlink_case(tmp_path), "--time-limit", "5", "--out", str(out))
    assert done.returncode == 0, done.stderr
    plan = Plan.model_validate(json.loads(out.read_text()))
    train = next(a for a in plan.assignments if a.workload == "train")
    assert (train.node, [g.index for g in train.gpus]) == ("n0", [0, 1, 2, 3])
    assert [(b.rule, b.subject) for b in plan.stays_broken] == [
        ("topology-nvlink", "workload train replica 0")
    ]


def _running_place(
    inp: PlanningInput,
) -> dict[tuple[str, int], tuple[str, frozenset[tuple[int, int | None]]]]:
    return {
        (w.id, r): (p.node, frozenset((g.index, g.milli) for g in p.gpus))
        for w in inp.workloads
        for r, p in enumerate(w.running_on)
    }


def _broken_by_the_plan(
    data: dict[str, Any], inp: PlanningInput, plan: Plan
) -> dict[str, set[tuple[str, int]]]:
    """Rule -> the replicas that break it in ``plan``, computed without the validator (whole GPUs count
    1, fractions milli/1000; every drawn GPU is an L40S or an H100 NVL, whole or fraction)."""
    workloads = {w.id: w for w in inp.workloads}
    nodes = {n["name"]: n for n in data["cluster"]["nodes"]}
    model = {name: "H100-94GB" if n["labels"]["kind"] == "nvl" else "L40S-48GB" for name, n in nodes.items()}
    out: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for q in data["policy"]["quotas"]:
        users, used = set(), Fraction(0)
        for a in plan.assignments:
            w = workloads[a.workload]
            if w.team != q["team"] or (q.get("borrow") and w.preemptible):
                continue
            if q.get("gpu_model") not in (None, model[a.node]):
                continue
            used += sum(Fraction(g.milli or 1000, 1000) for g in a.gpus)
            users.add((a.workload, a.replica))
        if used > Fraction(str(q["gpus"])):
            out["quota"] |= users
    by_gpu: dict[tuple[str, int], list[tuple[str, int]]] = defaultdict(list)
    for a in plan.assignments:
        for g in a.gpus:
            by_gpu[(a.node, g.index)].append((a.workload, a.replica))
    for rule in data["policy"]["isolation"]:
        if rule["kind"] == "team-exclusive":
            for a in plan.assignments:
                if nodes[a.node]["pool"] == rule["pool"] and workloads[a.workload].team != rule["team"]:
                    out["isolation"].add((a.workload, a.replica))
            continue
        for sharing in by_gpu.values():
            if rule["kind"] == "no-shared-gpu-across-teams":
                groups = {workloads[w].team for w, _ in sharing}
            else:
                groups = {workloads[w].tier for w, _ in sharing} & set(rule["tiers"])
            if len(groups) > 1:
                out["isolation"] |= set(sharing)
    for a in plan.assignments:
        w = workloads[a.workload]
        gpus = {g.index for g in a.gpus}
        need = w.shapes[a.alternative].topology.value
        cliques = DRIFT_CLIQUES[nodes[a.node]["labels"]["kind"]]
        if len(gpus) > 1 and need == "nvlink" and not any(gpus <= c for c in cliques):
            out["topology-nvlink"].add((a.workload, a.replica))
        if len(gpus) > 1 and need == "numa" and len({i // 2 for i in gpus}) > 1:
            out["topology-numa"].add((a.workload, a.replica))
        allowed = w.shapes[a.alternative].gpu_models
        if allowed and model[a.node] not in allowed:
            out["gpu-model"].add((a.workload, a.replica))
    return out


@pytest.mark.slow
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drifted_inputs(), st.sampled_from(SOLVERS + FORCED))
def test_every_solver_plans_a_drifted_state_and_adds_no_breakage(data: dict[str, Any], solver: str) -> None:
    """Every solver returns a plan the validator accepts (``make_plan`` raises otherwise) with a bound
    it did not have to drop (one above its own plan's objective); each rule the plan breaks, by an
    independent count, is broken only by running replicas that stay exactly where they run, and is
    listed in ``stays_broken``; nothing else is listed there."""
    inp = PlanningInput.model_validate(data)
    with pytest.MonkeyPatch.context() as patch:
        if solver == "cpsat-fleet":
            patch.setattr(cpsat, "MONOLITHIC_REPLICAS", 0)
        elif solver == "cpsat-parts":
            patch.setattr(cpsat, "part_count", lambda nodes: min(2, len(nodes)))
        plan = make_plan(
            inp, solver=solver.removesuffix("-fleet").removesuffix("-parts"), now=NOW, time_limit_s=5
        )
    assert "invalid_bound_dropped" not in plan.solver.terms
    assert len(plan.assignments) + len(plan.unplaced) == sum(w.replicas for w in inp.workloads)
    running = _running_place(inp)
    broken = _broken_by_the_plan(data, inp, plan)
    where = {
        (a.workload, a.replica): (a.node, frozenset((g.index, g.milli) for g in a.gpus))
        for a in plan.assignments
    }
    for rule, replicas in broken.items():
        for key in replicas:
            assert key in running and where[key] == running[key], f"{rule} broken by {key}, not kept"
    assert {b.rule for b in plan.stays_broken} == {rule for rule, replicas in broken.items() if replicas}
    assert check_plan(plan, inp).valid


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_team_over_a_model_quota_still_places_work_the_quota_does_not_count(solver: str) -> None:
    """Team c runs one L4 against an L4 quota of half a GPU: it may keep it, and its new one-GPU
    replica goes to the L40S, which the quota does not count, while a second new replica that only an L4
    would take waits."""
    work = [
        {"id": "r", "team": "c", "gpus": 1, "gpu_models": ["L4-24GB"], "running_on": "n0:0"},
        {"id": "any", "team": "c", "gpus": 1, "queued_since": "2026-11-30T20:00:00Z"},
        {
            "id": "l4",
            "team": "c",
            "gpus": 1,
            "gpu_models": ["L4-24GB"],
            "queued_since": "2026-11-30T20:00:00Z",
        },
    ]
    policy = {"teams": ["c"], "quotas": [{"team": "c", "gpus": 0.5, "gpu_model": "L4-24GB"}]}
    inp = PlanningInput.model_validate({"cluster": L4_AND_L40S, "workloads": work, "policy": policy})
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=5)
    placed = {a.workload: (a.node, [g.index for g in a.gpus]) for a in plan.assignments}
    assert placed == {"r": ("n0", [0]), "any": ("n1", [0])}
    assert [u.workload for u in plan.unplaced] == ["l4"]
    assert [b.rule for b in plan.stays_broken] == ["quota"]


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drifted_inputs())
def test_no_bound_or_optimum_beats_a_valid_plan_of_a_drifted_state(data: dict[str, Any]) -> None:
    """Every solver's plan is valid, so none may wait less than a bound, nor less than a plan called
    OPTIMAL: a model stricter than the validator about what running work may keep (an over-quota team's
    GPUs, a place a rule now forbids) would claim an optimum that a greedy plan beats."""
    inp = PlanningInput.model_validate(data)
    plans = {s: make_plan(inp, solver=s, now=NOW, time_limit_s=5) for s in SOLVERS}
    best = min(p.solver.objective or 0.0 for p in plans.values())
    for name, plan in plans.items():
        assert plan.solver.best_bound is not None and plan.solver.best_bound <= best, name
        if plan.status.value == "OPTIMAL":
            assert plan.solver.objective == best, name


@pytest.mark.parametrize("solver", ["cpsat", "milp-highs"])
def test_a_running_replica_across_two_nvlink_pairs_may_stay(solver: str) -> None:
    """An H100 NVL server bridges GPUs 0-1 and 2-3; a two-GPU NVLink replica runs on 0 and 2. Staying
    is allowed (and listed as staying broken), so with a quarter-GPU newcomer placed on GPU 1 nothing
    waits: objective 0, proved (the model used to offer the bridged pairs only, and preempted it)."""
    cluster = {
        "nodes": [
            {"name": "n1", "cpu_milli": 64000, "memory_mib": 262144, "topology": "pcie-4x-h100-nvl-bridged"}
        ]
    }
    work = [
        {"id": "r1", "gpus": 2, "topology": "nvlink", "preemptible": True, "running_on": "n1:0,2"},
        {"id": "w0", "tier": "latency-sensitive", "gpu_milli": 250, "queued_since": "2026-11-29T00:00:00Z"},
    ]
    policy = {"disruption": {"max_preemptions_per_round": 1}}
    inp = PlanningInput.model_validate({"cluster": cluster, "workloads": work, "policy": policy})
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=5)
    placed = {a.workload: sorted(g.index for g in a.gpus) for a in plan.assignments}
    assert placed["r1"] == [0, 2] and "w0" in placed
    assert plan.status.value == "OPTIMAL" and plan.solver.objective == 0 and plan.solver.best_bound == 0
    assert [b.rule for b in plan.stays_broken] == ["topology-nvlink"]


def _two_l40s(policy: dict[str, Any], *work: dict[str, Any]) -> PlanningInput:
    node = {"name": "n0", "cpu_milli": 64000, "memory_mib": 262144, "pool": "p1"}
    gpus = [{"index": i, "model": "L40S-48GB"} for i in range(2)]
    # Peers may preempt each other here: the cases are about kept violations, not the tier rule.
    budget = {
        "disruption": {
            "max_moves_per_round": 2,
            "max_preemptions_per_round": 2,
            "preempt_only_for_higher_tier": False,
        }
    }
    return PlanningInput.model_validate(
        {
            "cluster": {"nodes": [{**node, "gpus": gpus}]},
            "workloads": list(work),
            "policy": {**policy, **budget},
        }
    )


def _rules(inp: PlanningInput, *placed: tuple[str, tuple[GpuUse, ...]]) -> tuple[list[str], list[str]]:
    """(violated rules, kept rules) of the plan placing replica 0 of each workload as given on n0; the
    running replicas it does not place are preempted (with their action)."""
    where = dict(placed)
    waiting = [factories.wait(w.id, 0) for w in inp.workloads if w.id not in where]
    p = factories.plan([factories.assign(w, 0, "n0", uses) for w, uses in placed], waiting)
    running = [w.id for w in inp.workloads if w.running_on]
    moved = [
        Action(kind="migrate", workload=w, replica=0)
        for w in running
        if w in where and where[w] != _now(inp, w)
    ]
    stopped = [Action(kind="preempt", workload=w, replica=0) for w in running if w not in where]
    starts = factories.start_actions(inp.workloads, p.assignments)
    report = check_plan(p.model_copy(update={"actions": (*moved, *stopped, *starts)}), inp)
    return [v.rule for v in report.violations], [k.rule for k in report.kept]


def _now(inp: PlanningInput, wid: str) -> tuple[GpuUse, ...]:
    """The GPU entries replica 0 of ``wid`` runs on now."""
    place = inp.workload_by_id[wid].running_on[0]
    return tuple(GpuUse(index=g.index, milli=g.milli) for g in place.gpus)


def test_the_validator_keeps_only_what_running_work_that_stays_breaks() -> None:
    """Hand-made plans: a team over its quota (1 GPU against 0.5) may keep its running GPU, not add or
    move one; a GPU that two teams share now may keep them, not take a third replica; a node reserved
    for team a may keep team b's running replica where it is, not on another GPU."""
    quota = {"teams": ["a", "b"], "quotas": [{"team": "a", "gpus": 0.5}]}
    r = {"id": "r", "team": "a", "gpus": 1, "preemptible": True, "running_on": "n0:0"}
    new = {"id": "new", "team": "a", "gpus": 1}
    inp = _two_l40s(quota, r, new)
    assert _rules(inp, ("r", factories.whole(0))) == ([], ["quota"])
    assert _rules(inp, ("r", factories.whole(0)), ("new", factories.whole(1))) == (["quota"], [])
    assert _rules(inp, ("r", factories.whole(1))) == (["quota"], [])  # moved: not kept
    assert _rules(inp, ("new", factories.whole(1))) == (["quota"], [])  # r preempted, new over the quota
    shared = {"teams": ["a", "b"], "isolation": [{"kind": "no-shared-gpu-across-teams"}]}
    fa = {"id": "fa", "team": "a", "gpu_milli": 250, "running_on": "n0:0=250"}
    fb = {"id": "fb", "team": "b", "gpu_milli": 250, "preemptible": True, "running_on": "n0:0=250"}
    fc = {"id": "fc", "team": "a", "gpu_milli": 250}
    inp = _two_l40s(shared, fa, fb, fc)
    assert _rules(inp, ("fa", factories.frac(0, 250)), ("fb", factories.frac(0, 250))) == ([], ["isolation"])
    assert _rules(
        inp, ("fa", factories.frac(0, 250)), ("fb", factories.frac(0, 250)), ("fc", factories.frac(0, 250))
    ) == (
        ["isolation"],
        [],
    )
    assert _rules(inp, ("fa", factories.frac(0, 250)), ("fc", factories.frac(0, 250))) == (
        [],
        [],
    )  # fb preempted: repaired
    reserved = {"teams": ["a", "b"], "isolation": [{"kind": "team-exclusive", "team": "a", "pool": "p1"}]}
    b = {"id": "b", "team": "b", "gpus": 1, "running_on": "n0:0"}
    inp = _two_l40s(reserved, b)
    assert _rules(inp, ("b", factories.whole(0))) == ([], ["isolation"])
    assert _rules(inp, ("b", factories.whole(1))) == (["isolation"], [])


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_replica_on_a_gpu_model_it_no_longer_allows_may_stay(solver: str) -> None:
    """``r`` runs on an L4 while its ``gpu_models`` now name only the L40S: it may keep the L4 (kept,
    listed), a new replica with the same need takes the L40S, and one without takes the other L4."""
    work = [
        {"id": "r", "gpus": 1, "gpu_models": ["L40S-48GB"], "running_on": "n0:0"},
        {"id": "new", "gpus": 1, "gpu_models": ["L40S-48GB"], "queued_since": "2026-11-30T20:00:00Z"},
        {"id": "any", "gpus": 1, "queued_since": "2026-11-30T21:00:00Z"},
    ]
    inp = PlanningInput.model_validate({"cluster": L4_AND_L40S, "workloads": work})
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=5)
    placed = {a.workload: (a.node, [g.index for g in a.gpus]) for a in plan.assignments}
    assert placed == {"r": ("n0", [0]), "new": ("n1", [0]), "any": ("n0", [1])}
    assert [(b.rule, b.subject) for b in plan.stays_broken] == [("gpu-model", "workload r replica 0")]


def _racks(work: list[dict[str, Any]]) -> PlanningInput:
    """Two free GPUs on a node without a ``rack`` label (n1), two on rack b (n2), one on rack a (n0)."""
    node = {"cpu_milli": 64000, "memory_mib": 262144}
    gpus = [{"index": i, "model": "L40S-48GB"} for i in range(2)]
    cluster = {
        "nodes": [
            {"name": "n0", "labels": {"rack": "a"}, "gpus": gpus, **node},
            {"name": "n1", "gpus": gpus, **node},
            {"name": "n2", "labels": {"rack": "b"}, "gpus": gpus, **node},
        ]
    }
    return PlanningInput.model_validate({"cluster": cluster, "workloads": work})


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_gang_with_a_domain_never_goes_to_a_node_without_the_label(solver: str) -> None:
    """A node without the domain label is in no value of it: the gang takes rack b, never n1 (the
    greedy solvers and the validator took "no label" for a value of its own)."""
    inp = _racks(
        [
            {"id": "busy", "gpus": 1, "running_on": "n0:0"},
            {"id": "g", "gpus": 1, "replicas": 2, "gang": True, "gang_domain": "rack"},
            {"id": "h", "gpus": 1, "replicas": 2, "gang": True, "gang_domain": "rack"},
        ]
    )
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=5)
    gangs = [(a.workload, a.node) for a in plan.assignments if a.workload in ("g", "h")]
    assert len(gangs) == 2 and {n for _, n in gangs} == {"n2"}  # one gang on rack b, the other waits
    assert {u.workload for u in plan.unplaced} in ({"g"}, {"h"})


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_running_gang_outside_its_domain_may_stay(solver: str) -> None:
    """A gang runs across rack a and a node without the label (the label came later): it may stay as it
    is (kept, listed); nothing else is placed beside it on those terms."""
    inp = _racks([{"id": "g", "gpus": 1, "replicas": 2, "gang": True, "gang_domain": "rack",
                   "running_on": "n0:0;n1:0"}])  # fmt: skip
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=5)
    assert sorted((a.node, a.gpus[0].index) for a in plan.assignments) == [("n0", 0), ("n1", 0)]
    assert [(b.rule, b.subject) for b in plan.stays_broken] == [("gang", "gang g")]


@pytest.mark.parametrize("solver", SOLVERS)
def test_nothing_new_joins_a_gpu_whose_running_work_breaks_an_isolation_rule(solver: str) -> None:
    """Background and latency-sensitive fractions share n0's GPU 0 against ``tiers-no-share``: a standard
    fraction, of neither tier, goes to the free GPU, not beside them (the greedy kernel let it join, as
    its tier has no tag; found by hypothesis)."""
    gpus = [{"index": i, "model": "L40S-48GB"} for i in range(2)]
    cluster = {"nodes": [{"name": "n0", "cpu_milli": 64000, "memory_mib": 262144, "gpus": gpus}]}
    work = [
        {"id": "bg", "tier": "background", "gpu_milli": 250, "running_on": "n0:0=250"},
        {"id": "ls", "tier": "latency-sensitive", "gpu_milli": 250, "running_on": "n0:0=250"},
        {"id": "std", "tier": "standard", "gpu_milli": 500, "queued_since": "2026-11-29T05:00:00Z"},
    ]
    policy = {"isolation": [{"kind": "tiers-no-share", "tiers": ["latency-sensitive", "background"]}]}
    inp = PlanningInput.model_validate({"cluster": cluster, "workloads": work, "policy": policy})
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=5)
    placed = {a.workload: (a.node, a.gpus[0].index) for a in plan.assignments}
    assert placed == {"bg": ("n0", 0), "ls": ("n0", 0), "std": ("n0", 1)}
    assert [b.rule for b in plan.stays_broken] == ["isolation"]

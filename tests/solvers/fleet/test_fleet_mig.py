"""The fleet engine and MIG re-partitions: when the policy lets a plan destroy idle MIG instances and
create others, pricing counts the idle instances as free to replace (so the configuration LP's bound
covers every layout), the plan re-partitions idle GPUs for the waiting instances, and its report counts
the destroyed instances."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import MigInstance, PlanningInput, Policy, Workload, default_catalog
from gpuplan.models.cluster import mig_layout_problems
from gpuplan.models.plan import CREATE, DESTROY
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.validate import validate_plan
from gpuplan.solvers.cpsat import solver
from gpuplan.solvers.fleet.classes import node_classes, request_classes
from gpuplan.solvers.fleet.engine import _placer
from gpuplan.solvers.fleet.pricing import price
from tests._factories import node, planning_input

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
TWO_HOURS_AGO = "2026-11-30T10:00:00Z"
A100 = "A100-SXM4-80GB"
#: Queue penalty of one waiting 1g.10gb replica: standard weight 3 x 14 hundredths x (8 + 2 hours).
ONE_G = 3 * 14 * 10


def idle_full_gpus(nodes: int, replicas: int, repartition_cost: int = 3) -> PlanningInput:
    """``nodes`` nodes of 8 A100s, each GPU holding one idle 7g.80gb; ``replicas`` 1g.10gb wait."""
    gpus = [
        {"index": i, "model": A100, "mig": {"instances": [{"profile": "7g.80gb", "start": 0}]}}
        for i in range(8)
    ]
    return planning_input(
        [node(f"n{i:02d}", gpus=gpus) for i in range(nodes)],
        [
            Workload.model_validate(
                {
                    "id": "nb",
                    "mig_profile": "1g.10gb",
                    "gpu_models": [A100],
                    "replicas": replicas,
                    "queued_since": TWO_HOURS_AGO,
                }
            )
        ],
        Policy.model_validate({"mig": {"allow_repartition": True, "repartition_cost": repartition_cost}}),
    )


def test_the_fleet_engine_repartitions_idle_gpus_for_waiting_instances(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(solver, "MONOLITHIC_REPLICAS", 0)
    inp = idle_full_gpus(2, 200)
    p = make_plan(inp, now=NOW, time_limit_s=20)
    assert "fleet_rounds" in p.solver.terms
    assert validate_plan(p, inp) == []
    # The hand plan: every one of the 16 GPUs re-partitioned to 7 x 1g.10gb places 112 (a GPU has 7
    # compute slices, so no plan places more); 88 wait.
    hand_objective = (200 - 112) * ONE_G
    assert len(p.assignments) == 112
    assert p.solver.best_bound is not None and p.solver.best_bound <= hand_objective
    assert p.solver.objective == hand_objective
    kinds = Counter(a.kind for a in p.actions)
    assert (kinds[DESTROY], kinds[CREATE]) == (16, 112)
    assert p.solver.terms["destroyed_mig_instances"] == 16 and p.solver.terms["disruption"] == 16 * 3


def test_gpus_the_plan_does_not_use_keep_their_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(solver, "MONOLITHIC_REPLICAS", 0)
    inp = idle_full_gpus(1, 10)
    p = make_plan(inp, now=NOW, time_limit_s=10)
    assert validate_plan(p, inp) == []
    assert len(p.assignments) == 10 and p.solver.objective == 0
    used = {(a.node, g.index) for a in p.assignments for g in a.gpus}
    assert len(used) >= 2  # 10 instances of 1 compute slice need two GPUs of 7
    seven = (MigInstance(profile="7g.80gb", start=0),)
    for lay in p.mig_layouts:
        if (lay.node, lay.gpu) not in used:
            assert lay.instances == seven
    destroyed = [(a.node, a.gpu) for a in p.actions if a.kind == DESTROY]
    assert sorted(destroyed) == sorted(used)
    assert p.solver.terms["destroyed_mig_instances"] == len(used)


# Pricing against brute force: the pattern value pricing proves is never below the best any valid layout
# of the GPU (one keeping the busy instances, and the idle ones too unless re-partitioning is allowed)
# holds for the waiting classes.

PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb")
START_LAYOUTS = (
    (("7g.80gb", 0),),
    (("3g.40gb", 0), ("3g.40gb", 4)),
    (("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)),
    (("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4)),
)


@cache
def _layouts() -> tuple[frozenset[tuple[str, int]], ...]:
    """Every valid A100 layout (the catalog's placements, checked by the models' layout rule)."""
    spec = default_catalog().model(A100)
    slots = [(p.name, pl.start) for p in spec.profiles for pl in p.placements]
    found: list[frozenset[tuple[str, int]]] = []

    def grow(chosen: list[tuple[str, int]], i: int) -> None:
        found.append(frozenset(chosen))
        for j in range(i, len(slots)):
            trial = sorted([*chosen, slots[j]], key=lambda x: x[1])
            if not mig_layout_problems(spec, tuple(MigInstance(profile=p, start=s) for p, s in trial)):
                grow([*chosen, slots[j]], j + 1)

    grow([], 0)
    return tuple(found)


def _best_by_brute_force(
    busy: frozenset[tuple[str, int]], kept: frozenset[tuple[str, int]], wants: list[tuple[str, int, int]]
) -> int:
    """The most value any valid layout containing ``kept`` serves: its instances other than ``busy``
    go to the waiting classes ``(profile, replicas, value)``, the most valuable first."""
    best = 0
    for layout in _layouts():
        if not kept <= layout:
            continue
        free = Counter(p for p, _ in layout - busy)
        value = 0
        for prof, replicas, v in sorted(wants, key=lambda w: -w[2]):
            take = min(replicas, free[prof])
            free[prof] -= take
            value += take * v
        best = max(best, value)
    return best


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_pricing_never_undervalues_a_mig_gpu(data: st.DataObject) -> None:
    start = data.draw(st.sampled_from(START_LAYOUTS))
    busy = frozenset(data.draw(st.lists(st.sampled_from(start), unique=True, max_size=len(start) - 1)))
    repartition = data.draw(st.booleans())
    profiles = data.draw(st.lists(st.sampled_from(PROFILES), min_size=1, max_size=3, unique=True))
    wants = [(prof, data.draw(st.integers(1, 7)), data.draw(st.integers(1, 50))) for prof in profiles]
    gpus = [{"index": 0, "model": A100, "mig": {"instances": [{"profile": p, "start": s} for p, s in start]}}]
    work = [
        Workload.model_validate({"id": f"r{i}", "mig_profile": p, "running_on": f"n:0/{p}@{s}"})
        for i, (p, s) in enumerate(sorted(busy))
    ]
    work += [
        Workload.model_validate({"id": f"w{i}", "mig_profile": p, "replicas": n})
        for i, (p, n, _) in enumerate(wants)
    ]
    policy = Policy.model_validate({"mig": {"allow_repartition": repartition}})
    problem = compile_problem(planning_input([node("n", gpus=gpus)], work, policy), default_catalog(), NOW)
    waiting = [r for r, q in enumerate(problem.requests) if q.running is None]
    classes = request_classes(problem, waiting)
    (nc,) = node_classes(_placer(problem), repartition=repartition)
    value = {f"w{i}": float(v) for i, (_, _, v) in enumerate(wants)}
    reduced = {c.index: value[problem.requests[c.members[0]].workload] for c in classes}
    priced = price(nc, classes, reduced, time_limit_s=10)
    kept = busy if repartition else frozenset(start)
    assert priced.upper >= _best_by_brute_force(busy, kept, wants) - 1e-6

"""Action ordering and rounds: no intermediate state over-commits, every round keeps the budget."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import (
    Assignment,
    Cluster,
    DisruptionBudget,
    MigLayout,
    MigPolicy,
    Node,
    PlanningInput,
    Policy,
    Unplaced,
    Workload,
)
from gpuplan.models import default_catalog as catalog_of
from gpuplan.models.plan import GpuUse
from gpuplan.models.policy import Tier
from gpuplan.models.workload import Placement, where
from gpuplan.planner.pipeline.actions import (
    CREATE,
    DESTROY,
    MIGRATE,
    PREEMPT,
    START,
    apply_round,
    ordered_actions,
    plan_actions,
    schedule_rounds,
)
from gpuplan.planner.pipeline.compile import compile_node, compile_problem
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.occupancy import Occupancy, OverCommitError
from gpuplan.planner.validation.validate import validate_plan
from gpuplan.solvers.greedy import FirstFitScorer
from gpuplan.solvers.placement import Placer
from tests._factories import layout, node_data, plan

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
SHAPES: list[dict[str, Any]] = [
    {"gpus": 1},
    {"gpus": 2},
    {"gpu_milli": 300},
    {"gpu_milli": 600},
    {"mig_profile": "1g.10gb"},
    {"mig_profile": "3g.40gb"},
    {"mig_profile": "2g.20gb"},
]


def _place(
    cluster: Cluster, workloads: list[Workload], seed: int
) -> tuple[list[Assignment], list[MigLayout]]:
    """Place ``workloads`` greedily from an empty cluster with a random node order; only used MIG
    instances are kept in the layouts."""
    catalog = catalog_of()
    inp = PlanningInput(cluster=cluster, workloads=tuple(workloads))
    problem = compile_problem(inp, catalog, NOW)
    nodes = tuple(compile_node(n, catalog) for n in cluster.nodes)
    rank = list(range(len(nodes)))
    random.Random(seed).shuffle(rank)
    placer = Placer(nodes, catalog, FirstFitScorer(), rank=rank)
    placed = [a for r in problem.requests if (a := placer.place(r)) is not None]
    used = {(a.node, g.index, g.mig_profile, g.mig_start) for a in placed for g in a.gpus}
    layouts = [
        lay.model_copy(
            update={
                "instances": tuple(
                    i for i in lay.instances if (lay.node, lay.gpu, i.profile, i.start) in used
                )
            }
        )
        for lay in placer.mig_layouts()
    ]
    return placed, layouts


def _scenario(
    shapes: list[int], keep: list[bool], seeds: tuple[int, int], budget: DisruptionBudget
) -> tuple[PlanningInput, list[Assignment], list[MigLayout]]:
    """A running state and a target reached by placing a subset plus new work in another node order."""
    # Four H100s a node; GPUs 0 and 1 in MIG mode (with the instances the running work uses), 2 and 3 whole.
    empty = Cluster.model_validate(
        {"nodes": [node_data(n, "H100-80GB", 4, mig={0: [], 1: []}) for n in ("n0", "n1")]}
    )
    work = [
        Workload.model_validate(
            {"id": f"w{i}", "team": f"t{i % 2}", "preemptible": True, "cpu_milli": 1000, **SHAPES[k]}
        )
        for i, k in enumerate(shapes)
    ]
    half = len(work) // 2
    running, layouts = _place(empty, work[:half], seeds[0])
    per_node: dict[str, dict[int, list[tuple[str, int]]]] = {n: {0: [], 1: []} for n in ("n0", "n1")}
    for lay in layouts:
        per_node[lay.node][lay.gpu] = [(i.profile, i.start) for i in lay.instances]
    cluster = Cluster.model_validate(
        {"nodes": [node_data(n, "H100-80GB", 4, mig=per_node[n]) for n in ("n0", "n1")]}
    )
    at = {a.workload: where(a.node, a.gpus) for a in running}
    state = [w.model_copy(update={"running_on": ()}) for w in work]
    state = [
        Workload.model_validate({**w.model_dump(exclude={"running_on"}), "running_on": at[w.id]})
        if w.id in at
        else w
        for w in state
    ]
    wanted = [w for i, w in enumerate(work) if (i < len(keep) and keep[i]) or w.id not in at]
    target, target_layouts = _place(empty, wanted, seeds[1])
    policy = Policy(disruption=budget)
    return PlanningInput(cluster=cluster, workloads=tuple(state), policy=policy), target, target_layouts


@dataclass(frozen=True)
class Drawn:
    """A drawn scenario: the :data:`SHAPES` of the work, which of the running half the target keeps, the
    seeds of the running and the target node orders, and the disruption budget's limits."""

    shapes: list[int]
    keep: list[bool]
    seeds: tuple[int, int]
    moves: int
    preempts: int
    per_team: int | None

    def budget(self, **more: Any) -> DisruptionBudget:
        """The disruption budget of the drawn limits (and ``more`` fields)."""
        return DisruptionBudget(
            max_moves_per_round=self.moves,
            max_preemptions_per_round=self.preempts,
            max_moves_per_team=self.per_team,
            **more,
        )


DRAWN = st.builds(
    Drawn,
    shapes=st.lists(st.integers(0, len(SHAPES) - 1), min_size=2, max_size=14),
    keep=st.lists(st.booleans(), min_size=14, max_size=14),
    seeds=st.tuples(st.integers(0, 99), st.integers(0, 99)),
    moves=st.integers(1, 8),
    preempts=st.integers(1, 3),
    per_team=st.one_of(st.none(), st.integers(1, 3)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=DRAWN)
def test_rounds_never_over_commit_and_keep_the_budget(d: Drawn) -> None:
    inp, target, layouts = _scenario(d.shapes, d.keep, d.seeds, d.budget())
    catalog = catalog_of()
    targets = {(a.workload, a.replica): a for a in target}
    actions = ordered_actions(inp, tuple(target), tuple(layouts))
    sched = schedule_rounds(
        Occupancy.of(inp.cluster, inp.workloads, catalog), actions, targets, inp.workload_by_id, inp.policy
    )
    assert len(sched.actions) + len(sched.deferred) == len(actions)
    occ = Occupancy.of(inp.cluster, inp.workloads, catalog)
    teams = {w.id: w.team for w in inp.workloads}
    for rnd in range(1, sched.rounds + 1):
        step = [a for a in sched.actions if a.round == rnd]
        kinds = Counter(a.kind for a in step)
        assert kinds[MIGRATE] <= d.moves and kinds[PREEMPT] <= d.preempts
        if d.per_team is not None:
            assert max(
                Counter(teams[a.workload or ""] for a in step if a.kind == MIGRATE).values(), default=0
            ) <= (d.per_team)
        apply_round(occ, step, targets)  # raises OverCommitError on any over-committing step
    if not sched.deferred:
        assert occ.assignments() == targets
        for lay in layouts:
            assert occ.gpus[(lay.node, lay.gpu)].mig == {(i.profile, i.start) for i in lay.instances}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=DRAWN)
def test_the_validator_accepts_every_complete_schedule(d: Drawn) -> None:
    # The independent validator re-derives the budget rules: every schedule must pass it, drains counted
    # as moves. A schedule that takes all the actions reaches the target; one that defers some reaches
    # the state its rounds leave, with only the actions it took, and that state is checked instead. The
    # target preempts whatever it drops (not only for a higher tier) and is made for as many rounds as
    # the schedule takes.
    inp, target, layouts = _scenario(d.shapes, d.keep, d.seeds, d.budget(preempt_only_for_higher_tier=False))
    policy = inp.policy.model_copy(update={"mig": MigPolicy(allow_repartition=True)})
    inp = inp.model_copy(update={"policy": policy})
    catalog = catalog_of()
    targets = {(a.workload, a.replica): a for a in target}
    sched = schedule_rounds(
        Occupancy.of(inp.cluster, inp.workloads, catalog),
        ordered_actions(inp, tuple(target), tuple(layouts)),
        targets,
        inp.workload_by_id,
        inp.policy,
    )
    if sched.deferred:
        assert all(why for _, why in sched.deferred)
        occ = Occupancy.of(inp.cluster, inp.workloads, catalog)
        for rnd in range(1, sched.rounds + 1):
            apply_round(occ, [a for a in sched.actions if a.round == rnd], targets)
        target = list(occ.assignments().values())
        layouts = [
            layout(node, gpu, *sorted(state.mig, key=lambda i: i[1]))
            for (node, gpu), state in sorted(occ.gpus.items())
            if state.mig is not None
        ]
    placed = {a.workload for a in target}
    kept = plan(
        target,
        [
            Unplaced(workload=w.id, replica=0, code="PREEMPTED", reason="Not kept.")
            for w in inp.workloads
            if w.id not in placed
        ],
        layouts,
        actions=sched.actions,
        provenance={"replan_rounds": max(1, sched.rounds)},
    )
    assert validate_plan(kept, inp, catalog) == []


def test_unlimited_budget_reaches_any_target_in_one_round() -> None:
    budget = DisruptionBudget(max_moves_per_round=100, max_preemptions_per_round=100)
    inp, target, layouts = _scenario([4, 5, 0, 2, 6, 4, 1, 3], [False, True, True, False], (1, 7), budget)
    actions = plan_actions(inp, tuple(target), tuple(layouts), catalog_of())
    assert {a.round for a in actions} == {1}
    assert {a.kind for a in actions} >= {START}


def _one_node_state(layout: list[tuple[str, int]], running: dict[str, str], **policy: Any) -> PlanningInput:
    work = [
        Workload.model_validate(
            {"id": wid, "mig_profile": prof, "running_on": at, "preemptible": True, "tier": tier, "team": wid}
        )
        for wid, (prof, at, tier) in {
            k: (v.split("|")[0], v.split("|")[1], v.split("|")[2]) for k, v in running.items()
        }.items()
    ]
    cluster = Cluster(nodes=(Node.model_validate(node_data("n0", "H100-80GB", 4, mig={0: layout, 1: []})),))
    return PlanningInput(cluster=cluster, workloads=tuple(work), policy=Policy(**policy))


def test_repartition_keeps_the_other_instances_running() -> None:
    """Re-partitioning an instance leaves the GPU's other instances running (the validator and the
    solvers ask for no drain): b's instance is freed by its preemption, a keeps running untouched."""
    inp = _one_node_state(
        [("3g.40gb", 0), ("3g.40gb", 4)],
        {"a": "3g.40gb|n0:0/3g.40gb@0|standard", "b": "3g.40gb|n0:0/3g.40gb@4|standard"},
        disruption=DisruptionBudget(max_moves_per_round=0, max_preemptions_per_round=1),
    )
    # Target: a stays, b is preempted and its instance becomes two 2g.20gb (b's slices 4-7).
    layout = MigLayout.model_validate(
        {
            "node": "n0",
            "gpu": 0,
            "instances": [{"profile": "3g.40gb", "start": 0}, {"profile": "2g.20gb", "start": 4}],
        }
    )
    keep_a = Assignment(workload="a", replica=0, node="n0", gpus=_uses("n0:0/3g.40gb@0"))
    actions = plan_actions(inp, (keep_a,), (layout,), catalog_of())
    kinds = [(a.round, a.kind, a.workload, a.detail) for a in actions]
    assert (1, PREEMPT, "b", None) in kinds
    assert not [a for a in actions if a.kind == MIGRATE]  # no move: none is in the budget, none needed
    assert {(a.round, a.kind, a.detail) for a in actions if a.kind in (DESTROY, CREATE)} == {
        (1, DESTROY, "3g.40gb@4"),
        (1, CREATE, "2g.20gb@4"),
    }
    # The state model refuses to destroy an instance a replica runs on, never one beside it.
    occ = Occupancy.of(inp.cluster, inp.workloads, catalog_of())
    with pytest.raises(OverCommitError, match=r"instance 3g\.40gb@4 is not drained"):
        occ.destroy("n0", 0, ("3g.40gb", 4))
    occ.stop(("b", 0))
    occ.destroy("n0", 0, ("3g.40gb", 4))
    with pytest.raises(OverCommitError, match=r"instance 3g\.40gb@0 is not drained"):
        occ.destroy("n0", 0, ("3g.40gb", 0))


def _uses(text: str) -> tuple[GpuUse, ...]:
    """Plan GPU entries from ``running_on`` text."""
    return tuple(GpuUse(**g.model_dump()) for g in Placement.parse(text).gpus)


def test_latency_sensitive_work_is_never_preempted_unless_the_policy_says_so() -> None:
    state = {"ls": "1g.10gb|n0:0/1g.10gb@0|latency-sensitive", "bg": "1g.10gb|n0:0/1g.10gb@1|background"}
    layout = MigLayout.model_validate(
        {
            "node": "n0",
            "gpu": 0,
            "instances": [{"profile": "1g.10gb", "start": 0}, {"profile": "1g.10gb", "start": 1}],
        }
    )
    budget = DisruptionBudget(max_preemptions_per_round=5)
    for allowed in (False, True):
        inp = _one_node_state(
            [("1g.10gb", 0), ("1g.10gb", 1)],
            state,
            disruption=budget.model_copy(update={"preempt_latency_sensitive": allowed}),
        )
        actions = plan_actions(inp, (), (layout,), catalog_of())
        preempted = {a.workload for a in actions if a.kind == PREEMPT}
        assert preempted == ({"ls", "bg"} if allowed else {"bg"})


def test_moves_wait_for_the_minimum_runtime() -> None:
    inp = _one_node_state(
        [("1g.10gb", 0), ("1g.10gb", 1)],
        {"a": "1g.10gb|n0:0/1g.10gb@0|standard"},
        disruption=DisruptionBudget(max_moves_per_round=1, min_runtime_s=600),
        tiers=(Tier(name="standard", weight=3),),
    )
    young = inp.model_copy(
        update={"workloads": (inp.workloads[0].model_copy(update={"started_at": NOW.replace(minute=5)}),)}
    )
    target = Assignment(workload="a", replica=0, node="n0", gpus=_uses("n0:0/1g.10gb@1"))
    layout = MigLayout.model_validate(
        {
            "node": "n0",
            "gpu": 0,
            "instances": [{"profile": "1g.10gb", "start": 0}, {"profile": "1g.10gb", "start": 1}],
        }
    )
    catalog = catalog_of()
    # Started 5 minutes ago, minimum 10 minutes: rounds 5 minutes apart move it in round 2.
    occ = Occupancy.of(young.cluster, young.workloads, catalog)
    actions = ordered_actions(young, (target,), (layout,))
    runtime = {("a", 0): 300.0}
    later = schedule_rounds(
        occ,
        actions,
        {("a", 0): target},
        young.workload_by_id,
        young.policy,
        runtime_s=runtime,
        interval_s=300,
    )
    assert [(a.round, a.kind) for a in later.actions] == [(2, MIGRATE)]
    never = schedule_rounds(
        occ, actions, {("a", 0): target}, young.workload_by_id, young.policy, runtime_s=runtime
    )
    assert never.actions == () and len(never.deferred) == 1
    assert plan_actions(young, (target,), (layout,), catalog, now=NOW.replace(minute=20))[0].kind == MIGRATE


@pytest.mark.parametrize("solver", ["cpsat", "milp-highs", "greedy-fgd", "best-fit", "first-fit"])
def test_a_replica_on_its_second_whole_gpu_alternative_runs_as_that_alternative(solver: str) -> None:
    # On one GPU, "w" can only be its 8-core alternative: with the 50 cores of "x" the node holds it;
    # read as its first (2 GPUs, 40 cores) the state would over-commit the node and the plan mismatch.
    inp = PlanningInput(
        cluster=Cluster(nodes=(Node.model_validate(node_data("n0", "H100-80GB", 4)),)),
        workloads=(
            Workload.model_validate(
                {
                    "id": "w",
                    "alternatives": [{"gpus": 2, "cpu_milli": 40000}, {"gpus": 1, "cpu_milli": 8000}],
                    "running_on": "n0:2",
                }
            ),
            Workload.model_validate({"id": "x", "gpus": 1, "cpu_milli": 50000, "running_on": "n0:3"}),
            Workload.model_validate({"id": "y", "gpus": 1, "cpu_milli": 1000}),
        ),
    )
    p = make_plan(inp, solver=solver, now=NOW, time_limit_s=5)
    assert validate_plan(p, inp) == []
    (w,) = [a for a in p.assignments if a.workload == "w"]
    assert (w.node, [g.index for g in w.gpus], w.alternative, w.cpu_milli) == ("n0", [2], 1, 8000)
    assert [(a.kind, a.workload) for a in p.actions] == [(START, "y")]

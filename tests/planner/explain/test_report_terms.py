"""A plan's report describes the plan returned: every term recomputed here, independently, from the
plan's unplaced replicas, actions and the cluster it leaves (MIG layouts and sharing modes), as the
README's "What a plan's report means" defines them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import NodeSharing, Plan, PlanningInput, Policy, TimeSliced, Workload, default_catalog
from gpuplan.models.plan import DESTROY, MIGRATE, PREEMPT, SET_MIG_MODE, SET_SHARING
from gpuplan.planner import planning
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.layouts import cluster_with_mig_modes, cluster_with_sharing
from gpuplan.planner.validation.validate import validate_plan
from gpuplan.solvers.evaluate import fragmented_milli
from tests._factories import node, planning_input

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
TWO_HOURS_AGO = "2026-11-30T10:00:00Z"
#: The default tier weights (README: latency-sensitive 10, standard 3, background 1).
WEIGHT = {"latency-sensitive": 10, "standard": 3, "background": 1}
#: GPU demand of a MIG profile in hundredths of a GPU: its compute slices of 7.
MIG_HUNDREDTHS = {"1g.10gb": 100 // 7, "3g.40gb": 300 // 7}
EXACT = ["cpsat", "milp-highs"]
A100 = "A100-SXM4-80GB"


def _hundredths(w: Workload) -> int:
    shape = w.shapes[0]
    if shape.mig_profile is not None:
        return MIG_HUNDREDTHS[shape.mig_profile]
    if shape.gpu_milli:
        return shape.gpu_milli // 10
    return 100 * shape.gpus


def queue_by_hand(inp: PlanningInput, p: Plan) -> int:
    """Tier weight x hundredths of a GPU x (8 + whole hours waited) of every replica left waiting."""
    total = 0
    for u in p.unplaced:
        w = inp.workload_by_id[u.workload]
        assert w.queued_since is not None
        hours = int((NOW - w.queued_since).total_seconds()) // 3600
        total += WEIGHT[w.tier] * _hundredths(w) * (8 + min(hours, 168))
    return total


def disruption_by_hand(inp: PlanningInput, p: Plan) -> int:
    """Migrations (drains included) x 10, preemptions x 30, destroyed MIG instances x the policy's
    re-partition cost, MIG mode changes x the re-partition cost, sharing changes x the policy's change
    cost: one action each."""
    cost = {
        MIGRATE: 10,
        PREEMPT: 30,
        DESTROY: inp.policy.mig.repartition_cost,
        SET_SHARING: inp.policy.sharing.change_cost,
        SET_MIG_MODE: inp.policy.mig.repartition_cost,
    }
    return sum(cost.get(a.kind, 0) for a in p.actions)


def repartitioned_beside_a_running_instance() -> PlanningInput:
    """One A100 with two 3g.40gb instances, ``r`` running on the first; three 1g.10gb wait. Placing them
    re-partitions the idle instance into 1g.10gb ones while ``r`` keeps running on its own instance."""
    a100 = [
        {
            "index": 0,
            "model": "A100-SXM4-80GB",
            "mig": {"instances": [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]},
        }
    ]
    return planning_input(
        [node("a", gpus=a100)],
        [
            Workload.model_validate(
                {
                    "id": "r",
                    "mig_profile": "3g.40gb",
                    "running_on": "a:0/3g.40gb@0",
                    "queued_since": TWO_HOURS_AGO,
                }
            ),
            Workload.model_validate(
                {"id": "nb", "mig_profile": "1g.10gb", "replicas": 3, "queued_since": TWO_HOURS_AGO}
            ),
        ],
        Policy.model_validate(
            {
                "mig": {"allow_repartition": True, "repartition_cost": 7},
                "disruption": {"max_moves_per_round": 1},
            }
        ),
    )


@pytest.mark.parametrize("solver", EXACT)
def test_a_repartition_counts_its_destroyed_instance_and_drains_nothing_beside_it(solver: str) -> None:
    inp = repartitioned_beside_a_running_instance()
    p = planning.make_plan(inp, solver=solver, now=NOW, time_limit_s=10)
    assert validate_plan(p, inp) == []
    assert not p.unplaced
    assert [(a.kind, a.workload, a.detail) for a in p.actions if a.kind in (MIGRATE, DESTROY)] == [
        (DESTROY, None, "3g.40gb@4"),
    ]
    terms = p.solver.terms
    assert terms["disruption"] == disruption_by_hand(inp, p) == 7
    assert (terms["drains"], terms["moves"], terms["destroyed_mig_instances"]) == (0, 0, 1)
    assert terms["queue"] == queue_by_hand(inp, p) == p.solver.objective == 0


def four_exclusive_nodes() -> PlanningInput:
    """Four drained exclusive L40S nodes and eight waiting half-GPU fractions: all start once the four
    nodes are time-sliced, each change costing 7."""
    one = [{"index": 0, "model": "L40S-48GB"}]
    return planning_input(
        [node(f"n{i}", gpus=one, sharing="exclusive") for i in range(4)],
        [
            Workload.model_validate(
                {"id": "nb", "gpu_milli": 500, "replicas": 8, "queued_since": TWO_HOURS_AGO}
            )
        ],
        Policy.model_validate({"sharing": {"change_cost": 7}}),
    )


@pytest.mark.parametrize("solver", [*EXACT, "greedy-fgd"])
def test_sharing_changes_count_their_cost(solver: str) -> None:
    inp = four_exclusive_nodes()
    p = planning.make_plan(inp, solver=solver, now=NOW, time_limit_s=10)
    assert validate_plan(p, inp) == []
    assert len(p.sharing) == 4 and not p.unplaced
    assert p.solver.terms["disruption"] == disruption_by_hand(inp, p) == 4 * 7
    assert p.solver.terms["sharing_changes"] == 4
    # Every GPU holds two halves: nothing is free, so nothing is fragmented.
    assert p.solver.terms["fragmentation"] == 0


def test_a_change_the_plan_drops_is_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    # ``b`` is given time-slicing before the solve (as a pre-pass might), but the two whole-GPU jobs go
    # to ``a``: the plan drops the change, so ``b`` stays exclusive with one whole GPU free, which the
    # demand (whole GPUs) can use: no fragmentation, no sharing change.
    inp = planning_input(
        [
            node("a", gpus=[{"index": i, "model": "L40S-48GB"} for i in range(2)], sharing="exclusive"),
            node("b", gpus=[{"index": 0, "model": "L40S-48GB"}], sharing="exclusive"),
        ],
        [Workload.model_validate({"id": "job", "gpus": 1, "replicas": 2, "queued_since": TWO_HOURS_AGO})],
    )
    change = NodeSharing(node="b", sharing=TimeSliced.model_validate({"time-slicing": {"replicas": 4}}))
    monkeypatch.setattr(planning, "choose_sharing", lambda *_args: (change,))
    p = planning.make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10)
    assert validate_plan(p, inp) == []
    assert p.sharing == () and {a.node for a in p.assignments} == {"a"}
    assert p.solver.terms["fragmentation"] == 0 and p.metrics["fragmented_gpus"] == 0
    assert p.solver.terms["disruption"] == disruption_by_hand(inp, p) == 0


def test_a_preemption_counts_thirty_and_the_preempted_replica_waits() -> None:
    inp = planning_input(
        [node("a", gpus=[{"index": 0, "model": "L40S-48GB"}])],
        [
            Workload.model_validate(
                {
                    "id": "r",
                    "tier": "background",
                    "gpus": 1,
                    "preemptible": True,
                    "running_on": "a:0",
                    "queued_since": TWO_HOURS_AGO,
                }
            ),
            Workload.model_validate(
                {"id": "w", "tier": "latency-sensitive", "gpus": 1, "queued_since": TWO_HOURS_AGO}
            ),
        ],
        Policy.model_validate({"disruption": {"max_preemptions_per_round": 1}}),
    )
    for solver in EXACT:
        p = planning.make_plan(inp, solver=solver, now=NOW, time_limit_s=10)
        assert validate_plan(p, inp) == []
        assert [u.workload for u in p.unplaced] == ["r"]
        assert p.solver.terms["disruption"] == disruption_by_hand(inp, p) == 30
        # background weight 1 x 100 hundredths x (8 + 2 hours)
        assert p.solver.objective == queue_by_hand(inp, p) == 1000


MODES: list[Any] = [None, "exclusive", {"time-slicing": {"replicas": 2}}]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_term_is_the_returned_plans(data: st.DataObject) -> None:
    """Random small fleets (L40S nodes in any mode, an A100 with MIG), whole GPUs, fractions and MIG
    instances waiting, a running job: the report's queue and disruption are those recomputed by hand
    from the plan, its fragmentation the measure of the cluster the plan leaves."""
    nodes = []
    for i in range(data.draw(st.integers(1, 3))):
        mode = data.draw(st.sampled_from(MODES))
        gpus = [{"index": g, "model": "L40S-48GB"} for g in range(data.draw(st.integers(1, 2)))]
        nodes.append(node(f"l{i}", gpus=gpus, **({"sharing": mode} if mode is not None else {})))
    layout = data.draw(st.sampled_from([[("7g.80gb", 0)], [("3g.40gb", 0), ("3g.40gb", 4)], []]))
    a100 = [
        {"index": 0, "model": A100, "mig": {"instances": [{"profile": p, "start": s} for p, s in layout]}}
    ]
    nodes.append(node("m", gpus=a100))
    shapes: dict[str, dict[str, Any]] = {
        "job": {"gpus": 1},
        "half": {"gpu_milli": 500},
        "nb": {"mig_profile": "1g.10gb"},
    }
    work = []
    for name, shape in shapes.items():
        replicas = data.draw(st.integers(0, 4))
        if replicas:
            work.append(
                Workload.model_validate(
                    {"id": name, "replicas": replicas, "queued_since": TWO_HOURS_AGO, **shape}
                )
            )
    if len(layout) > 1 or (layout and data.draw(st.booleans())):
        prof, start = layout[0]
        work.append(
            Workload.model_validate(
                {
                    "id": "run",
                    "mig_profile": prof,
                    "running_on": f"m:0/{prof}@{start}",
                    "queued_since": TWO_HOURS_AGO,
                }
            )
        )
    repartition = data.draw(st.sampled_from([True, True, False]))
    policy = Policy.model_validate(
        {
            "mig": {"allow_repartition": repartition, "repartition_cost": 7},
            "sharing": {"change_cost": 5},
            "disruption": {"max_moves_per_round": 1},
        }
    )
    inp = planning_input(nodes, work, policy)
    solver = data.draw(st.sampled_from(["greedy-fgd", "cpsat"]))
    p = planning.make_plan(inp, solver=solver, now=NOW, time_limit_s=5, deterministic=True)
    assert validate_plan(p, inp) == []
    terms = p.solver.terms
    assert terms["queue"] == queue_by_hand(inp, p) == p.solver.objective
    assert terms["disruption"] == disruption_by_hand(inp, p)
    assert terms["sharing_changes"] == len(p.sharing)
    assert terms["mig_mode_changes"] == len(p.mig_modes)
    moded = cluster_with_mig_modes(inp.cluster, p.mig_modes)
    left = inp.model_copy(update={"cluster": cluster_with_sharing(moded, p.sharing)})
    fragmented, _ = fragmented_milli(
        compile_problem(left, default_catalog(), NOW), p.assignments, p.mig_layouts
    )
    assert terms["fragmentation"] == round(fragmented)
    assert p.metrics["fragmented_gpus"] == round(fragmented / 1000, 4)

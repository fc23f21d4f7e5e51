"""The executor on the simulated cluster: failures and node loss repaired, the budget held, MIG timing."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import yaml

from gpuplan.models import Cluster, DisruptionBudget, Plan, PlanningInput, Policy, Workload, default_catalog
from gpuplan.models.plan import Assignment
from gpuplan.models.policy import Quota
from gpuplan.planner.executor import Executor, Failure, SimCluster, state_input, unfit
from gpuplan.planner.io.exporters import kubernetes, migparted
from gpuplan.planner.pipeline.actions import CREATE, MIGRATE, START
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.validate import validate_plan
from gpuplan.solvers.greedy import BestFit, FirstFit

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def _cluster(nodes: int = 2, mig_gpus: int = 1, gpus: int = 4) -> Cluster:
    """``nodes`` H100 nodes; the first ``mig_gpus`` GPUs of each are in MIG mode with no instances."""
    return Cluster.model_validate(
        {
            "nodes": [
                {
                    "name": f"n{k}",
                    "cpu_milli": 64000,
                    "memory_mib": 262144,
                    "gpus": [
                        {
                            "index": i,
                            "model": "H100-80GB",
                            **({"mig": {"instances": []}} if i < mig_gpus else {}),
                        }
                        for i in range(gpus)
                    ],
                }
                for k in range(nodes)
            ]
        }
    )


def _work(wid: str, **shape: Any) -> Workload:
    return Workload.model_validate({"id": wid, "cpu_milli": 1000, "preemptible": True, **shape})


def _greedy(inp: PlanningInput, now: datetime) -> Plan:
    return make_plan(inp, solver="greedy-fgd", now=now)


def _running(sim: SimCluster) -> set[tuple[str, int]]:
    return set(sim.occ.holders)


def test_an_injected_failure_and_a_lost_node_are_repaired_next_round() -> None:
    cluster = _cluster()
    demand = [_work(f"w{i}", gpus=1) for i in range(5)] + [
        _work(f"m{i}", mig_profile="1g.10gb") for i in range(2)
    ]
    keys = {(w.id, 0) for w in demand}
    sim = SimCluster(cluster, default_catalog(), NOW)
    ex = Executor(sim, _greedy, Policy())
    sim.inject(Failure(START, "w1"))
    first = ex.round(demand)
    assert [(o.action.workload, o.reason) for o in first.failed] == [("w1", "injected failure")]
    assert _running(sim) == keys - {("w1", 0)}
    second = ex.round(demand)
    assert not second.failed and _running(sim) == keys
    # A node disappears: what ran there is waiting again, nothing twice, and the next round re-places it.
    lost = set(sim.lose_node("n1"))
    assert lost and _running(sim) == keys - lost
    third = ex.round(demand)
    waiting = {(u.workload, u.replica) for u in third.plan.unplaced}
    assert _running(sim) | waiting == keys and not _running(sim) & waiting
    assert {k for k in lost if k not in waiting} <= _running(sim)
    assert all(h.node == "n0" for h in sim.occ.holders.values())


def test_a_new_mig_instance_is_used_once_the_repartition_time_has_passed() -> None:
    sim = SimCluster(_cluster(nodes=1, gpus=1), default_catalog(), NOW, repartition_s=60)
    ex = Executor(sim, _greedy, Policy())
    demand = [_work("m", mig_profile="3g.40gb")]
    first = ex.round(demand)
    assert [o.action.kind for o in first.outcomes if o.ok] == [CREATE]
    assert [o.reason for o in first.failed] == ["MIG instance on n0:0 is still being created"]
    assert ex.round(demand).failed  # still being created 0 s later
    sim.advance(60)
    third = ex.round(demand)
    assert not third.failed and _running(sim) == {("m", 0)}
    assert sim.occ.holders[("m", 0)].gpus[0].mig_profile == "3g.40gb"


def test_run_carries_the_demand_withdraws_finished_work_and_drops_what_fits_nowhere() -> None:
    """Rounds of arrivals on one 2-GPU node: what waits is planned again next round; under the FGD
    protocol a pod that fits nowhere after the round leaves the demand; withdrawn work is not replanned."""
    sim = SimCluster(_cluster(nodes=1, mig_gpus=0, gpus=2), default_catalog(), NOW)
    ex = Executor(sim, _greedy, Policy())
    batches = [[_work("a", gpus=1)], [_work("b", gpus=2), _work("c", gpu_milli=500)], [_work("d", gpus=1)]]
    seen: list[int] = []
    reports = ex.run(batches, before=seen.append, drop_unfit=True)
    first = next(reports)
    assert seen == [1] and _running(sim) == {("a", 0)} and first.dropped == ()
    second = next(reports)
    # b (2 GPUs) cannot fit beside a and is dropped; c takes half of the second GPU.
    assert second.dropped == ("b",) and list(ex.demand) == ["a", "c"]
    assert _running(sim) == {("a", 0), ("c", 0)}
    ex.withdraw(["a"])
    third = next(reports)
    # a left the demand, so it is stopped as a stray and d takes its GPU.
    assert seen == [1, 2, 3] and list(ex.demand) == ["c", "d"] and third.dropped == ()
    assert _running(sim) == {("c", 0), ("d", 0)}


def test_unfit_counts_idle_mig_instances_as_free_when_the_policy_may_repartition() -> None:
    cluster = Cluster.model_validate(
        {
            "nodes": [
                {
                    "name": "n0",
                    "cpu_milli": 64000,
                    "memory_mib": 262144,
                    "gpus": [
                        {
                            "index": 0,
                            "model": "H100-80GB",
                            "mig": {"instances": [{"profile": "7g.80gb", "start": 0}]},
                        }
                    ],
                }
            ]
        }
    )
    sim = SimCluster(cluster, default_catalog(), NOW)
    demand = [_work("m", mig_profile="3g.40gb")]
    keep = Policy()
    assert unfit(sim.observe(), demand, keep, default_catalog()) == ["m"]
    repartition = Policy.model_validate({"mig": {"allow_repartition": True}})
    assert unfit(sim.observe(), demand, repartition, default_catalog()) == []


def test_the_budget_holds_in_every_round_on_the_way_to_a_target() -> None:
    """Four half-GPU jobs spread over two nodes block a two-GPU job; the target consolidates them, and
    the executor gets there one migration per round."""
    cluster = _cluster(nodes=2, mig_gpus=0, gpus=2)
    spread = [_work(f"f{i}", gpu_milli=500) for i in range(4)]
    big = _work("big", gpus=2)
    sim = SimCluster(cluster, default_catalog(), NOW)
    for i, w in enumerate(spread):
        sim.place(
            Assignment.model_validate(
                {
                    "workload": w.id,
                    "replica": 0,
                    "node": f"n{i // 2}",
                    "gpus": [{"index": i % 2, "milli": 500}],
                    "cpu_milli": 1000,
                }
            )
        )
    demand = [*spread, big]
    generous = Policy(disruption=DisruptionBudget(max_moves_per_round=4))
    inp = state_input(sim.observe(), demand, generous).inp
    target = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=5)
    assert not validate_plan(target, inp)
    assert {(a.workload, a.replica) for a in target.assignments} == {(w.id, 0) for w in demand}
    strict = Policy(disruption=DisruptionBudget(max_moves_per_round=1))
    ex = Executor(sim, lambda _inp, _now: target, strict)
    reports = [ex.round(demand) for _ in range(4)]
    assert all(r.moves <= 1 and not r.failed for r in reports)
    assert sum(r.moves for r in reports) == sum(a.kind == MIGRATE for a in target.actions) >= 2
    assert sim.occ.assignments() == {(a.workload, a.replica): a for a in target.assignments}


def _whole(wid: str, node: str, gpus: list[int]) -> Assignment:
    """``wid`` replica 0 on whole GPUs ``gpus`` of ``node``."""
    return Assignment.model_validate(
        {"workload": wid, "replica": 0, "node": node, "gpus": [{"index": i} for i in gpus], "cpu_milli": 1000}
    )


def _two_nodes() -> Cluster:
    """n0 with 4 whole GPUs and n1 with 1."""
    nodes = [("n0", 4), ("n1", 1)]
    return Cluster.model_validate(
        {
            "nodes": [
                {
                    "name": name,
                    "cpu_milli": 64000,
                    "memory_mib": 262144,
                    "gpus": [{"index": i, "model": "H100-80GB"} for i in range(count)],
                }
                for name, count in nodes
            ]
        }
    )


def test_arrivals_are_admitted_at_once_but_never_into_capacity_reserved_for_a_waiting_replica() -> None:
    """n0 runs b on GPUs 0-1 (long) and a on GPU 2 (ends in 10 min); GPU 3 and n1's only GPU are free.
    w needs two GPUs of one node, so the round's plan reserves n0's GPUs 2-3 for it at a's end. Between
    rounds x arrives and goes to n1 at once (the only free GPU nobody holds); y arrives next and waits,
    although n0's GPU 3 is free: it is w's."""
    sim = SimCluster(_two_nodes(), default_catalog(), NOW)
    fixed = {"preemptible": False, "duration_s": 600}
    a, b = _work("a", gpus=1, **fixed), _work("b", gpus=2, **{**fixed, "duration_s": 36000})
    sim.place(_whole("a", "n0", [2]))
    sim.place(_whole("b", "n0", [0, 1]))
    w = _work("w", gpus=2, topology="same-node", preemptible=False)
    x, y = _work("x", gpus=1), _work("y", gpus=1)
    seen: dict[int, dict[tuple[str, int], Assignment]] = {}

    def before(k: int) -> None:
        seen[k] = sim.occ.assignments()

    def arriving(_w: Workload) -> None:
        sim.advance(60)

    ex = Executor(sim, _greedy, Policy(), admission=FirstFit())
    reports = ex.run([[a, b, w], [x, y]], before=before, arriving=arriving)
    first = next(reports)
    (waits,) = first.plan.unplaced
    assert waits.workload == "w" and waits.reserved_node == "n0"
    assert sorted(g.index for g in waits.reserved_gpus) == [2, 3]
    second = next(reports)
    before_round = seen[2]
    assert set(before_round) == {("a", 0), ("b", 0), ("x", 0)}
    assert before_round[("x", 0)].node == "n1" and second.admitted == (("x", 0),)
    assert all(g.index != 3 for a in before_round.values() if a.node == "n0" for g in a.gpus)


def test_a_higher_tier_arrival_may_take_what_the_plan_reserved_for_a_lower_tier() -> None:
    """The same state with w in the background tier: a background arrival still may not take n0's GPU 3
    (w is ahead of it in the queue), a latency-sensitive one may (it is ahead of w)."""
    sim = SimCluster(_two_nodes(), default_catalog(), NOW)
    fixed = {"preemptible": False, "duration_s": 600}
    a, b = _work("a", gpus=1, **fixed), _work("b", gpus=2, **{**fixed, "duration_s": 36000})
    sim.place(_whole("a", "n0", [2]))
    sim.place(_whole("b", "n0", [0, 1]))
    w = _work("w", gpus=2, topology="same-node", tier="background")
    ex = Executor(sim, _greedy, Policy(), admission=FirstFit())
    assert len(list(ex.run([[a, b, w]]))) == 1
    assert [o.ok for o in ex.admit([_work("x", gpus=1, tier="background")])] == [True]
    assert ex.admit([_work("y", gpus=1, tier="background")]) == []
    (z,) = ex.admit([_work("z", gpus=1, tier="latency-sensitive")])
    assert z.ok and z.action.to == "n0:3"
    assert _running(sim) == {("a", 0), ("b", 0), ("x", 0), ("z", 0)}


def _busy_n0(sim: SimCluster) -> list[Workload]:
    """n0's four GPUs busy: old background work on GPUs 0-1 (bg-old, run 2 h) and 2 (bg-mid, run 1 h),
    young background work on GPU 3 (bg-young, just started); a standard job on n1's only GPU."""
    bg = {"tier": "background", "preemptible": True}
    sim.place(_whole("bg-old", "n0", [0, 1]))
    sim.advance(3600)
    sim.place(_whole("bg-mid", "n0", [2]))
    sim.place(_whole("std", "n1", [0]))
    sim.advance(3600)
    sim.place(_whole("bg-young", "n0", [3]))
    return [
        _work("bg-old", gpus=2, **bg),
        _work("bg-mid", gpus=1, **bg),
        _work("bg-young", gpus=1, **bg),
        _work("std", gpus=1, preemptible=False),
    ]


#: Up to 4 preemptions a round, of work that ran at least 10 minutes.
EVICTING = Policy(disruption=DisruptionBudget(max_preemptions_per_round=4, min_runtime_s=600))


def test_a_latency_sensitive_arrival_preempts_the_fewest_background_replicas_that_make_room() -> None:
    """With ``evict``, a 1-GPU latency-sensitive arrival that finds no free GPU stops one background
    replica (bg-mid, the one that ran least among those old enough; bg-young ran under the minimum) and
    starts on its GPU; a 2-GPU one then stops bg-old alone (bg-mid's GPU is taken, bg-young's is not
    enough). A standard arrival never preempts, nor does any arrival without ``evict``."""
    sim = SimCluster(_two_nodes(), default_catalog(), NOW)
    ex = Executor(sim, _greedy, EVICTING, admission=FirstFit(), evict=True)
    assert [r.evicted for r in ex.run([_busy_n0(sim)])] == [()]
    assert ex.admit([_work("std-new", gpus=1, preemptible=False)]) == []
    first = ex.admit([_work("ls-1", gpus=1, tier="latency-sensitive", preemptible=False)])
    assert [(o.action.kind, o.action.workload, o.ok) for o in first] == [
        ("preempt", "bg-mid", True),
        ("start", "ls-1", True),
    ]
    assert first[1].action.to == "n0:2"
    second = ex.admit([_work("ls-2", gpus=2, tier="latency-sensitive", preemptible=False)])
    assert [(o.action.kind, o.action.workload) for o in second if o.ok] == [
        ("preempt", "bg-old"),
        ("start", "ls-2"),
    ]
    assert _running(sim) == {("ls-1", 0), ("ls-2", 0), ("bg-young", 0), ("std", 0)}

    baseline = SimCluster(_two_nodes(), default_catalog(), NOW)
    fgd = Executor(baseline, _greedy, EVICTING, admission=FirstFit())
    list(fgd.run([_busy_n0(baseline)]))
    assert fgd.admit([_work("ls-1", gpus=1, tier="latency-sensitive", preemptible=False)]) == []


def test_preemptions_between_rounds_stay_within_the_round_budget() -> None:
    """A budget of one preemption a round: the first latency-sensitive arrival stops a background
    replica, the second waits for the round."""
    sim = SimCluster(_two_nodes(), default_catalog(), NOW)
    policy = Policy(disruption=DisruptionBudget(max_preemptions_per_round=1, min_runtime_s=600))
    ex = Executor(sim, _greedy, policy, admission=FirstFit(), evict=True)
    list(ex.run([_busy_n0(sim)]))
    ls = {"gpus": 1, "tier": "latency-sensitive", "preemptible": False}
    assert [o.ok for o in ex.admit([_work("ls-1", **ls)])] == [True, True]
    assert ex.admit([_work("ls-2", **ls)]) == []


def test_latency_sensitive_work_a_round_leaves_waiting_preempts_once_the_minimum_runtime_allows() -> None:
    """A latency-sensitive job arrives while only young background work could make room: it waits, and
    the round's greedy plan (which never preempts) leaves it waiting. Once the background job has run
    its minimum, the next round's plan still leaves it waiting, and the executor stops the background
    job and starts it right after that round; the report names the preemption and its time."""
    sim = SimCluster(_two_nodes(), default_catalog(), NOW)
    sim.place(_whole("std", "n0", [0, 1, 2]))
    sim.place(_whole("std-1", "n1", [0]))
    sim.place(_whole("bg", "n0", [3]))
    demand = [
        _work("std", gpus=3, preemptible=False),
        _work("std-1", gpus=1, preemptible=False),
        _work("bg", gpus=1, tier="background"),
    ]
    ls = _work("ls", gpus=1, tier="latency-sensitive", preemptible=False)
    ex = Executor(sim, _greedy, EVICTING, admission=FirstFit(), evict=True)

    def before(k: int) -> None:
        sim.advance(0 if k == 1 else 700)

    reports = ex.run([[*demand, ls], []], before=before)
    first = next(reports)
    assert [u.workload for u in first.plan.unplaced] == ["ls"] and first.evicted == ()
    second = next(reports)
    assert [u.workload for u in second.plan.unplaced] == ["ls"]
    assert second.evicted == ((("bg", 0), sim.now),)
    assert _running(sim) == {("std", 0), ("std-1", 0), ("ls", 0)}


def test_without_admission_arrivals_wait_for_the_round() -> None:
    """The same arrivals without an admission back-end: nothing starts between rounds."""
    sim = SimCluster(_two_nodes(), default_catalog(), NOW)
    seen: dict[int, set[tuple[str, int]]] = {}
    ex = Executor(sim, _greedy, Policy())
    reports = ex.run([[], [_work("x", gpus=1)]], before=lambda k: seen.update({k: _running(sim)}))
    assert [r.admitted for r in reports] == [(), ()]
    assert seen[2] == set() and _running(sim) == {("x", 0)}


def test_admission_keeps_quotas_and_the_next_round_replans_what_waits() -> None:
    """Team ml may hold one GPU and already runs one; an ml arrival waits although 4 GPUs are free,
    while an arrival of another team is admitted. The next round leaves the ml job waiting too."""
    sim = SimCluster(_two_nodes(), default_catalog(), NOW)
    sim.place(_whole("ml-run", "n0", [0]))
    policy = Policy(quotas=(Quota(team="ml", gpus=1),))
    running = _work("ml-run", gpus=1, team="ml", preemptible=False)
    ex = Executor(sim, _greedy, policy, admission=BestFit())
    assert [r.admitted for r in ex.run([[running]])] == [()]
    outcomes = ex.admit([_work("ml-new", gpus=1, team="ml"), _work("web", gpus=1, team="web")])
    assert [(o.action.workload, o.ok) for o in outcomes] == [("web", True)]
    assert _running(sim) == {("ml-run", 0), ("web", 0)}
    report = ex.round(list(ex.demand.values()))
    assert [u.workload for u in report.plan.unplaced] == ["ml-new"]
    assert _running(sim) == {("ml-run", 0), ("web", 0)}


def _mixed_plan() -> tuple[PlanningInput, Plan]:
    cluster = _cluster(nodes=2, mig_gpus=2, gpus=4)
    demand = [
        _work("train", gpus=2, memory_mib=65536),
        _work("nb", gpu_milli=400),
        _work("svc", mig_profile="1g.10gb", replicas=3),
        _work("q", mig_profile="3g.40gb"),
    ]
    inp = PlanningInput(cluster=cluster, workloads=tuple(demand))
    plan = make_plan(inp, solver="greedy-fgd", now=NOW)
    assert not validate_plan(plan, inp) and not plan.unplaced
    return inp, plan


def test_kubernetes_export_parses_and_carries_the_planned_resources() -> None:
    inp, plan = _mixed_plan()
    images = kubernetes.Images(default="registry.example/run:1")
    docs = [d for step in kubernetes.steps(plan, inp, images, namespace="ml") for d in step.objects]
    tag = kubernetes.plan_digest(plan)
    pods = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Pod"}
    assert len(pods) == len(plan.assignments)
    for a in plan.assignments:
        p = pods[f"{a.workload}-{a.replica}-{tag}"]
        assert p["spec"]["nodeSelector"] == {"kubernetes.io/hostname": a.node}
        assert p["metadata"]["namespace"] == "ml"
        limits = p["spec"]["containers"][0]["resources"]["limits"]
        gpu_keys = {k: v for k, v in limits.items() if k.startswith("nvidia.com/")}
        expected = {
            "train": {"nvidia.com/gpu": "2"},
            "nb": {"nvidia.com/gpu.shared": "1"},
            "svc": {"nvidia.com/mig-1g.10gb": "1"},
            "q": {"nvidia.com/mig-3g.40gb": "1"},
        }[a.workload]
        assert gpu_keys == expected
        assert limits["cpu"] == "1000m"
    # Without the GPU Operator's mig-parted ConfigMap to merge into, no node is relabelled for MIG (the
    # export never replaces the operator's configs: tests/planner/io/test_kubernetes_ownership.py).
    assert not [d for d in docs if d["kind"] == "Node" and "nvidia.com/mig.config" in d["metadata"]["labels"]]
    assert all(not kubernetes.check_object(d) for d in docs)


def test_mig_parted_export_matches_the_target_layouts_and_its_spec() -> None:
    inp, plan = _mixed_plan()
    doc = yaml.safe_load(migparted.render(inp.cluster, plan.mig_layouts))
    assert doc["version"] == "v1" and not migparted.check_config(doc)
    names = {
        n: migparted.config_name(n, e)
        for n, e in migparted.node_configs(inp.cluster, plan.mig_layouts).items()
    }
    for node in ("n0", "n1"):
        entries = doc["mig-configs"][names[node]]
        got: dict[int, dict[str, int]] = {}
        for e in entries:
            assert set(e) <= {"devices", "mig-enabled", "mig-devices"}
            for d in e["devices"]:
                got[d] = e.get("mig-devices", {}) if e["mig-enabled"] else {}
                assert e["mig-enabled"] == (d < 2)
        want = {
            lay.gpu: dict(Counter(i.profile for i in lay.instances))
            for lay in plan.mig_layouts
            if lay.node == node
        }
        assert {d: c for d, c in got.items() if d < 2} == want
    placed = sum(len(lay.instances) for lay in plan.mig_layouts)
    assert placed == 4  # three 1g.10gb and one 3g.40gb, each created for the replica it serves


def test_mig_parted_checker_rejects_what_mig_parted_rejects() -> None:
    good = {
        "version": "v1",
        "mig-configs": {"c": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]},
    }
    assert not migparted.check_config(good)
    bad = [
        {"mig-configs": good["mig-configs"]},
        {"version": "v1", "mig-configs": {"c": []}},
        {
            "version": "v1",
            "mig-configs": {"c": [{"devices": "some", "mig-enabled": True, "mig-devices": {}}]},
        },
        {"version": "v1", "mig-configs": {"c": [{"devices": [0], "mig-enabled": True}]}},
        {
            "version": "v1",
            "mig-configs": {"c": [{"devices": [0], "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}]},
        },
        {
            "version": "v1",
            "mig-configs": {"c": [{"devices": [0], "mig-enabled": True, "mig-devices": {"big": 1}}]},
        },
        {
            "version": "v1",
            "mig-configs": {"c": [{"devices": [0], "mig-enabled": True, "mig-devices": {}, "x": 1}]},
        },
    ]
    for doc in bad:
        assert migparted.check_config(doc), doc


def test_each_round_is_given_the_latest_arrivals_within_the_window() -> None:
    """A window of 3 replicas: a (2 replicas), then b, then c (2): the third round sees b and c only,
    as does a round planned directly afterwards; an executor without a window, or one that has run no
    batch, gives no arrivals."""
    seen: list[list[str]] = []

    def planner(inp: PlanningInput, now: datetime) -> Plan:
        seen.append([w.id for w in inp.arrivals])
        return _greedy(inp, now)

    batches = [
        [_work("a", gpus=1, replicas=2)],
        [_work("b", gpu_milli=500)],
        [_work("c", gpus=1, replicas=2)],
    ]
    sim = SimCluster(_cluster(nodes=2, mig_gpus=0), default_catalog(), NOW)
    ex = Executor(sim, planner, Policy(), arrival_window=3)
    reports = list(ex.run(batches))
    assert seen == [["a"], ["a", "b"], ["b", "c"]]
    assert [r.plan.provenance.get("arrival_replicas") for r in reports] == [2, 3, 3]
    ex.round(list(ex.demand.values()))
    assert seen[-1] == ["b", "c"]
    seen.clear()
    off = Executor(
        SimCluster(_cluster(nodes=2, mig_gpus=0), default_catalog(), NOW), planner, Policy(), arrival_window=0
    )
    list(off.run(batches))
    fresh = Executor(SimCluster(_cluster(nodes=2, mig_gpus=0), default_catalog(), NOW), planner, Policy())
    fresh.round([w for b in batches for w in b])
    assert seen == [[], [], [], []]


def test_the_observed_input_keeps_the_alternative_a_replica_runs_as() -> None:
    # Both alternatives take whole GPUs: only the alternative tells the 40-core one from the 8-core one.
    both = _work("w", alternatives=[{"gpus": 2, "cpu_milli": 40000}, {"gpus": 1, "cpu_milli": 8000}])
    big = _work("x", gpus=1, cpu_milli=50000)
    sim = SimCluster(_cluster(nodes=1), default_catalog(), NOW)
    on_one = _whole("w", "n0", [2]).model_copy(update={"cpu_milli": 8000, "alternative": 1})
    sim.place(on_one)
    sim.place(_whole("x", "n0", [3]).model_copy(update={"cpu_milli": 50000}))
    inp = state_input(sim.observe(), [both, big], Policy()).inp
    assert [p.alternative for p in inp.workload_by_id["w"].running_on] == [1]
    report = Executor(sim, _greedy, Policy()).round([both, big])
    assert validate_plan(report.plan, inp) == []
    assert not report.outcomes  # 8 + 50 cores of 64 run as they are: nothing moves or stops
    assert sim.occ.holders[("w", 0)].alternative == 1

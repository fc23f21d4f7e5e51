"""The independent plan validator: one feasible/broken pair per rule, and property tests."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpuplan.models import (
    Assignment,
    GpuModelSpec,
    GpuUse,
    IsolationRule,
    MigInstance,
    MigLayout,
    Node,
    Plan,
    PlanningInput,
    Policy,
    Quota,
    Shape,
    Workload,
    check_mig_layout,
    default_catalog,
)
from gpuplan.planner.topology import is_nvlink_clique
from gpuplan.planner.validate import Violation, validate_plan
from tests._factories import (
    assign,
    frac,
    gpus,
    layout,
    mig,
    mig_gpu,
    node,
    plan,
    planning_input,
    wait,
    whole,
)

CATALOG = default_catalog()


def base_nodes() -> list[Node]:
    """Two DGX H100 (one with a MIG GPU), an NVLink-bridged PCIe box and a two-GPU L40S server."""
    return [
        node("dgx-01", topology="dgx-h100", pool="h100", labels={"rack": "r1"}),
        node(
            "dgx-02",
            topology="dgx-h100",
            pool="h100",
            labels={"rack": "r2"},
            gpus=[mig_gpu(7, ("4g.40gb", 0), ("3g.40gb", 4))],
        ),
        node(
            "pcie-01",
            topology="pcie-4x-h100-nvl-bridged",
            gpu_model="H100-80GB",
            pool="pcie",
            labels={"rack": "r1"},
        ),
        node("l40s-01", gpus=gpus("L40S-48GB", [0, 1]), pool="l40s", labels={"rack": "r2"}),
    ]


def base_workloads() -> list[Workload]:
    """Whole NVLink training, a notebook fraction, MIG inference, a CPU job and a waiting job."""
    return [
        Workload(
            id="train",
            team="ml",
            gpus=2,
            topology="nvlink",
            gpu_models=("H100-80GB",),
            cpu_milli=8000,
            memory_mib=65536,
        ),
        Workload(id="nb", team="ds", tier="background", gpu_milli=400, cpu_milli=1000, memory_mib=4096),
        Workload(
            id="infer", team="ml", tier="latency-sensitive", mig_profile="3g.40gb", replicas=2, cpu_milli=2000
        ),
        Workload(id="etl", team="ds", cpu_milli=4000),
        Workload(id="pending", team="ml", gpus=8),
    ]


def base_assignments() -> list[Assignment]:
    """The assignments of the valid base plan."""
    return [
        assign("train", 0, "dgx-01", whole(0, 1), cpu=8000, mem=65536),
        assign("nb", 0, "l40s-01", frac(0, 400), cpu=1000, mem=4096),
        assign("infer", 0, "dgx-02", mig(7, "3g.40gb", 4), cpu=2000),
        assign("infer", 1, "dgx-01", mig(7, "3g.40gb", 0), cpu=2000),
        assign("etl", 0, "l40s-01", cpu=4000),
    ]


@dataclass
class Scenario:
    """A mutable recipe for an input and a plan; :meth:`build` validates the input."""

    workloads: list[Workload] = field(default_factory=base_workloads)
    assignments: list[Assignment] = field(default_factory=base_assignments)
    unplaced: list[tuple[str, int]] = field(default_factory=lambda: [("pending", 0)])
    layouts: list[MigLayout] = field(
        default_factory=lambda: [layout("dgx-01", 7, ("3g.40gb", 0), ("3g.40gb", 4))]
    )
    policy: Policy = field(default_factory=Policy)

    def replace(self, new: Assignment) -> None:
        """Put ``new`` in place of the assignment of the same replica."""
        self.drop(new.workload, new.replica)
        self.assignments.append(new)

    def drop(self, workload: str, replica: int) -> None:
        """Remove a replica's assignment."""
        self.assignments = [a for a in self.assignments if (a.workload, a.replica) != (workload, replica)]

    def add(self, workload: Workload, *assignments: Assignment) -> None:
        """Add a workload and its assignments."""
        self.workloads.append(workload)
        self.assignments.extend(assignments)

    def build(self) -> tuple[PlanningInput, Plan]:
        """The planning input and the plan."""
        inp = planning_input(base_nodes(), self.workloads, self.policy)
        return inp, plan(self.assignments, [wait(w, r) for w, r in self.unplaced], self.layouts)


def check(s: Scenario) -> list[Violation]:
    """Validate a scenario."""
    inp, p = s.build()
    return validate_plan(p, inp, CATALOG)


def test_base_plan_is_valid() -> None:
    assert check(Scenario()) == []


def test_default_catalog_and_aliases() -> None:
    s = Scenario()
    s.workloads[0] = s.workloads[0].model_copy(update={"gpu_models": ("H800-80GB",)})
    inp, p = s.build()
    assert validate_plan(p, inp) == []


# Each mutation breaks exactly one rule of the base plan.
def _unknown_workload(s: Scenario) -> None:
    s.assignments.append(assign("ghost", 0, "dgx-01"))


def _unknown_node(s: Scenario) -> None:
    s.replace(assign("etl", 0, "nowhere", cpu=4000))


def _unknown_gpu(s: Scenario) -> None:
    s.replace(assign("nb", 0, "l40s-01", frac(5, 400), cpu=1000, mem=4096))


def _bad_replica(s: Scenario) -> None:
    s.assignments.append(assign("etl", 3, "l40s-01", cpu=0))


def _bad_alternative(s: Scenario) -> None:
    s.replace(assign("etl", 0, "l40s-01", cpu=4000, alt=2))


def _layout_on_missing_gpu(s: Scenario) -> None:
    s.layouts.append(layout("l40s-01", 9, ("1g.10gb", 0)))


def _unplaced_unknown(s: Scenario) -> None:
    s.unplaced.append(("ghost", 0))


def _duplicate(s: Scenario) -> None:
    s.unplaced.append(("infer", 0))


def _missing(s: Scenario) -> None:
    s.drop("nb", 0)


def _too_few_gpus(s: Scenario) -> None:
    s.replace(assign("train", 0, "dgx-01", whole(0), cpu=8000, mem=65536))


def _wrong_milli(s: Scenario) -> None:
    s.replace(assign("nb", 0, "l40s-01", frac(0, 500), cpu=1000, mem=4096))


def _wrong_cpu(s: Scenario) -> None:
    s.replace(assign("etl", 0, "l40s-01", cpu=3000))


def _cpu_job_with_gpu(s: Scenario) -> None:
    s.replace(assign("etl", 0, "l40s-01", frac(1, 100), cpu=4000))


def _overcommit(s: Scenario) -> None:
    s.add(Workload(id="nb2", team="ds", gpu_milli=700), assign("nb2", 0, "l40s-01", frac(0, 700)))


def _whole_shared(s: Scenario) -> None:
    s.replace(assign("nb", 0, "dgx-01", frac(0, 400), cpu=1000, mem=4096))


def _fraction_on_mig(s: Scenario) -> None:
    s.replace(assign("nb", 0, "dgx-02", frac(7, 400), cpu=1000, mem=4096))


def _mig_and_whole(s: Scenario) -> None:
    s.replace(assign("infer", 1, "dgx-01", mig(1, "3g.40gb", 0), cpu=2000))
    s.layouts = []


def _layout_bad_start(s: Scenario) -> None:
    s.layouts.append(layout("dgx-01", 6, ("3g.40gb", 2)))


def _layout_out_of_bounds(s: Scenario) -> None:
    s.layouts.append(layout("dgx-01", 6, ("1g.20gb", 7)))


def _layout_overlap(s: Scenario) -> None:
    s.layouts.append(layout("dgx-01", 6, ("3g.40gb", 0), ("1g.10gb", 1), ("3g.40gb", 4)))


def _layout_compute(s: Scenario) -> None:
    s.layouts.append(layout("dgx-01", 6, ("7g.80gb", 0), ("1g.10gb", 0)))


def _layout_max_instances(s: Scenario) -> None:
    s.layouts.append(layout("dgx-01", 6, ("1g.10gb+me", 0), ("1g.10gb+me", 1)))


def _layout_mismatch(s: Scenario) -> None:
    s.layouts = [layout("dgx-01", 7, ("4g.40gb", 0), ("3g.40gb", 4))]


def _mig_without_layout(s: Scenario) -> None:
    s.replace(assign("infer", 1, "dgx-01", mig(6, "3g.40gb", 0), cpu=2000))


def _mig_use_bad_start(s: Scenario) -> None:
    s.replace(assign("infer", 1, "dgx-01", mig(7, "3g.40gb", 2), cpu=2000))


def _mig_instance_shared(s: Scenario) -> None:
    s.replace(assign("infer", 1, "dgx-02", mig(7, "3g.40gb", 4), cpu=2000))


def _layout_twice(s: Scenario) -> None:
    s.layouts.append(layout("dgx-01", 7, ("3g.40gb", 0), ("3g.40gb", 4)))


def _layout_on_l40s(s: Scenario) -> None:
    s.layouts.append(layout("l40s-01", 1))


def _node_cpu(s: Scenario) -> None:
    s.add(Workload(id="big", cpu_milli=252_000), assign("big", 0, "l40s-01", cpu=252_000))


def _node_memory(s: Scenario) -> None:
    s.add(Workload(id="big", memory_mib=2_097_152), assign("big", 0, "l40s-01", mem=2_097_152))


def _model_not_allowed(s: Scenario) -> None:
    s.add(
        Workload(id="nb2", gpu_milli=100, gpu_models=("L40S",)),
        assign("nb2", 0, "pcie-01", frac(0, 100)),
    )


def _mig_on_l40s(s: Scenario) -> None:
    s.replace(assign("infer", 1, "l40s-01", mig(1, "3g.40gb", 0), cpu=2000))


def _gang_partial(s: Scenario) -> None:
    s.add(Workload(id="g-a", gang="g", gpus=1), assign("g-a", 0, "pcie-01", whole(0)))
    s.workloads.append(Workload(id="g-b", gang="g", gpus=1))
    s.unplaced.append(("g-b", 0))


def _gang_domain(s: Scenario) -> None:
    s.add(
        Workload(id="g-a", gang="true", gang_domain="rack", gpus=1, replicas=2),
        assign("g-a", 0, "pcie-01", whole(0)),
        assign("g-a", 1, "dgx-02", whole(0)),
    )


def _nvlink(s: Scenario) -> None:
    s.replace(assign("train", 0, "pcie-01", whole(0, 2), cpu=8000, mem=65536))


def _numa(s: Scenario) -> None:
    s.add(Workload(id="nn", gpus=2, topology="numa"), assign("nn", 0, "dgx-01", whole(3, 4)))


def _team_exclusive(s: Scenario) -> None:
    s.policy = Policy(isolation=(IsolationRule(kind="team-exclusive", team="ml", pool="h100"),))
    s.replace(assign("etl", 0, "dgx-01", cpu=4000))


def _team_exclusive_nodes(s: Scenario) -> None:
    s.policy = Policy(isolation=(IsolationRule(kind="team-exclusive", team="ml", nodes=("l40s-01",)),))


def _teams_share(s: Scenario) -> None:
    s.policy = Policy(isolation=(IsolationRule(kind="no-shared-gpu-across-teams"),))
    s.add(Workload(id="nb2", team="ml", gpu_milli=300), assign("nb2", 0, "l40s-01", frac(0, 300)))


def _tiers_share(s: Scenario) -> None:
    s.policy = Policy(
        isolation=(IsolationRule(kind="tiers-no-share", tiers=("latency-sensitive", "background")),)
    )
    s.add(
        Workload(id="bg", tier="background", mig_profile="4g.40gb"),
        assign("bg", 0, "dgx-02", mig(7, "4g.40gb", 0)),
    )


def _quota(s: Scenario) -> None:
    s.policy = Policy(quotas=(Quota(team="ml", gpus=2.5, gpu_model="H100-SXM5-80GB (H100 80GB HBM3)"),))


def _quota_borrow_firm(s: Scenario) -> None:
    s.policy = Policy(quotas=(Quota(team="ml", gpus=2, pool="h100", borrow=True),))


BROKEN: list[tuple[Callable[[Scenario], None], str, str]] = [
    (_unknown_workload, "unknown-ref", "workload ghost replica 0"),
    (_unknown_node, "unknown-ref", "workload etl replica 0"),
    (_unknown_gpu, "unknown-ref", "workload nb replica 0"),
    (_bad_replica, "unknown-ref", "workload etl replica 3"),
    (_bad_alternative, "unknown-ref", "workload etl replica 0"),
    (_layout_on_missing_gpu, "unknown-ref", "node l40s-01 gpu 9"),
    (_unplaced_unknown, "unknown-ref", "workload ghost replica 0"),
    (_duplicate, "replica-duplicate", "workload infer replica 0"),
    (_missing, "replica-missing", "workload nb replica 0"),
    (_too_few_gpus, "shape-mismatch", "workload train replica 0"),
    (_wrong_milli, "shape-mismatch", "workload nb replica 0"),
    (_wrong_cpu, "shape-mismatch", "workload etl replica 0"),
    (_cpu_job_with_gpu, "shape-mismatch", "workload etl replica 0"),
    (_overcommit, "gpu-overcommit", "node l40s-01 gpu 0"),
    (_whole_shared, "whole-exclusive", "node dgx-01 gpu 0"),
    (_fraction_on_mig, "mig-mixed-fraction", "node dgx-02 gpu 7"),
    (_mig_and_whole, "mig-mixed-fraction", "node dgx-01 gpu 1"),
    (_layout_bad_start, "mig-start", "node dgx-01 gpu 6"),
    (_layout_out_of_bounds, "mig-bounds", "node dgx-01 gpu 6"),
    (_layout_overlap, "mig-overlap", "node dgx-01 gpu 6"),
    (_layout_compute, "mig-compute", "node dgx-01 gpu 6"),
    (_layout_max_instances, "mig-max-instances", "node dgx-01 gpu 6"),
    (_layout_mismatch, "mig-layout-mismatch", "workload infer replica 1"),
    (_mig_without_layout, "mig-layout-mismatch", "workload infer replica 1"),
    (_mig_use_bad_start, "mig-start", "workload infer replica 1"),
    (_mig_instance_shared, "mig-instance-shared", "node dgx-02 gpu 7"),
    (_layout_twice, "mig-layout-duplicate", "node dgx-01 gpu 7"),
    (_layout_on_l40s, "gpu-model", "node l40s-01 gpu 1"),
    (_node_cpu, "cpu", "node l40s-01"),
    (_node_memory, "memory", "node l40s-01"),
    (_model_not_allowed, "gpu-model", "workload nb2 replica 0"),
    (_mig_on_l40s, "gpu-model", "workload infer replica 1"),
    (_gang_partial, "gang", "gang g"),
    (_gang_domain, "gang", "gang g-a"),
    (_nvlink, "topology-nvlink", "workload train replica 0"),
    (_numa, "topology-numa", "workload nn replica 0"),
    (_team_exclusive, "isolation", "node dgx-01"),
    (_team_exclusive_nodes, "isolation", "node l40s-01"),
    (_teams_share, "isolation", "node l40s-01 gpu 0"),
    (_tiers_share, "isolation", "node dgx-02 gpu 7"),
    (_quota, "quota", "team ml model H100-SXM5-80GB (H100 80GB HBM3)"),
    (_quota_borrow_firm, "quota", "team ml pool h100"),
]


@pytest.mark.parametrize(
    ("mutate", "rule", "subject"), BROKEN, ids=[m.__name__.strip("_") for m, _, _ in BROKEN]
)
def test_each_rule_is_caught(mutate: Callable[[Scenario], None], rule: str, subject: str) -> None:
    s = Scenario()
    mutate(s)
    found = check(s)
    assert (rule, subject) in {(v.rule, v.subject) for v in found}, found
    assert all(v.message.endswith(".") and v.message[0].isupper() for v in found)


def test_only_the_broken_rule_is_reported() -> None:
    for mutate, rule, _ in BROKEN:
        if mutate in (_layout_compute, _mig_and_whole):
            continue  # these also break a neighbouring rule by construction
        s = Scenario()
        mutate(s)
        assert {v.rule for v in check(s)} == {rule}, mutate.__name__


def test_quota_within_limits_and_borrowing() -> None:
    s = Scenario()
    s.add(Workload(id="nb2", team="ds", gpu_milli=300), assign("nb2", 0, "l40s-01", frac(0, 300)))
    # ml uses 2 whole + 3/7 + 3/7 H100 = 20/7 ~ 2.857; ds uses 0.4 + 0.3 of an L40S (0.7 is no exact float).
    s.policy = Policy(
        quotas=(
            Quota(team="ml", gpus=2.86, gpu_model="H100-80GB"),
            Quota(team="ds", gpus=0.7),
            Quota(team="ml", gpus=0, pool="pcie"),
        )
    )
    assert check(s) == []
    s.policy = Policy(quotas=(Quota(team="ml", gpus=2.85), Quota(team="ds", gpus=0.69)))
    assert [(v.rule, v.subject) for v in check(s)] == [("quota", "team ml"), ("quota", "team ds")]
    s.add(
        Workload(id="spot", team="ml", gpus=4, preemptible=True),
        assign("spot", 0, "dgx-01", whole(2, 3, 4, 5)),
    )
    s.policy = Policy(quotas=(Quota(team="ml", gpus=3, gpu_model="H100-80GB", borrow=True),))
    assert check(s) == []
    s.policy = Policy(quotas=(Quota(team="ml", gpus=3, gpu_model="H100-80GB"),))
    assert [v.rule for v in check(s)] == ["quota"]


def test_same_node_needs_nothing_more() -> None:
    s = Scenario()
    s.add(Workload(id="sn", gpus=2, topology="same-node"), assign("sn", 0, "pcie-01", whole(0, 3)))
    assert check(s) == []


def test_alternatives_choose_the_shape() -> None:
    s = Scenario()
    alts = (Shape(mig_profile="1g.10gb"), Shape(gpu_milli=250, gpu_models=("L40S",)))
    s.add(
        Workload(id="alt", alternatives=alts, cpu_milli=500),
        assign("alt", 0, "l40s-01", frac(1, 250), cpu=500, alt=1),
    )
    assert check(s) == []
    s.replace(assign("alt", 0, "l40s-01", frac(1, 250), cpu=500, alt=0))
    assert [v.rule for v in check(s)] == ["shape-mismatch"]


def test_cluster_layout_is_used_when_plan_has_none() -> None:
    s = Scenario()
    s.add(
        Workload(id="big-mig", mig_profile="4g.40gb"),
        assign("big-mig", 0, "dgx-02", mig(7, "4g.40gb", 0)),
    )
    assert check(s) == []
    s.layouts.append(layout("dgx-02", 7, ("7g.80gb", 0)))
    assert {v.rule for v in check(s)} == {"mig-layout-mismatch"}


def test_several_broken_rules_are_all_reported() -> None:
    s = Scenario()
    for mutate in (_overcommit, _layout_bad_start, _nvlink, _node_cpu, _gang_partial):
        mutate(s)
    s.drop("infer", 0)
    rules = {v.rule for v in check(s)}
    assert {"replica-missing", "gpu-overcommit", "mig-start", "topology-nvlink", "cpu", "gang"} <= rules


def test_order_is_deterministic() -> None:
    s = Scenario()
    for mutate in (_duplicate, _whole_shared, _layout_overlap, _numa, _teams_share):
        mutate(s)
    inp, p = s.build()
    first = validate_plan(p, inp, CATALOG)
    assert len(first) >= 5
    assert validate_plan(p, inp, CATALOG) == first


H100_PAIRS = [(p.name, st_) for p in CATALOG.model("H100-80GB").profiles for st_ in range(9)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(H100_PAIRS), max_size=6))
def test_layout_verdict_agrees_with_check_mig_layout(pairs: list[tuple[str, int]]) -> None:
    s = Scenario()
    s.layouts.append(layout("dgx-01", 6, *pairs))
    insts = tuple(MigInstance(profile=p, start=st_) for p, st_ in pairs)
    assert bool(check(s)) == bool(check_mig_layout("H100-80GB", insts, CATALOG))


# ---------------------------------------------------------------------------------------------
# Random valid plans and single mutations.

NODE_KINDS = ("dgx-h100", "pcie-h100", "l40s", "a100")


@dataclass
class Generated:
    """A random valid input and plan, with what the mutations need to know."""

    nodes: list[Node]
    workloads: list[Workload]
    assignments: list[Assignment]
    unplaced: list[tuple[str, int]]
    layouts: list[MigLayout]
    whole_gpus: list[tuple[str, int]] = field(default_factory=list)
    fraction_gpus: list[tuple[str, int, int]] = field(default_factory=list)
    mig_gpus: list[tuple[str, int]] = field(default_factory=list)
    plan_layout_gpus: list[tuple[str, int, MigInstance]] = field(default_factory=list)

    def build(self) -> tuple[PlanningInput, Plan]:
        """The planning input and the plan."""
        inp = planning_input(self.nodes, self.workloads)
        return inp, plan(self.assignments, [wait(w, r) for w, r in self.unplaced], self.layouts)


def _random_layout(rng: random.Random, model: str) -> tuple[MigInstance, ...]:
    """A random valid MIG layout, grown greedily in random order."""
    spec = CATALOG.model(model)
    candidates = [MigInstance(profile=p.name, start=s) for p in spec.profiles for s in sorted(p.starts)]
    rng.shuffle(candidates)
    chosen: tuple[MigInstance, ...] = ()
    for inst in candidates[: rng.randint(1, len(candidates))]:
        if not check_mig_layout(model, (*chosen, inst), CATALOG):
            chosen = (*chosen, inst)
    return chosen


def _raw_node(rng: random.Random, name: str) -> Node:
    kind = rng.choice(NODE_KINDS)
    rack = {"rack": rng.choice(["r1", "r2"])}
    if kind == "dgx-h100":
        return node(name, topology="dgx-h100", labels=rack)
    if kind == "pcie-h100":
        return node(name, topology="pcie-4x-h100-nvl-bridged", gpu_model="H100-80GB", labels=rack)
    count = rng.randint(1, 4)
    model = "L40S-48GB" if kind == "l40s" else "A100-SXM4-80GB"
    return node(name, gpus=gpus(model, [i // 2 for i in range(count)]), labels=rack)


def generate(rng: random.Random) -> Generated:
    """A random small cluster and a valid plan of whole, fractional, MIG and CPU-only replicas."""
    g = Generated(nodes=[], workloads=[], assignments=[], unplaced=[], layouts=[])
    counter = itertools.count()

    def add(shape: dict[str, object], node_name: str, uses: tuple[GpuUse, ...], cpu: int) -> None:
        wid = f"w{next(counter)}"
        team, tier = rng.choice(["ml", "ds"]), rng.choice(["standard", "background", "latency-sensitive"])
        replicas = rng.choice([1, 1, 2])
        g.workloads.append(
            Workload.model_validate(
                {"id": wid, "team": team, "tier": tier, "replicas": replicas, "cpu_milli": cpu, **shape}
            )
        )
        g.assignments.append(assign(wid, 0, node_name, uses, cpu=cpu))
        g.unplaced.extend((wid, r) for r in range(1, replicas))

    for n in range(rng.randint(1, 4)):
        raw = _raw_node(rng, f"n{n}")
        cpu_used = 0
        whole_free: list[int] = []
        overrides: list[dict[str, object]] = []
        for gpu in raw.gpus:
            spec = CATALOG.model(gpu.model)
            mode = rng.choice(["idle", "whole", "whole", "fraction", "mig", "mig"])
            if mode == "mig" and spec.mig_capable:
                insts = _random_layout(rng, gpu.model)
                if rng.random() < 0.5:
                    overrides.append(
                        {"index": gpu.index, "mig": {"instances": [i.model_dump() for i in insts]}}
                    )
                else:
                    g.layouts.append(MigLayout(node=raw.name, gpu=gpu.index, instances=insts))
                    g.plan_layout_gpus.extend((raw.name, gpu.index, i) for i in insts)
                g.mig_gpus.append((raw.name, gpu.index))
                for inst in insts:
                    if rng.random() < 0.7:
                        cpu = rng.randint(0, 4000)
                        cpu_used += cpu
                        add(
                            {"mig_profile": inst.profile},
                            raw.name,
                            mig(gpu.index, inst.profile, inst.start),
                            cpu,
                        )
            elif mode == "fraction":
                used = 0
                for _ in range(rng.randint(1, 3)):
                    milli = rng.randint(100, 333)
                    used += milli
                    add({"gpu_milli": milli}, raw.name, frac(gpu.index, milli), 0)
                g.fraction_gpus.append((raw.name, gpu.index, used))
            elif mode in ("whole", "mig"):
                whole_free.append(gpu.index)
        while whole_free:
            size = min(len(whole_free), rng.randint(1, 3))
            group, whole_free = whole_free[:size], whole_free[size:]
            topo = "any"
            if size > 1 and is_nvlink_clique(raw, group):
                topo = "nvlink"
            elif len({raw.gpu_by_index[i].numa for i in group}) == 1:
                topo = "numa"
            models = (raw.gpus[0].model,) if rng.random() < 0.5 else ()
            add({"gpus": size, "topology": topo, "gpu_models": models}, raw.name, whole(*group), 0)
            g.whole_gpus.extend((raw.name, i) for i in group)
        if rng.random() < 0.5:
            cpu = rng.randint(1, 8000)
            cpu_used += cpu
            add({}, raw.name, (), cpu)
        capacity = cpu_used + rng.randint(0, 2000)
        data = raw.model_dump(exclude={"topology"})
        data.update(cpu_milli=capacity)
        for o in overrides:
            data["gpus"][o["index"]]["mig"] = o["mig"]
        g.nodes.append(Node.model_validate(data))
    return g


def _intrude(
    g: Generated, shape: dict[str, object], node_name: str, uses: tuple[GpuUse, ...], cpu: int = 0
) -> None:
    g.workloads.append(Workload.model_validate({"id": "intruder", "cpu_milli": cpu, **shape}))
    g.assignments.append(assign("intruder", 0, node_name, uses, cpu=cpu))


def _model_of(g: Generated, node_name: str, index: int) -> GpuModelSpec:
    found = next(n for n in g.nodes if n.name == node_name)
    return CATALOG.model(found.gpu_by_index[index].model)


def _mutate(g: Generated, rng: random.Random, kind: str) -> str:
    """Apply one mutation of ``kind``; return the rule it must trigger."""
    if kind == "whole-dup":
        n, i = rng.choice(g.whole_gpus)
        _intrude(g, {"gpus": 1}, n, whole(i))
        return "whole-exclusive"
    if kind == "overload":
        n, i, used = rng.choice(g.fraction_gpus)
        _intrude(g, {"gpu_milli": 1001 - used}, n, frac(i, 1001 - used))
        return "gpu-overcommit"
    if kind == "mig-start":
        k = rng.choice([k for k, a in enumerate(g.assignments) if a.gpus and a.gpus[0].kind == "mig"])
        a = g.assignments[k]
        use = a.gpus[0]
        spec = _model_of(g, a.node, use.index)
        bad = [s for s in range(spec.memory_slices) if s not in spec.profile(use.mig_profile or "").starts]
        new = use.model_copy(update={"mig_start": rng.choice(bad)})
        g.assignments[k] = a.model_copy(update={"gpus": (new,)})
        return "mig-start"
    if kind == "layout-overlap":
        n, i, inst = rng.choice(g.plan_layout_gpus)
        k = next(k for k, lay in enumerate(g.layouts) if (lay.node, lay.gpu) == (n, i))
        smallest = _model_of(g, n, i).profiles[0]  # a 1g profile: valid at every start but the last
        extra = MigInstance(profile=smallest.name, start=inst.start)
        g.layouts[k] = g.layouts[k].model_copy(update={"instances": (*g.layouts[k].instances, extra)})
        return "mig-overlap"
    if kind == "whole-on-mig":
        n, i = rng.choice(g.mig_gpus)
        _intrude(g, {"gpus": 1}, n, whole(i))
        return "mig-mixed-fraction"
    if kind == "drop":
        g.assignments.pop(rng.randrange(len(g.assignments)))
        return "replica-missing"
    target = rng.choice(g.nodes)
    _intrude(g, {}, target.name, (), target.cpu_milli + 1)
    return "cpu"


def _applicable(g: Generated) -> list[str]:
    kinds = ["cpu"]
    if g.assignments:
        kinds.append("drop")
    if g.whole_gpus:
        kinds.append("whole-dup")
    if g.fraction_gpus:
        kinds.append("overload")
    if any(a.gpus and a.gpus[0].kind == "mig" for a in g.assignments):
        kinds.append("mig-start")
    if g.plan_layout_gpus:
        kinds.append("layout-overlap")
    if g.mig_gpus:
        kinds.append("whole-on-mig")
    return kinds


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_random_valid_plans_pass(rng: random.Random) -> None:
    inp, p = generate(rng).build()
    assert validate_plan(p, inp, CATALOG) == []


@SETTINGS
@given(st.randoms(use_true_random=False), st.data())
def test_random_single_mutation_is_caught(rng: random.Random, data: st.DataObject) -> None:
    g = generate(rng)
    kinds = _applicable(g)
    assume(kinds)
    kind = data.draw(st.sampled_from(kinds))
    rule = _mutate(g, rng, kind)
    inp, p = g.build()
    assert rule in {v.rule for v in validate_plan(p, inp, CATALOG)}

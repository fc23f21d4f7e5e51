"""The independent plan validator: one feasible/broken pair per rule, and property tests."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpuplan.models import (
    Action,
    Assignment,
    DisruptionBudget,
    GpuModelSpec,
    GpuUse,
    IsolationRule,
    MigInstance,
    MigLayout,
    MigPolicy,
    Node,
    Plan,
    PlanningInput,
    Policy,
    Quota,
    Shape,
    Workload,
    data_dir,
    default_catalog,
)
from gpuplan.models.plan import CREATE, DESTROY, DRAIN, MIGRATE, PREEMPT
from gpuplan.models.topology import is_nvlink_clique
from gpuplan.planner.validation.validate import (
    MISSING_NAMED,
    ImpliedWorkloadError,
    Report,
    Skipped,
    Violation,
    check_plan,
    implied_workloads,
    validate_plan,
)
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
    start_actions,
    wait,
    whole,
)

CATALOG = default_catalog()
#: The plans' time; running work started an hour before it.
NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
HOUR_AGO = NOW - timedelta(hours=1)


def base_nodes() -> list[Node]:
    """Two DGX H100 (one with MIG mode on for GPUs 6-7, no instance yet; one with a MIG GPU), an
    NVLink-bridged PCIe box and a two-GPU L40S server."""
    return [
        node(
            "dgx-01",
            topology="dgx-h100",
            pool="h100",
            labels={"rack": "r1"},
            gpus=[mig_gpu(6), mig_gpu(7)],  # MIG mode on, no instance yet
        ),
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
    """Whole NVLink training, a notebook fraction, MIG inference (replica 0 running), a CPU job, a waiting
    job, and running work that stays: a non-preemptible latency-sensitive service and two preemptible
    jobs of team ops."""
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
            id="infer",
            team="ml",
            tier="latency-sensitive",
            mig_profile="3g.40gb",
            replicas=2,
            cpu_milli=2000,
            running_on="dgx-02:7/3g.40gb@4",
            started_at=HOUR_AGO,
        ),
        Workload(id="etl", team="ds", cpu_milli=4000),
        Workload(id="pending", team="ml", gpus=8),
        Workload(
            id="svc", team="web", tier="latency-sensitive", gpus=1, running_on="dgx-02:3", started_at=HOUR_AGO
        ),
        Workload(
            id="batch", team="ops", gpus=1, preemptible=True, running_on="pcie-01:1", started_at=HOUR_AGO
        ),
        Workload(
            id="scav",
            team="ops",
            tier="background",
            gpu_milli=300,
            preemptible=True,
            running_on="l40s-01:0=300",
            started_at=HOUR_AGO,
        ),
    ]


def base_assignments() -> list[Assignment]:
    """The assignments of the valid base plan."""
    return [
        assign("train", 0, "dgx-01", whole(0, 1), cpu=8000, mem=65536),
        assign("nb", 0, "l40s-01", frac(0, 400), cpu=1000, mem=4096),
        assign("infer", 0, "dgx-02", mig(7, "3g.40gb", 4), cpu=2000),
        assign("infer", 1, "dgx-01", mig(7, "3g.40gb", 0), cpu=2000),
        assign("etl", 0, "l40s-01", cpu=4000),
        assign("svc", 0, "dgx-02", whole(3)),
        assign("batch", 0, "pcie-01", whole(1)),
        assign("scav", 0, "l40s-01", frac(0, 300)),
    ]


def act(kind: str, workload: str, replica: int = 0, rnd: int = 1, detail: str | None = None) -> Action:
    """An action of the plan (``from``/``to`` are informative and left out)."""
    return Action(kind=kind, workload=workload, replica=replica, round=rnd, detail=detail)


def layout_actions(nodes: Sequence[Node], layouts: Sequence[MigLayout]) -> list[Action]:
    """The ``destroy-mig`` and ``create-mig`` actions that take each GPU from its layout in ``nodes`` to
    the plan's (layouts naming no existing GPU get none)."""
    by_name = {n.name: n for n in nodes}
    out: list[Action] = []
    for lay in layouts:
        gpu = by_name[lay.node].gpu_by_index.get(lay.gpu) if lay.node in by_name else None
        if gpu is None:
            continue
        now = {(i.profile, i.start) for i in (gpu.mig.instances if gpu.mig else ())}
        then = {(i.profile, i.start) for i in lay.instances}
        for kind, pairs in ((DESTROY, now - then), (CREATE, then - now)):
            out += [Action(kind=kind, node=lay.node, gpu=lay.gpu, detail=f"{p}@{st_}") for p, st_ in pairs]
    return out


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
    actions: list[Action] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=lambda: {"now": NOW.isoformat()})
    nodes: list[Node] = field(default_factory=base_nodes)
    #: Whether :meth:`build` adds the MIG actions of the layouts to ``actions``.
    mig_actions: bool = True
    #: Whether :meth:`build` adds the start action of each placed replica that does not run now.
    start_actions: bool = True

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

    def update(self, workload: str, **fields: Any) -> None:
        """Change fields of a workload."""
        self.workloads = [
            Workload.model_validate({**w.model_dump(), **fields}) if w.id == workload else w
            for w in self.workloads
        ]

    def stop(self, workload: str, replica: int = 0) -> None:
        """Leave a replica waiting instead of placed."""
        self.drop(workload, replica)
        self.unplaced.append((workload, replica))

    def budget(self, **fields: Any) -> None:
        """Set the disruption budget."""
        self.policy = self.policy.model_copy(update={"disruption": DisruptionBudget(**fields)})

    def mig(self, **fields: Any) -> None:
        """Set the MIG policy."""
        self.policy = self.policy.model_copy(update={"mig": MigPolicy(**fields)})

    def build(self) -> tuple[PlanningInput, Plan]:
        """The planning input and the plan."""
        inp = planning_input(self.nodes, self.workloads, self.policy)
        base = plan(self.assignments, [wait(w, r) for w, r in self.unplaced], self.layouts)
        actions = [*self.actions, *(layout_actions(self.nodes, self.layouts) if self.mig_actions else [])]
        actions += start_actions(self.workloads, self.assignments) if self.start_actions else []
        return inp, base.model_copy(update={"actions": tuple(actions), "provenance": self.provenance})


def check(s: Scenario) -> list[Violation]:
    """Validate a scenario."""
    inp, p = s.build()
    return validate_plan(p, inp, CATALOG)


def report_of(s: Scenario) -> Report:
    """Validate a scenario, with the rule families that could not be checked."""
    inp, p = s.build()
    return check_plan(p, inp, CATALOG)


def test_base_plan_is_valid() -> None:
    assert check(Scenario()) == []


def test_default_catalog_and_aliases() -> None:
    s = Scenario()
    s.workloads[0] = s.workloads[0].model_copy(update={"gpu_models": ("H100-SXM5-80GB (H100 80GB HBM3)",)})
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


def _layout_unscheduled(s: Scenario) -> None:
    s.mig_actions = False


def _mig_mode_off(s: Scenario) -> None:
    # GPU 5 of dgx-01 is an H100 with MIG mode off: a plan does not turn it on.
    s.layouts.append(layout("dgx-01", 5, ("7g.80gb", 0)))


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


def _preempt_not_preemptible(s: Scenario) -> None:
    s.budget(max_preemptions_per_round=1)
    s.stop("svc")
    s.actions.append(act(PREEMPT, "svc"))


def _preempt_protected_tier(s: Scenario) -> None:
    s.budget(max_preemptions_per_round=1)
    s.update("svc", preemptible=True)
    s.stop("svc")
    s.actions.append(act(PREEMPT, "svc"))


def _move_two(s: Scenario) -> None:
    """Move batch to another GPU of its node and scav to another L40S."""
    s.replace(assign("batch", 0, "pcie-01", whole(2)))
    s.replace(assign("scav", 0, "l40s-01", frac(1, 300)))


def _moves_over_budget(s: Scenario) -> None:
    s.budget(max_moves_per_round=1)
    _move_two(s)
    s.actions += [act(MIGRATE, "batch"), act(MIGRATE, "scav")]


def _team_over_budget(s: Scenario) -> None:
    s.budget(max_moves_per_round=2, max_moves_per_team=1)
    _move_two(s)
    s.actions += [act(MIGRATE, "batch"), act(MIGRATE, "scav")]


def _preemptions_over_budget(s: Scenario) -> None:
    s.budget(max_preemptions_per_round=1, preempt_only_for_higher_tier=False)
    s.stop("batch")
    s.stop("scav")
    s.actions += [act(PREEMPT, "batch"), act(PREEMPT, "scav")]


def _moves_spread_over_rounds(s: Scenario) -> None:
    """Two moves, one per round, in a plan made for one round of one move: two rounds buy no more."""
    s.budget(max_moves_per_round=1)
    _move_two(s)
    s.actions += [act(MIGRATE, "batch", rnd=1), act(MIGRATE, "scav", rnd=2)]


def _preemptions_spread_over_rounds(s: Scenario) -> None:
    s.budget(max_preemptions_per_round=1, preempt_only_for_higher_tier=False)
    s.stop("batch")
    s.stop("scav")
    s.actions += [act(PREEMPT, "batch", rnd=1), act(PREEMPT, "scav", rnd=2)]


def _move_unscheduled(s: Scenario) -> None:
    s.budget(max_moves_per_round=1)
    s.replace(assign("batch", 0, "pcie-01", whole(2)))


def _preempt_unscheduled(s: Scenario) -> None:
    s.budget(max_preemptions_per_round=1)
    s.stop("scav")


def _young_move(s: Scenario) -> None:
    s.budget(max_moves_per_round=1, min_runtime_s=7200)
    s.replace(assign("batch", 0, "pcie-01", whole(2)))
    s.actions.append(act(MIGRATE, "batch"))


def _repartition_dgx02(s: Scenario) -> None:
    """Split dgx-02 GPU 7's unused 4g.40gb into two 2g.20gb (infer 0 keeps its 3g.40gb@4)."""
    s.layouts.append(layout("dgx-02", 7, ("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)))


def _drain_over_budget(s: Scenario) -> None:
    s.mig(allow_repartition=True)
    s.budget(max_moves_per_round=1)
    _repartition_dgx02(s)
    s.replace(assign("batch", 0, "pcie-01", whole(2)))
    s.actions += [act(MIGRATE, "infer", detail=DRAIN), act(MIGRATE, "batch")]


def _mig_create(s: Scenario) -> None:
    s.mig(allow_create=False)


def _mig_repartition(s: Scenario) -> None:
    s.layouts.append(layout("dgx-02", 7, ("3g.40gb", 4)))


def _kv_cache(s: Scenario, mib: int) -> None:
    """Two fractions of L40S GPU 1 (49152 MiB) asking for ``mib`` MiB of GPU memory each."""
    for name in ("kv1", "kv2"):
        s.add(
            Workload(id=name, team="ds", gpu_milli=200, gpu_memory_mib=mib),
            assign(name, 0, "l40s-01", frac(1, 200), gpu_mem=mib),
        )


def _gpu_memory_overcommit(s: Scenario) -> None:
    _kv_cache(s, 30000)


def _whole_gpu_too_small(s: Scenario) -> None:
    s.add(
        Workload(id="big", team="ds", gpus=1, gpu_memory_mib=60000),
        assign("big", 0, "l40s-01", whole(1), gpu_mem=60000),
    )


def _mig_instance_too_small(s: Scenario) -> None:
    """A100-80GB's 3g.40gb has 40192 MiB (H100-80GB's 40448 MiB): an ask of 40400 fits only the H100."""
    s.nodes.append(
        node("a100-01", gpus=[{"index": 0, "model": "A100-SXM4-80GB", **mig_gpu(0, ("3g.40gb", 4))}])
    )
    s.add(
        Workload(id="q", team="ds", mig_profile="3g.40gb", gpu_memory_mib=40400),
        assign("q", 0, "a100-01", mig(0, "3g.40gb", 4), gpu_mem=40400),
    )


def _gpu_memory_not_reserved(s: Scenario) -> None:
    s.add(
        Workload(id="kv", team="ds", gpu_milli=200, gpu_memory_mib=8192),
        assign("kv", 0, "l40s-01", frac(1, 200)),
    )


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
    (_mig_mode_off, "mig-mode", "node dgx-01 gpu 5"),
    (_layout_on_l40s, "gpu-model", "node l40s-01 gpu 1"),
    (_layout_unscheduled, "mig-unscheduled", "node dgx-01 gpu 7"),
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
    (_preempt_not_preemptible, "preempt-forbidden", "workload svc replica 0"),
    (_preempt_protected_tier, "preempt-forbidden", "workload svc replica 0"),
    (_moves_over_budget, "disruption-budget", "round 1"),
    (_team_over_budget, "disruption-budget", "round 1 team ops"),
    (_preemptions_over_budget, "disruption-budget", "round 1"),
    (_moves_spread_over_rounds, "disruption-budget", "plan"),
    (_preemptions_spread_over_rounds, "disruption-budget", "plan"),
    (_move_unscheduled, "disruption-unscheduled", "workload batch replica 0"),
    (_preempt_unscheduled, "disruption-unscheduled", "workload scav replica 0"),
    (_young_move, "min-runtime", "workload batch replica 0"),
    (_drain_over_budget, "disruption-budget", "round 1"),
    (_mig_create, "mig-create-forbidden", "node dgx-01 gpu 7"),
    (_mig_repartition, "mig-repartition-forbidden", "node dgx-02 gpu 7"),
    (_gpu_memory_overcommit, "gpu-memory", "node l40s-01 gpu 1"),
    (_whole_gpu_too_small, "gpu-memory", "node l40s-01 gpu 1"),
    (_mig_instance_too_small, "gpu-memory", "node a100-01 gpu 0"),
    (_gpu_memory_not_reserved, "shape-mismatch", "workload kv replica 0"),
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


def _preempt_preemptible(s: Scenario) -> None:
    s.budget(max_preemptions_per_round=1)
    s.stop("scav")
    s.actions.append(act(PREEMPT, "scav"))


def _preempt_latency_sensitive_when_allowed(s: Scenario) -> None:
    s.budget(max_preemptions_per_round=1, preempt_latency_sensitive=True, preempt_only_for_higher_tier=False)
    s.update("svc", preemptible=True)
    s.stop("svc")
    s.actions.append(act(PREEMPT, "svc"))


def _moves_over_two_rounds(s: Scenario) -> None:
    """Two moves in two rounds of one move each, in a plan made for two rounds."""
    _moves_spread_over_rounds(s)
    s.provenance["replan_rounds"] = 2


def _moves_of_two_teams(s: Scenario) -> None:
    s.budget(max_moves_per_round=2, max_moves_per_team=1)
    s.replace(assign("svc", 0, "dgx-02", whole(4)))
    s.replace(assign("batch", 0, "pcie-01", whole(2)))
    s.actions += [act(MIGRATE, "svc"), act(MIGRATE, "batch")]


def _preemptions_over_two_rounds(s: Scenario) -> None:
    s.budget(max_preemptions_per_round=1, preempt_only_for_higher_tier=False)
    s.provenance["replan_rounds"] = 2
    s.stop("batch")
    s.stop("scav")
    s.actions += [act(PREEMPT, "batch", rnd=1), act(PREEMPT, "scav", rnd=2)]


def _old_enough_move(s: Scenario) -> None:
    s.budget(max_moves_per_round=1, min_runtime_s=3600)
    s.replace(assign("batch", 0, "pcie-01", whole(2)))
    s.actions.append(act(MIGRATE, "batch"))


def _drain_in_its_own_round(s: Scenario) -> None:
    s.mig(allow_repartition=True)
    s.budget(max_moves_per_round=1)
    _repartition_dgx02(s)
    s.replace(assign("batch", 0, "pcie-01", whole(2)))
    s.actions += [act(MIGRATE, "infer", detail=DRAIN, rnd=1), act(MIGRATE, "batch", rnd=2)]


def _no_new_instance(s: Scenario) -> None:
    s.mig(allow_create=False)
    s.layouts = []
    s.stop("infer", 1)


def _repartition_allowed(s: Scenario) -> None:
    s.mig(allow_repartition=True)
    _mig_repartition(s)


def _destroy_without_create(s: Scenario) -> None:
    _no_new_instance(s)
    s.mig(allow_create=False, allow_repartition=True)
    _mig_repartition(s)


def _stays_in_other_gpu_order(s: Scenario) -> None:
    s.update("train", running_on="dgx-01:1,0", started_at=NOW)
    s.budget(min_runtime_s=600)


def _gpu_memory_fills_the_gpu(s: Scenario) -> None:
    _kv_cache(s, 24576)


def _memory_only_fraction(s: Scenario) -> None:
    """A memory-only ask is planned as a 1 milli-GPU fraction; a whole H100 has 81920 MiB."""
    s.add(
        Workload(id="mo", team="ds", gpu_memory_mib=49152),
        assign("mo", 0, "l40s-01", frac(1, 1), gpu_mem=49152),
    )
    s.add(
        Workload(id="big", team="ds", gpus=1, gpu_memory_mib=81920),
        assign("big", 0, "dgx-01", whole(5), gpu_mem=81920),
    )


# Each change keeps the base plan valid: the allowed counterpart of a broken case above.
ALLOWED: list[Callable[[Scenario], None]] = [
    _preempt_preemptible,
    _preempt_latency_sensitive_when_allowed,
    _moves_over_two_rounds,
    _moves_of_two_teams,
    _preemptions_over_two_rounds,
    _old_enough_move,
    _drain_in_its_own_round,
    _no_new_instance,
    _repartition_allowed,
    _destroy_without_create,
    _stays_in_other_gpu_order,
    _gpu_memory_fills_the_gpu,
    _memory_only_fraction,
]


@pytest.mark.parametrize("change", ALLOWED, ids=[m.__name__.strip("_") for m in ALLOWED])
def test_each_allowed_change_is_valid(change: Callable[[Scenario], None]) -> None:
    s = Scenario()
    change(s)
    assert check(s) == []


def test_stopping_protected_work_without_a_preemption_budget() -> None:
    # A non-preemptible latency-sensitive replica stopped while no preemption is allowed at all.
    s = Scenario()
    s.stop("svc")
    assert {v.rule for v in check(s)} == {"preempt-forbidden", "disruption-unscheduled", "disruption-budget"}
    s.actions.append(act(PREEMPT, "svc"))
    found = check(s)
    assert {(v.rule, v.subject) for v in found} == {
        ("preempt-forbidden", "workload svc replica 0"),
        ("disruption-budget", "plan"),
        ("disruption-budget", "round 1"),
    }
    assert "'svc'" in found[0].message and "not preemptible" in found[0].message


def test_seven_small_instances_merged_only_when_repartitioning_is_on() -> None:
    s = Scenario()
    small = [("1g.10gb", i) for i in range(7)]
    s.nodes.append(
        node(
            "mig-01",
            gpus=[
                {
                    "index": 0,
                    "model": "H100-80GB",
                    "numa": 0,
                    "mig": {"instances": [{"profile": p, "start": st_} for p, st_ in small]},
                }
            ],
        )
    )
    s.add(Workload(id="big", mig_profile="7g.80gb"), assign("big", 0, "mig-01", mig(0, "7g.80gb", 0)))
    s.layouts.append(layout("mig-01", 0, ("7g.80gb", 0)))
    found = check(s)
    assert [(v.rule, v.subject) for v in found] == [("mig-repartition-forbidden", "node mig-01 gpu 0")]
    assert all(f"1g.10gb@{i}" in found[0].message for i in range(7)) and "7g.80gb@0" in found[0].message
    s.mig(allow_repartition=True)
    assert check(s) == []
    s.mig(allow_repartition=True, allow_create=False)
    assert [(v.rule, v.subject) for v in check(s)] == [
        ("mig-create-forbidden", "node dgx-01 gpu 7"),
        ("mig-create-forbidden", "node mig-01 gpu 0"),
    ]


def test_mig_mode_enabled_with_no_instance_creates_nothing() -> None:
    s = Scenario()
    s.mig(allow_create=False)
    s.layouts = [layout("dgx-01", 6)]
    s.stop("infer", 1)
    assert check(s) == []


def test_min_runtime_is_skipped_without_a_time_or_a_start() -> None:
    s = Scenario()
    _young_move(s)
    s.provenance = {}
    report = report_of(s)
    assert report.valid and [k.family for k in report.skipped] == ["min-runtime"]
    assert "now" in report.skipped[0].reason
    s.provenance = {"now": "2026-11-29T12:00:00"}  # no zone: UTC
    assert [v.rule for v in check(s)] == ["min-runtime"]
    s.provenance = {"now": (NOW + timedelta(hours=1)).isoformat()}
    assert check(s) == []
    s.provenance = {"now": NOW.isoformat()}
    s.update("batch", started_at=None)
    report = report_of(s)
    assert report.valid
    assert report.skipped == (Skipped("min-runtime", "for 1 stopped replica(s) without started_at"),)


def test_young_replica_is_not_preempted_or_drained_either() -> None:
    s = Scenario()
    _preempt_preemptible(s)
    _drain_in_its_own_round(s)
    s.budget(max_moves_per_round=1, max_preemptions_per_round=1, min_runtime_s=7200)
    found = check(s)
    assert {(v.rule, v.subject) for v in found} == {
        ("min-runtime", "workload scav replica 0"),
        ("min-runtime", "workload infer replica 0"),
        ("min-runtime", "workload batch replica 0"),
    }
    assert {v.message.split(" replica")[0] for v in found} == {
        "The plan preempts",
        "The plan drains",
        "The plan moves",
    }


def test_implied_workloads_skip_what_only_the_demand_says() -> None:
    s = Scenario()
    s.policy = Policy(
        teams=("ml", "ds", "web", "ops"),
        isolation=(IsolationRule(kind="team-exclusive", team="ml", pool="h100"),),
        quotas=(Quota(team="ml", gpus=1),),
    )
    inp, p = s.build()
    implied = implied_workloads(p, inp.policy)
    assert {(w.id, w.replicas, w.team) for w in implied} >= {("infer", 2, "ml"), ("pending", 1, "ml")}
    report = check_plan(p, inp.model_copy(update={"workloads": implied}), CATALOG, workloads_implied=True)
    assert report.valid  # the team-exclusive rule would otherwise see every workload as an intruder
    assert [k.family for k in report.skipped] == [
        "shapes",
        "starts",
        "gpu-models",
        "gangs",
        "topology",
        "scheduling",
        "isolation",
        "quotas",
        "disruption",
        "min-runtime",
    ]
    assert {k.reason for k in report.skipped} == {"without the workloads"}
    # What the cluster and the plan say is still checked.
    # The plan's alternative numbers say nothing about how many alternatives the demand has.
    second = (assign("alt", 0, "l40s-01", frac(1, 250), alt=1),)
    with_alt = p.model_copy(update={"assignments": (*p.assignments, *second)})
    rebuilt = inp.model_copy(update={"workloads": implied_workloads(with_alt, inp.policy)})
    assert check_plan(with_alt, rebuilt, CATALOG, workloads_implied=True).valid
    assert ("unknown-ref", "workload alt replica 0") in {
        (v.rule, v.subject) for v in check_plan(with_alt, rebuilt, CATALOG).violations
    }
    extra = (assign("lost", 0, "nowhere"), assign("hog", 0, "l40s-01", whole(0)))
    broken = p.model_copy(update={"assignments": (*p.assignments, *extra)})
    rebuilt = inp.model_copy(update={"workloads": implied_workloads(broken, inp.policy)})
    found = check_plan(broken, rebuilt, CATALOG, workloads_implied=True).violations
    assert {(v.rule, v.subject) for v in found} == {
        ("unknown-ref", "workload lost replica 0"),
        ("whole-exclusive", "node l40s-01 gpu 0"),
    }


def test_implied_workload_without_id_names_the_plan_field() -> None:
    p = plan([assign("a", 0, "n"), assign("", 0, "n")], [wait("b", 0)])
    with pytest.raises(ImpliedWorkloadError) as caught:
        implied_workloads(p)
    assert caught.value.loc == ("assignments", 1, "workload")
    assert str(caught.value).startswith("plan assignments[1].workload: ")


def test_huge_replica_counts_cost_only_the_listed_replicas() -> None:
    s = Scenario()
    s.add(Workload(id="many", replicas=10**12, cpu_milli=1), assign("many", 3, "l40s-01", cpu=1))
    s.unplaced.append(("many", 0))
    found = [v for v in check(s) if v.rule == "replica-missing"]
    assert [v.subject for v in found[:MISSING_NAMED]] == [
        f"workload many replica {r}" for r in (1, 2, 4, 5, 6, 7, 8, 9, 10, 11)
    ]
    assert len(found) == MISSING_NAMED + 1 and found[-1].subject == "workload many"
    assert found[-1].message.startswith("999999999988 more of the 1000000000000 replicas")


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
    s.policy = Policy(mig=MigPolicy(allow_repartition=True))
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


# NVIDIA's MIG rules, read straight from the catalog's source file rather than through gpuplan's models.
MIG_MODELS: dict[str, dict[str, Any]] = {
    m["model"]: m for m in json.loads((data_dir() / "hardware" / "mig_profiles.json").read_text())["models"]
}


def reference_layout_problems(model: str, pairs: Sequence[tuple[str, int]]) -> set[str]:
    """What is wrong with a MIG layout by NVIDIA's rules: ``start`` (no placement of the profile starts
    there), ``overlap`` (two instances share a memory slice), ``max-instances`` (more instances of a
    profile, or in all, than the GPU allows) and ``compute`` (more compute slices than the GPU has).
    Instances at an invalid start are left out of the other rules."""
    spec = MIG_MODELS[model]
    profiles = {p["name"]: p for p in spec["profiles"]}
    problems: set[str] = set()
    occupied: set[int] = set()
    counts: Counter[str] = Counter()
    compute = 0
    for name, start in pairs:
        sizes = {pl["start"]: pl["size"] for pl in profiles[name]["placements"]}
        if start not in sizes:
            problems.add("start")
            continue
        span = set(range(start, start + sizes[start]))
        if span & occupied:
            problems.add("overlap")
        occupied |= span
        counts[name] += 1
        compute += profiles[name]["compute_slices"]
    if any(n > profiles[name]["max_instances"] for name, n in counts.items()):
        problems.add("max-instances")
    if len(pairs) > spec["max_gpu_instances"]:
        problems.add("max-instances")
    if compute > spec["compute_slices"]:
        problems.add("compute")
    return problems


@st.composite
def mig_layouts(draw: st.DrawFn) -> tuple[str, list[tuple[str, int]]]:
    """A GPU model and up to eight instances of its profiles at any start, valid or not, biased
    towards valid starts."""
    model = draw(st.sampled_from(sorted(MIG_MODELS)))
    spec = MIG_MODELS[model]
    valid = [(p["name"], pl["start"]) for p in spec["profiles"] for pl in p["placements"]]
    anywhere = [(p["name"], i) for p in spec["profiles"] for i in range(spec["memory_slices"] + 1)]
    pair = st.one_of(st.sampled_from(valid), st.sampled_from(anywhere))
    return model, draw(st.lists(pair, max_size=8))


@settings(max_examples=300, deadline=None)
@given(mig_layouts())
def test_layout_verdict_follows_nvidia_rules(drawn: tuple[str, list[tuple[str, int]]]) -> None:
    model, pairs = drawn
    s = Scenario()
    s.nodes.append(node("lab", gpus=[{"index": 0, "model": model, "numa": 0, "mig": {"instances": []}}]))
    s.layouts.append(layout("lab", 0, *pairs))
    expected = reference_layout_problems(model, pairs)
    rules = {v.rule for v in check(s)}
    if not expected:
        assert rules == set()
    elif "start" in expected:
        assert rules & {"mig-start", "mig-bounds"}
        assert rules <= {"mig-start", "mig-bounds", "mig-overlap", "mig-max-instances", "mig-compute"}
    else:
        assert rules == {f"mig-{p}" for p in expected}


def test_reference_layout_rules_on_known_layouts() -> None:
    # The reference itself, on layouts whose verdict NVIDIA's MIG user guide states.
    assert reference_layout_problems("H100-80GB", [("4g.40gb", 0), ("3g.40gb", 4)]) == set()
    assert reference_layout_problems("H100-80GB", [("1g.10gb", i) for i in range(7)]) == set()
    assert reference_layout_problems("H100-80GB", [("3g.40gb", 2)]) == {"start"}
    assert reference_layout_problems("H100-80GB", [("7g.80gb", 0), ("1g.10gb", 0)]) == {"overlap", "compute"}
    assert reference_layout_problems("A30-24GB", [("1g.6gb+me", 0), ("1g.6gb+me", 1)]) == {"max-instances"}


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
    cluster_layouts: list[tuple[str, int, tuple[MigInstance, ...]]] = field(default_factory=list)
    running: list[Workload] = field(default_factory=list)
    policy: Policy = field(default_factory=Policy)
    actions: list[Action] = field(default_factory=list)

    def build(self) -> tuple[PlanningInput, Plan]:
        """The planning input and the plan (planned at ``NOW``)."""
        inp = planning_input(self.nodes, self.workloads, self.policy)
        base = plan(self.assignments, [wait(w, r) for w, r in self.unplaced], self.layouts)
        actions = (
            *self.actions,
            *layout_actions(self.nodes, self.layouts),
            *start_actions(self.workloads, self.assignments),
        )
        update = {"actions": actions, "provenance": {"now": NOW.isoformat()}}
        return inp, base.model_copy(update=update)


def _random_layout(rng: random.Random, model: str) -> tuple[MigInstance, ...]:
    """A random valid MIG layout, grown greedily in random order."""
    spec = CATALOG.model(model)
    candidates = [MigInstance(profile=p.name, start=s) for p in spec.profiles for s in sorted(p.starts)]
    rng.shuffle(candidates)
    chosen: tuple[MigInstance, ...] = ()
    for inst in candidates[: rng.randint(1, len(candidates))]:
        if not reference_layout_problems(model, [(i.profile, i.start) for i in (*chosen, inst)]):
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


def _random_policy(rng: random.Random, creates: bool) -> Policy:
    """A random disruption budget and MIG policy (creating instances allowed when the plan does)."""
    budget = DisruptionBudget(
        max_moves_per_round=rng.randint(0, 3),
        max_preemptions_per_round=rng.randint(0, 2),
        max_moves_per_team=rng.choice([None, 1, 2]),
        min_runtime_s=rng.choice([0, 600, 3600]),
        preempt_latency_sensitive=rng.random() < 0.5,
    )
    mig_policy = MigPolicy(allow_create=creates or rng.random() < 0.5, allow_repartition=rng.random() < 0.5)
    return Policy(disruption=budget, mig=mig_policy)


def generate(rng: random.Random) -> Generated:
    """A random small cluster and a valid plan of whole, fractional, MIG and CPU-only replicas; some
    replicas already run where the plan keeps them (some preemptible, some with a start time), under a
    random disruption budget and MIG policy."""
    g = Generated(nodes=[], workloads=[], assignments=[], unplaced=[], layouts=[])
    counter = itertools.count()

    def add(shape: dict[str, object], node_name: str, uses: tuple[GpuUse, ...], cpu: int) -> None:
        wid = f"w{next(counter)}"
        team, tier = rng.choice(["ml", "ds"]), rng.choice(["standard", "background", "latency-sensitive"])
        replicas = rng.choice([1, 1, 2])
        state: dict[str, object] = {"preemptible": rng.random() < 0.5}
        if rng.random() < 0.4:
            state["running_on"] = [
                {"node": node_name, "gpus": [u.model_dump(exclude_none=True) for u in uses]}
            ]
            if rng.random() < 0.7:
                state["started_at"] = NOW - timedelta(seconds=rng.randint(0, 7200))
        w = Workload.model_validate(
            {"id": wid, "team": team, "tier": tier, "replicas": replicas, "cpu_milli": cpu, **shape, **state}
        )
        g.workloads.append(w)
        if w.running_on:
            g.running.append(w)
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
                    g.cluster_layouts.append((raw.name, gpu.index, insts))
                else:  # MIG mode on with no instance: the plan creates them all
                    overrides.append({"index": gpu.index, "mig": {"instances": []}})
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
    g.policy = _random_policy(rng, creates=bool(g.layouts))
    return g


def _intrude(
    g: Generated, shape: dict[str, object], node_name: str, uses: tuple[GpuUse, ...], cpu: int = 0
) -> None:
    g.workloads.append(Workload.model_validate({"id": "intruder", "cpu_milli": cpu, **shape}))
    g.assignments.append(assign("intruder", 0, node_name, uses, cpu=cpu))


def _model_of(g: Generated, node_name: str, index: int) -> GpuModelSpec:
    found = next(n for n in g.nodes if n.name == node_name)
    return CATALOG.model(found.gpu_by_index[index].model)


def _stop(g: Generated, w: Workload, *, scheduled: bool = True) -> None:
    """Preempt replica 0 of running ``w`` (with its action unless ``scheduled`` is false)."""
    g.assignments = [a for a in g.assignments if (a.workload, a.replica) != (w.id, 0)]
    g.unplaced.append((w.id, 0))
    if scheduled:
        g.actions.append(Action(kind=PREEMPT, workload=w.id, replica=0))


def _budget(g: Generated, **fields: Any) -> None:
    g.policy = g.policy.model_copy(update={"disruption": g.policy.disruption.model_copy(update=fields)})


def _protected(g: Generated) -> list[Workload]:
    """Running workloads the policy never lets anyone preempt."""
    every_tier = g.policy.disruption.preempt_latency_sensitive
    return [
        w
        for w in g.running
        if not w.preemptible or not (g.policy.tier(w.tier).may_be_preempted or every_tier)
    ]


def _mutate(g: Generated, rng: random.Random, kind: str) -> str:
    """Apply one mutation of ``kind``; return the rule it must trigger."""
    if kind == "preempt-protected":
        _budget(g, max_preemptions_per_round=1)
        _stop(g, rng.choice(_protected(g)))
        return "preempt-forbidden"
    if kind == "stop-unscheduled":
        _stop(g, rng.choice(g.running), scheduled=False)
        return "disruption-unscheduled"
    if kind == "preempt-over-budget":
        _budget(g, max_preemptions_per_round=0)
        _stop(g, rng.choice(g.running))
        return "disruption-budget"
    if kind == "young-preempt":
        w = rng.choice([w for w in g.running if w.started_at is not None])
        assert w.started_at is not None
        _budget(g, min_runtime_s=(NOW - w.started_at).total_seconds() + rng.randint(1, 600))
        _stop(g, w)
        return "min-runtime"
    if kind == "mig-create":
        g.policy = g.policy.model_copy(update={"mig": MigPolicy(allow_create=False)})
        return "mig-create-forbidden"
    if kind == "mig-repartition":
        n, i, insts = rng.choice([c for c in g.cluster_layouts if c[2]])
        g.layouts.append(MigLayout(node=n, gpu=i, instances=insts[1:]))
        g.policy = g.policy.model_copy(update={"mig": MigPolicy(allow_repartition=False)})
        return "mig-repartition-forbidden"
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
    if g.running:
        kinds += ["stop-unscheduled", "preempt-over-budget"]
    if _protected(g):
        kinds.append("preempt-protected")
    if any(w.started_at is not None for w in g.running):
        kinds.append("young-preempt")
    if g.layouts:
        kinds.append("mig-create")
    if any(insts for _, _, insts in g.cluster_layouts):
        kinds.append("mig-repartition")
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

"""Independent plan validation: every rule a plan must obey, checked without any solver code.

This module deliberately imports nothing from ``solvers/`` or the planner's pipeline (``compile``,
``actions``): it re-derives every rule from the schema objects in ``models/``, so that it can check any
solver's output. :func:`check_plan` also says which rule families it could not check (for instance when the
workloads are rebuilt from the plan itself by :func:`implied_workloads`).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction

import networkx as nx
from pydantic import ValidationError

from gpuplan.models.base import InputError
from gpuplan.models.catalog import default_catalog
from gpuplan.models.cluster import (
    Gpu,
    MigInstance,
    Node,
    TimeSliced,
    describe_sharing,
    mig_layout_problems,
)
from gpuplan.models.gpu_rules import (
    GPU_MEMORY,
    GPU_OVERCOMMIT,
    MIG_LAYOUT,
    MIG_MIXED,
    MIG_PROFILE,
    MIG_SHARED,
    MIG_START,
    SHARING_MODE,
    SHARING_REPLICAS,
    WHOLE_EXCLUSIVE,
    Breach,
    GpuState,
    GpuUser,
    gpu_breaches,
)
from gpuplan.models.hardware import MILLI_PER_GPU, GpuModelSpec, HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import (
    CREATE,
    DESTROY,
    DRAIN,
    MIGRATE,
    PREEMPT,
    SET_MIG_MODE,
    Assignment,
    GpuUse,
    Plan,
)
from gpuplan.models.policy import IsolationKind, IsolationRule, Policy, Quota
from gpuplan.models.topology import link_graph
from gpuplan.models.workload import STANDARD, GpuRef, Placement, Shape, TopologyNeed, Workload

log = logging.getLogger(__name__)

#: Milli-GPU of one whole GPU.
FULL_MILLI = MILLI_PER_GPU

#: Missing replicas of one workload named one by one; more are counted in one violation, so that a
#: demand or plan claiming millions of replicas costs no more than the replicas it lists. Also the most
#: replicas a whole-plan budget violation names.
MISSING_NAMED = 10

#: Rule families that only the workloads file feeds (shapes, allowed GPU models, topology, gangs and
#: running work): with workloads rebuilt from the plan they would pass vacuously.
WORKLOAD_FAMILIES = ("shapes", "gpu-models", "gangs", "topology", "disruption", "min-runtime")
#: Why those families are skipped (a phrase that follows "not checked").
WITHOUT_WORKLOADS = "without the workloads"

#: Provenance key of the rounds a plan was made for (``gpuplan replan --rounds``): the plan as a whole
#: may move and preempt that many rounds' worth of the budget.
ROUNDS_KEY = "replan_rounds"
#: Rule family of the checks that read the plan's actions for its MIG layout changes; skipped for a
#: trial plan whose actions are not derived yet.
ACTIONS_FAMILY = "actions"
#: Why that family is skipped.
WITHOUT_ACTIONS = "before the plan's actions are derived"

GpuKey = tuple[str, int]

#: The per-GPU breaches reported after the use rules: sharing mode, then GPU memory.
_BREACH_FAMILY = {SHARING_MODE: "sharing", SHARING_REPLICAS: "sharing", GPU_MEMORY: "memory"}

#: Rules that a current state may already break (fleets drift: quotas change, isolation rules and
#: node topologies are added after work started). A plan keeps such a violation, without breaking the
#: rule itself, when every replica it concerns is a running replica that stays exactly where it runs.
KEPT_RULES = ("quota", "isolation", "topology-nvlink", "topology-numa")


@dataclass(frozen=True)
class Violation:
    """One broken rule.

    Attributes
    ----------
    rule
        A short stable code such as ``gpu-overcommit`` or ``mig-start``.
    subject
        The ids concerned, e.g. ``node dgx-01 gpu 3`` or ``workload llm-a replica 0``.
    message
        A full sentence saying what is wrong.
    """

    rule: str
    subject: str
    message: str


@dataclass(frozen=True)
class Skipped:
    """A rule family the validator could not check.

    Attributes
    ----------
    family
        A short stable code: ``shapes``, ``gpu-models``, ``gangs``, ``topology``, ``isolation``,
        ``quotas``, ``disruption``, ``min-runtime`` or ``actions``.
    reason
        Why, as a phrase that follows "not checked", e.g. ``without the workloads``.
    """

    family: str
    reason: str


@dataclass(frozen=True)
class Report:
    """The validator's verdict: every broken rule, the rule families it could not check, and the
    rules the current state already broke and the plan keeps broken (:data:`KEPT_RULES`; not
    violations: see :meth:`_Checker._kept`)."""

    violations: tuple[Violation, ...]
    skipped: tuple[Skipped, ...] = ()
    kept: tuple[Violation, ...] = ()

    @property
    def valid(self) -> bool:
        """Whether no checked rule is broken."""
        return not self.violations


def replica_subject(workload: str, replica: int) -> str:
    """Subject naming one replica."""
    return f"workload {workload} replica {replica}"


def gpu_subject(node: str, gpu: int) -> str:
    """Subject naming one GPU."""
    return f"node {node} gpu {gpu}"


def describe_use(use: GpuUse | GpuRef) -> str:
    """A GPU entry in words: ``whole GPU 0``, ``470 milli of GPU 1`` or ``MIG 3g.40gb@0 on GPU 2``."""
    if use.mig_profile is not None:
        return f"MIG {use.mig_profile}@{use.mig_start} on GPU {use.index}"
    if use.milli is not None:
        return f"{use.milli} milli of GPU {use.index}"
    return f"whole GPU {use.index}"


def _describe_uses(uses: Sequence[GpuUse | GpuRef]) -> str:
    return ", ".join(describe_use(u) for u in uses) if uses else "no GPU"


def _where(node: str, uses: Sequence[GpuUse | GpuRef]) -> str:
    """``node 'dgx-01' (whole GPU 0, whole GPU 1)``."""
    return f"node '{node}' ({_describe_uses(uses)})"


def _instances(pairs: Iterable[tuple[str, int]]) -> str:
    """``1g.10gb@0, 1g.10gb@2``, by start."""
    return ", ".join(f"{p}@{s}" for p, s in sorted(pairs, key=lambda x: (x[1], x[0])))


def _plan_time(plan: Plan) -> datetime | None:
    """The plan's time, ``provenance['now']`` (ISO-8601; UTC when it names no zone), or ``None``."""
    stamp = plan.provenance.get("now")
    if isinstance(stamp, str):
        try:
            stamp = datetime.fromisoformat(stamp)
        except ValueError:
            return None
    if not isinstance(stamp, datetime):
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


def _describe_shape(shape: Shape) -> str:
    if shape.kind == "whole":
        return f"{shape.gpus} whole GPU(s)"
    if shape.kind == "fraction":
        return f"{shape.share_milli} milli of one GPU"
    if shape.kind == "mig":
        return f"one MIG {shape.mig_profile} instance"
    return "no GPU"


def _shape_fits(shape: Shape, uses: Sequence[GpuUse]) -> bool:
    """Whether the GPU entries of an assignment are exactly what ``shape`` asks for."""
    if shape.kind == "whole":
        return (
            len(uses) == shape.gpus
            and all(u.kind == "whole" for u in uses)
            and len({u.index for u in uses}) == len(uses)
        )
    if shape.kind == "fraction":
        return len(uses) == 1 and uses[0].kind == "fraction" and uses[0].milli == shape.share_milli
    if shape.kind == "mig":
        return (
            len(uses) == 1
            and uses[0].mig_profile == shape.mig_profile
            and uses[0].milli is None
            and uses[0].mig_start is not None
        )
    return not uses


def _limit(value: float) -> Fraction:
    """A quota as an exact fraction of its decimal form (0.3 means 3/10, not the nearest float)."""
    return Fraction(repr(value))


@dataclass(frozen=True)
class _Placed:
    """An assignment whose workload, replica and node exist."""

    assignment: Assignment
    workload: Workload
    node: Node
    shape: Shape | None
    uses: tuple[tuple[GpuUse, Gpu], ...]

    @property
    def subject(self) -> str:
        return replica_subject(self.workload.id, self.assignment.replica)


@dataclass(frozen=True)
class _Stopped:
    """A running replica that the plan stops: moved, preempted, or drained in place (``how``: the
    kind of action it needs, ``MIGRATE``, ``PREEMPT`` or ``DRAIN``)."""

    workload: Workload
    replica: int
    place: Placement
    target: Assignment | None
    how: str
    scheduled: bool

    @property
    def subject(self) -> str:
        return replica_subject(self.workload.id, self.replica)

    @property
    def what(self) -> str:
        """``replica 0 of workload 'llm-a'``."""
        return f"replica {self.replica} of workload '{self.workload.id}'"

    @property
    def verb(self) -> str:
        """What the plan does to it: ``moves``, ``preempts`` or ``drains``."""
        return {MIGRATE: "moves", PREEMPT: "preempts"}.get(self.how, "drains")


@dataclass
class _Checker:
    """Runs every rule family once over indexes built in a single pass."""

    plan: Plan
    inp: PlanningInput
    catalog: HardwareCatalog
    skip: dict[str, str] = field(default_factory=dict)
    out: list[Violation] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    placed: list[_Placed] = field(default_factory=list)
    loads: dict[GpuKey, list[tuple[_Placed, GpuUse]]] = field(default_factory=dict)
    layouts: dict[GpuKey, tuple[MigInstance, ...]] = field(default_factory=dict)
    #: MIG modes the plan changes (``True``: on), read once from its ``mig_modes``.
    modes: dict[GpuKey, bool] = field(default_factory=dict)
    graphs: dict[tuple[object, ...], nx.Graph] = field(default_factory=dict)
    node_graphs: dict[str, nx.Graph] = field(default_factory=dict)
    canon: dict[str, str] = field(default_factory=dict)
    unknown_models: set[str] = field(default_factory=set)
    kept: list[Violation] = field(default_factory=list)

    def run(self) -> list[Violation]:
        """All violations, grouped by rule family in a fixed order (families in ``skip`` are recorded
        in ``skipped`` instead of being checked)."""
        self._references()
        self._replicas()
        if self._checks("shapes"):
            self._shapes()
        self._mig_mode_changes()
        self._layouts()
        self._mig_mode()
        self._mig_policy()
        actions = self._checks(ACTIONS_FAMILY)
        if actions:
            self._mig_actions()
            self._mig_mode_actions()
        self._gpus()
        self._sharing_changes()
        if self._checks("gpu-models"):
            self._gpu_models()
        self._node_capacity()
        if self._checks("gangs"):
            self._gangs()
        if self._checks("topology"):
            self._topology()
        if self._checks("isolation"):
            self._isolation()
        if self._checks("quotas"):
            self._quotas()
        disruption, min_runtime = self._checks("disruption"), self._checks("min-runtime")
        if disruption or min_runtime:
            stopped = self._stopped()
            if disruption:
                self._disruption(stopped, actions)
                self._disruption_total(stopped)
                self._disruption_budget()
            if min_runtime:
                self._min_runtime(stopped)
        return self.out

    def _checks(self, family: str) -> bool:
        """Whether ``family`` is checked; if not, it is recorded as skipped."""
        if family in self.skip:
            self.skipped.append(Skipped(family, self.skip[family]))
            return False
        return True

    def _add(self, rule: str, subject: str, message: str, *, kept: bool = False) -> None:
        """Record a violation; ``kept``: the current state already breaks the rule there and the
        plan only keeps it (:meth:`_kept`), so it is reported as staying broken instead (for the rules
        of :data:`KEPT_RULES` only)."""
        (self.kept if kept and rule in KEPT_RULES else self.out).append(Violation(rule, subject, message))

    def _stays(self, p: _Placed) -> bool:
        """Whether ``p`` is a running replica that stays where it runs (node and GPU entries, or the same
        GPUs held when its indices are a guess: :meth:`Workload.stays`)."""
        a = p.assignment
        return p.workload.stays(a.replica, a.node, a.gpus)

    def _kept(self, replicas: Iterable[_Placed]) -> bool:
        """Whether a broken rule (one of :data:`KEPT_RULES`) is only kept from the current state:
        every replica it concerns runs now and stays exactly where it runs, so the plan places nothing
        new, moves nothing and adds no usage where the rule is broken (it may stop some of them)."""
        return all(self._stays(p) for p in replicas)

    def _canonical(self, name: str) -> str:
        if name not in self.canon:
            self.canon[name] = self.catalog.canonical(name) if self.catalog.has_model(name) else name
        return self.canon[name]

    def _spec(self, gpu: Gpu) -> GpuModelSpec:
        return self.catalog.model(gpu.model)

    def _mig_on(self, key: GpuKey, gpu: Gpu) -> bool:
        """Whether the GPU is in MIG mode after the plan (its mode change, else the cluster's mode)."""
        return self.modes.get(key, gpu.mig is not None)

    def _effective_layout(self, key: GpuKey, gpu: Gpu) -> tuple[MigInstance, ...] | None:
        """The plan's layout for the GPU, else the one its mode leaves: none (``None``: MIG disabled),
        no instance after MIG is turned on, else the cluster's current one."""
        if key in self.layouts:
            return self.layouts[key]
        if not self._mig_on(key, gpu):
            return None
        return () if gpu.mig is None else gpu.mig.instances

    def _references(self) -> None:
        """Rule 1: assignments and waits name existing workloads, replicas, nodes, GPUs, shapes."""
        workloads = self.inp.workload_by_id
        nodes = self.inp.cluster.node_by_name
        models = {g.model for n in self.inp.cluster.nodes for g in n.gpus}
        self.unknown_models = {m for m in models if not self.catalog.has_model(m)}
        for a in self.plan.assignments:
            subject = replica_subject(a.workload, a.replica)
            w = workloads.get(a.workload)
            if w is None:
                self._add(
                    "unknown-ref",
                    subject,
                    f"The plan places workload '{a.workload}', which is not in the input.",
                )
                continue
            if a.replica >= w.replicas:
                self._add(
                    "unknown-ref",
                    subject,
                    f"Workload '{w.id}' has {w.replicas} replica(s), so replica {a.replica} does not exist.",
                )
                continue
            node = nodes.get(a.node)
            if node is None:
                self._add(
                    "unknown-ref",
                    subject,
                    f"The replica is placed on node '{a.node}', which is not in the cluster.",
                )
                continue
            shape: Shape | None = None
            if a.alternative < len(w.shapes):
                shape = w.shapes[a.alternative]
            elif "shapes" not in self.skip:  # only the demand knows how many alternatives there are
                self._add(
                    "unknown-ref",
                    subject,
                    f"The replica uses alternative {a.alternative} but workload '{w.id}' has only "
                    f"{len(w.shapes)} shape(s).",
                )
            uses: list[tuple[GpuUse, Gpu]] = []
            for u in a.gpus:
                gpu = node.gpu_by_index.get(u.index)
                if gpu is None:
                    self._add(
                        "unknown-ref",
                        subject,
                        f"The replica uses GPU {u.index} of node '{node.name}', which has no such GPU.",
                    )
                elif gpu.model in self.unknown_models:
                    self._add(
                        "unknown-ref",
                        subject,
                        f"GPU {u.index} of node '{node.name}' is a '{gpu.model}', "
                        "which the hardware catalog does not know.",
                    )
                else:
                    uses.append((u, gpu))
            self.placed.append(_Placed(a, w, node, shape, tuple(uses)))
        for wait in self.plan.unplaced:
            subject = replica_subject(wait.workload, wait.replica)
            w = workloads.get(wait.workload)
            if w is None:
                self._add(
                    "unknown-ref",
                    subject,
                    f"The plan leaves workload '{wait.workload}' waiting, but it is not in the input.",
                )
            elif wait.replica >= w.replicas:
                self._add(
                    "unknown-ref",
                    subject,
                    f"Workload '{w.id}' has {w.replicas} replica(s), "
                    f"so waiting replica {wait.replica} does not exist.",
                )

    def _replicas(self) -> None:
        """Rule 2: every replica is placed or waits, exactly once (in steps proportional to the
        replicas the plan lists, however many the workload claims)."""
        placed = Counter((a.workload, a.replica) for a in self.plan.assignments)
        waiting = Counter((u.workload, u.replica) for u in self.plan.unplaced)
        listed: defaultdict[str, set[int]] = defaultdict(set)
        for wid, r in itertools.chain(placed, waiting):
            listed[wid].add(r)
        for w in self.inp.workloads:
            seen = {r for r in listed[w.id] if r < w.replicas}
            for r in sorted(seen):
                n_placed, n_waiting = placed[(w.id, r)], waiting[(w.id, r)]
                if n_placed + n_waiting > 1:
                    self._add(
                        "replica-duplicate",
                        replica_subject(w.id, r),
                        f"Replica {r} of workload '{w.id}' appears {n_placed} time(s) in assignments and "
                        f"{n_waiting} time(s) in unplaced; it must appear exactly once.",
                    )
            missing = w.replicas - len(seen)
            named = 0
            r = 0
            while named < min(missing, MISSING_NAMED):
                if r not in seen:
                    self._add(
                        "replica-missing",
                        replica_subject(w.id, r),
                        f"Replica {r} of workload '{w.id}' is neither placed nor listed as unplaced.",
                    )
                    named += 1
                r += 1
            if missing > named:
                self._add(
                    "replica-missing",
                    f"workload {w.id}",
                    f"{missing - named} more of the {w.replicas} replicas of workload '{w.id}' are "
                    "neither placed nor listed as unplaced.",
                )

    def _shapes(self) -> None:
        """Rule 3: GPU entries, CPU and memory of an assignment match its chosen shape."""
        for p in self.placed:
            if p.shape is None:
                continue
            a = p.assignment
            if not _shape_fits(p.shape, a.gpus):
                self._add(
                    "shape-mismatch",
                    p.subject,
                    f"Alternative {a.alternative} asks for {_describe_shape(p.shape)} but the plan gives "
                    f"{_describe_uses(a.gpus)}.",
                )
            if a.gpu_memory_mib != p.shape.gpu_memory_mib:
                self._add(
                    "shape-mismatch",
                    p.subject,
                    f"The assignment holds {a.gpu_memory_mib} MiB of GPU memory per GPU but alternative "
                    f"{a.alternative} asks for {p.shape.gpu_memory_mib} MiB.",
                )
            if a.cpu_milli != p.shape.cpu_milli or a.memory_mib != p.shape.memory_mib:
                self._add(
                    "shape-mismatch",
                    p.subject,
                    f"The assignment reserves {a.cpu_milli} milli-CPU and {a.memory_mib} MiB but alternative "
                    f"{a.alternative} asks for {p.shape.cpu_milli} milli-CPU and {p.shape.memory_mib} MiB.",
                )

    def _layouts(self) -> None:
        """Rule 5: the plan's MIG layouts name existing MIG-capable GPUs and are valid for their model."""
        nodes = self.inp.cluster.node_by_name
        for lay in self.plan.mig_layouts:
            key = (lay.node, lay.gpu)
            subject = gpu_subject(*key)
            node = nodes.get(lay.node)
            gpu = None if node is None else node.gpu_by_index.get(lay.gpu)
            if gpu is None or gpu.model in self.unknown_models:
                self._add(
                    "unknown-ref",
                    subject,
                    f"The plan sets a MIG layout for GPU {lay.gpu} of node '{lay.node}', "
                    "which does not exist.",
                )
                continue
            if key in self.layouts:
                self._add(
                    "mig-layout-duplicate",
                    subject,
                    "The plan sets the MIG layout of this GPU more than once.",
                )
                continue
            spec = self._spec(gpu)
            if not spec.mig_capable:
                self._add(
                    "gpu-model",
                    subject,
                    f"The plan sets a MIG layout on a {spec.name}, which does not support MIG.",
                )
                continue
            self.layouts[key] = lay.instances
            self._check_layout(subject, spec, lay.instances)

    def _check_layout(self, subject: str, spec: GpuModelSpec, instances: tuple[MigInstance, ...]) -> None:
        """Valid starts, inside the GPU, no shared memory slice, compute and instance limits."""
        for rule, message in mig_layout_problems(spec, instances):
            self._add(rule, subject, f"The MIG layout is invalid: {message}")

    def _mig_mode(self) -> None:
        """Rule 5b: no MIG layout on a GPU whose MIG mode is off after the plan (off in the cluster and
        not turned on by the plan's ``mig_modes``, or turned off by them)."""
        nodes = self.inp.cluster.node_by_name
        for node, index in self.layouts:
            gpu = nodes[node].gpu_by_index[index]
            if self._mig_on((node, index), gpu):
                continue
            why = (
                "which the plan turns MIG mode off on"
                if (node, index) in self.modes
                else "whose MIG mode is off in the cluster and which the plan does not turn on"
            )
            self._add(
                "mig-mode",
                gpu_subject(node, index),
                f"The plan sets a MIG layout on GPU {index} of node '{node}', {why}.",
            )

    def _mig_mode_changes(self) -> None:
        """Rule 5c: a plan changes the MIG mode of existing MIG-capable GPUs only, once each, only when the
        policy allows re-partitioning (``mig.allow_repartition``), and only of a GPU the plan drains: every
        replica running on it is moved or preempted (those count in the disruption budget as moves and
        preemptions). Turning MIG on needs ``mig.allow_create`` for the instances it then creates (rule
        12)."""
        nodes = self.inp.cluster.node_by_name
        changed: dict[GpuKey, bool] = {}
        for m in self.plan.mig_modes:
            key = (m.node, m.gpu)
            subject = gpu_subject(*key)
            node = nodes.get(m.node)
            gpu = None if node is None else node.gpu_by_index.get(m.gpu)
            if gpu is None or gpu.model in self.unknown_models:
                self._add(
                    "unknown-ref",
                    subject,
                    f"The plan changes the MIG mode of GPU {m.gpu} of node '{m.node}', which does not exist.",
                )
                continue
            if key in self.modes:
                self._add(
                    "mig-mode-change", subject, "The plan changes the MIG mode of this GPU more than once."
                )
                continue
            self.modes[key] = m.enabled
            if m.enabled == (gpu.mig is not None):
                continue
            what = f"The plan turns MIG mode {'on' if m.enabled else 'off'} on GPU {m.gpu} of node '{m.node}'"
            if not self._spec(gpu).mig_capable:
                self._add("gpu-model", subject, f"{what}, a {gpu.model}, which does not support MIG.")
                continue
            changed[key] = m.enabled
            if not self.inp.policy.mig.allow_repartition:
                self._add(
                    "mig-mode-change",
                    subject,
                    f"{what}, but the policy does not allow re-partitioning "
                    "(mig.allow_repartition is false).",
                )
        if not changed:
            return
        target = {(a.workload, a.replica): a for a in self.plan.assignments}
        for w in self.inp.workloads:
            for r, place in enumerate(w.running_on):
                held = [g for g in place.gpus if (place.node, g.index) in changed]
                a = target.get((w.id, r))
                if held and a is not None and w.stays(r, a.node, a.gpus):
                    self._add(
                        "mig-mode-change",
                        gpu_subject(place.node, held[0].index),
                        f"The plan changes the MIG mode of GPU {held[0].index} of node '{place.node}', but "
                        f"{replica_subject(w.id, r)} keeps running on {_describe_uses(held)} there: the GPU "
                        "must be drained first.",
                    )

    def _mig_mode_actions(self) -> None:
        """Rule 12c: every MIG mode change has its ``set-mig-mode`` action."""
        nodes = self.inp.cluster.node_by_name
        done = {(a.node, a.gpu, a.to) for a in self.plan.actions if a.kind == SET_MIG_MODE}
        for (node, index), enabled in self.modes.items():
            if enabled == (nodes[node].gpu_by_index[index].mig is not None):
                continue
            if (node, index, "on" if enabled else "off") not in done:
                self._add(
                    "mig-unscheduled",
                    gpu_subject(node, index),
                    f"The plan turns MIG mode {'on' if enabled else 'off'} on GPU {index} of node '{node}' "
                    "but has no set-mig-mode action for it.",
                )

    def _mig_policy(self) -> None:
        """Rule 12: MIG changes the policy allows: an instance the cluster lacks only with
        ``mig.allow_create``, an existing instance removed only with ``mig.allow_repartition``."""
        mig = self.inp.policy.mig
        if mig.allow_create and mig.allow_repartition:
            return
        nodes = self.inp.cluster.node_by_name
        for (node, index), layout in self.layouts.items():
            gpu = nodes[node].gpu_by_index[index]
            current = {(i.profile, i.start) for i in (gpu.mig.instances if gpu.mig else ())}
            target = {(i.profile, i.start) for i in layout}
            created, destroyed = target - current, current - target
            where = f"GPU {index} of node '{node}'"
            if created and not mig.allow_create:
                self._add(
                    "mig-create-forbidden",
                    gpu_subject(node, index),
                    f"The plan creates MIG instance(s) {_instances(created)} on {where}, but the policy "
                    "does not allow creating instances (mig.allow_create is false).",
                )
            if destroyed and not mig.allow_repartition:
                instead = f" to make {_instances(created)}" if created else ""
                self._add(
                    "mig-repartition-forbidden",
                    gpu_subject(node, index),
                    f"The plan destroys MIG instance(s) {_instances(destroyed)} of {where}{instead}, but "
                    "the policy does not allow re-partitioning (mig.allow_repartition is false).",
                )

    def _mig_actions(self) -> None:
        """Rule 12b: every MIG instance the plan's layouts create or destroy has its ``create-mig`` or
        ``destroy-mig`` action (a layout change is applied through its actions, like a move)."""
        nodes = self.inp.cluster.node_by_name
        done = {(a.kind, a.node, a.gpu, a.detail) for a in self.plan.actions if a.kind in (CREATE, DESTROY)}
        for (node, index), layout in self.layouts.items():
            gpu = nodes[node].gpu_by_index[index]
            current = {(i.profile, i.start) for i in (gpu.mig.instances if gpu.mig else ())}
            target = {(i.profile, i.start) for i in layout}
            missing = [
                f"{kind} {prof}@{start}"
                for kind, pairs in ((DESTROY, current - target), (CREATE, target - current))
                for prof, start in sorted(pairs, key=lambda x: (x[1], x[0]))
                if (kind, node, index, f"{prof}@{start}") not in done
            ]
            if missing:
                self._add(
                    "mig-unscheduled",
                    gpu_subject(node, index),
                    f"The plan changes the MIG layout of GPU {index} of node '{node}' but has no action "
                    f"for {', '.join(missing)}.",
                )

    def _gpus(self) -> None:
        """Rules 4, 5, 14 and 15 (:mod:`gpuplan.models.gpu_rules`): per-GPU exclusivity, milli capacity,
        MIG/non-MIG mixing, MIG instance use, the sharing mode the plan leaves the node in and its
        time-sliced replicas, GPU memory. Reported family by family: use, then sharing, then memory."""
        for p in self.placed:
            for use, _ in p.uses:
                self.loads.setdefault((p.node.name, use.index), []).append((p, use))
        memory = self._checks("gpu-memory")
        changed = {m.node: m.sharing for m in self.plan.sharing}
        found: dict[str, list[tuple[GpuKey, Breach]]] = {"use": [], "sharing": [], "memory": []}
        for key, entries in self.loads.items():
            node = entries[0][0].node
            gpu = node.gpu_by_index[key[1]]
            layout = self._effective_layout(key, gpu)
            state = GpuState(
                spec=self._spec(gpu),
                mig=None if layout is None else frozenset((i.profile, i.start) for i in layout),
                sharing=changed.get(node.name, node.sharing),
            )
            users = [GpuUser(u, self._gpu_memory_ask(p)) for p, u in entries]
            for b in gpu_breaches(users, state):
                found[_BREACH_FAMILY.get(b.rule, "use")].append((key, b))
        for group in ("use", "sharing", "memory"):
            if group == "memory" and not memory:
                continue
            for key, b in found[group]:
                self._report_breach(key, b, self.loads[key])

    @staticmethod
    def _gpu_memory_ask(p: _Placed) -> int:
        """The GPU memory (MiB) the replica asks on each GPU it uses: its shape's, else the plan's."""
        return p.shape.gpu_memory_mib if p.shape is not None else p.assignment.gpu_memory_mib

    def _report_breach(self, key: GpuKey, b: Breach, entries: list[tuple[_Placed, GpuUse]]) -> None:
        """One per-GPU breach as a violation, in the validator's words."""
        node, index = key
        subject = gpu_subject(node, index)
        spec = self._spec(entries[0][0].node.gpu_by_index[index])
        who = [entries[i] for i in b.users]
        p, u = who[0]
        label = f"{u.mig_profile}@{u.mig_start}"
        if b.rule == WHOLE_EXCLUSIVE:
            first = next(q for q, v in who if v.mig_profile is None and v.milli is None)
            users = ", ".join(sorted({q.subject for q, _ in entries}))
            text = f"The GPU is given whole to {first.subject} but has {len(entries)} uses ({users})."
        elif b.rule == GPU_OVERCOMMIT:
            text = f"Fractional uses add up to {b.amount} milli-GPU, more than {b.limit}."
        elif b.rule == MIG_MIXED:
            text = (
                "The GPU mixes MIG instances with whole or fractional use."
                if any(v.mig_profile is not None for _, v in entries)
                else "The GPU is in MIG mode but is given whole or as a fraction."
            )
        elif b.rule == MIG_PROFILE:
            subject, text = (
                p.subject,
                (
                    f"The replica uses MIG profile '{u.mig_profile}' on {gpu_subject(node, index)}, a "
                    f"{spec.name}, which does not offer it."
                ),
            )
        elif b.rule == MIG_START:
            starts = sorted(spec.profile_map[u.mig_profile or ""].starts)
            subject, text = (
                p.subject,
                (
                    f"The replica uses MIG {label} on {gpu_subject(node, index)}, but '{u.mig_profile}' "
                    f"cannot start at memory slice {u.mig_start} on {spec.name} (valid starts: {starts})."
                ),
            )
        elif b.rule == MIG_LAYOUT:
            where = (
                "which has MIG disabled in both the plan and the cluster."
                if self._effective_layout(key, entries[0][0].node.gpu_by_index[index]) is None
                else "which is not an instance of that GPU's layout."
            )
            subject, text = p.subject, f"The replica uses MIG {label} on {gpu_subject(node, index)}, {where}"
        elif b.rule == MIG_SHARED:
            users = ", ".join(sorted(q.subject for q, _ in who))
            text = f"MIG instance {u.mig_profile}@{u.mig_start or 0} serves {len(who)} replicas ({users})."
        elif b.rule == SHARING_MODE:
            mode = {m.node: m.sharing for m in self.plan.sharing}.get(node, p.node.sharing)
            assert mode is not None
            text = (
                f"{p.subject} uses {describe_use(u)} of node '{node}', whose sharing mode is "
                f"{describe_sharing(mode)}."
            )
        elif b.rule == SHARING_REPLICAS:
            text = (
                f"GPU {index} of node '{node}' holds {b.amount} fractions; time-slicing offers it as "
                f"{b.limit} replicas."
            )
        elif u.milli is not None and u.mig_profile is None:
            users = ", ".join(f"{q.subject} {self._gpu_memory_ask(q)} MiB" for q, _ in who)
            text = (
                f"Fractions on node '{node}' GPU {index} ({spec.name}) hold {b.amount} MiB of GPU memory, "
                f"more than its {b.limit} MiB ({users})."
            )
        else:
            text = (
                f"Workload '{p.workload.id}' replica {p.assignment.replica} asks for {b.amount} MiB of "
                f"GPU memory but {describe_use(u)} of node '{node}' ({spec.name}) has {b.limit} MiB."
            )
        self._add(b.rule, subject, text)

    def _sharing_changes(self) -> None:
        """Rule 14b: a plan changes the sharing mode of existing nodes only, only when the policy allows
        it (``sharing.allow_change``), only between exclusive and time-slicing with the policy's
        ``sharing.replicas``, and only of a node whose non-MIG GPUs the plan drains: every replica
        running on them is moved or preempted."""
        nodes = self.inp.cluster.node_by_name
        target = {(a.workload, a.replica): a for a in self.plan.assignments}
        for change in self.plan.sharing:
            node = nodes.get(change.node)
            if node is None:
                self._add(
                    "unknown-ref",
                    f"node {change.node}",
                    f"The plan changes the sharing mode of node '{change.node}', not in the cluster.",
                )
                continue
            if change.sharing == node.sharing:
                continue
            what = f"The plan changes node '{node.name}' to {describe_sharing(change.sharing)}"
            if not self.inp.policy.sharing.allow_change:
                self._add(
                    "sharing-change",
                    f"node {node.name}",
                    f"{what}, but the policy does not allow it (sharing.allow_change is false).",
                )
            replicas = self.inp.policy.sharing.replicas
            if isinstance(change.sharing, TimeSliced) and isinstance(node.sharing, TimeSliced):
                self._add(
                    "sharing-change",
                    f"node {node.name}",
                    f"{what}, but the node is time-sliced with {node.sharing.time_slicing.replicas} "
                    "replicas already: a plan switches a node between exclusive and time-slicing, it does "
                    "not change its replicas.",
                )
            elif isinstance(change.sharing, TimeSliced) and change.sharing.time_slicing.replicas != replicas:
                self._add(
                    "sharing-change",
                    f"node {node.name}",
                    f"{what}, but a node switched to time-slicing gets the policy's {replicas} replicas "
                    "(sharing.replicas).",
                )
            plain = {g.index for g in node.gpus if g.mig is None}
            for w in self.inp.workloads:
                for r, place in enumerate(w.running_on):
                    held = [g for g in place.gpus if place.node == node.name and g.index in plain]
                    a = target.get((w.id, r))
                    stays = a is not None and w.stays(r, a.node, a.gpus)
                    if held and stays:
                        self._add(
                            "sharing-change",
                            f"node {node.name}",
                            f"{what}, but {replica_subject(w.id, r)} keeps running on "
                            f"{_describe_uses(held)} there: the node must be drained first.",
                        )

    def _gpu_models(self) -> None:
        """Rule 7: every GPU used is of a model the chosen shape allows."""
        for p in self.placed:
            if p.shape is None or not p.shape.gpu_models or not p.uses:
                continue
            allowed = {self._canonical(m) for m in p.shape.gpu_models}
            wrong = sorted(
                {
                    (u.index, self._canonical(g.model))
                    for u, g in p.uses
                    if self._canonical(g.model) not in allowed
                }
            )
            if wrong:
                used = ", ".join(f"GPU {i} ({m})" for i, m in wrong)
                self._add(
                    "gpu-model",
                    p.subject,
                    f"The replica uses {used} on node '{p.node.name}' "
                    f"but allows only {', '.join(sorted(allowed))}.",
                )

    def _node_capacity(self) -> None:
        """Rule 6: CPU and memory reserved on a node stay within its capacity."""
        cpu: Counter[str] = Counter()
        memory: Counter[str] = Counter()
        for p in self.placed:
            cpu[p.node.name] += p.assignment.cpu_milli
            memory[p.node.name] += p.assignment.memory_mib
        for node in self.inp.cluster.nodes:
            if cpu[node.name] > node.cpu_milli:
                self._add(
                    "cpu",
                    f"node {node.name}",
                    f"Assignments reserve {cpu[node.name]} milli-CPU on a node with {node.cpu_milli}.",
                )
            if memory[node.name] > node.memory_mib:
                self._add(
                    "memory",
                    f"node {node.name}",
                    f"Assignments reserve {memory[node.name]} MiB on a node with {node.memory_mib} MiB.",
                )

    def _gangs(self) -> None:
        """Rule 8: a gang is placed entirely or not at all, inside one value of its domain label."""
        members: defaultdict[str, list[Workload]] = defaultdict(list)
        for w in self.inp.workloads:
            if w.gang_id is not None:
                members[w.gang_id].append(w)
        if not members:
            return
        by_workload: defaultdict[str, list[_Placed]] = defaultdict(list)
        for p in self.placed:
            by_workload[p.workload.id].append(p)
        for gang, workloads in members.items():
            subject = f"gang {gang}"
            placed = [p for w in workloads for p in by_workload[w.id]]
            total = sum(w.replicas for w in workloads)
            n_placed = len({(p.workload.id, p.assignment.replica) for p in placed})
            if 0 < n_placed < total:
                self._add(
                    "gang",
                    subject,
                    f"Only {n_placed} of the gang's {total} replicas are placed; "
                    "a gang runs whole or not at all.",
                )
            for label in sorted({w.gang_domain for w in workloads if w.gang_domain}):
                values = {p.node.labels.get(label) for p in placed}
                if len(values) > 1:
                    shown = ", ".join(sorted("(none)" if v is None else v for v in values))
                    self._add(
                        "gang",
                        subject,
                        f"The gang's replicas are spread over several values of node label '{label}' "
                        f"({shown}).",
                    )

    def _graph(self, node: Node) -> nx.Graph:
        """The node's link graph, built once per distinct GPU/link layout (fleets repeat a few)."""
        if node.name not in self.node_graphs:
            key = (
                tuple((g.index, g.numa) for g in node.gpus),
                tuple((lk.a, lk.b, lk.kind) for lk in node.links),
            )
            if key not in self.graphs:
                self.graphs[key] = link_graph(node)
            self.node_graphs[node.name] = self.graphs[key]
        return self.node_graphs[node.name]

    def _topology(self) -> None:
        """Rule 9: NVLink replicas use a fully NVLink-connected GPU set, NUMA replicas one NUMA node
        (a running replica that stays where it runs keeps its GPUs: kept, :meth:`_kept`)."""
        for p in self.placed:
            if p.shape is None or p.shape.topology not in (TopologyNeed.NVLINK, TopologyNeed.NUMA):
                continue
            gpus = {u.index: g for u, g in p.uses}
            if len(gpus) < 2:
                continue
            if p.shape.topology is TopologyNeed.NVLINK:
                graph = self._graph(p.node)
                missing = [
                    f"{a}-{b} ({graph.edges[a, b]['kind']})"
                    for a, b in itertools.combinations(sorted(gpus), 2)
                    if not graph.edges[a, b]["nvlink"]
                ]
                if missing:
                    self._add(
                        "topology-nvlink",
                        p.subject,
                        f"The replica needs NVLink between all its GPUs on node '{p.node.name}' but pairs "
                        f"{', '.join(missing)} are not NVLink-connected.",
                        kept=self._kept([p]),
                    )
            else:
                numa = sorted({g.numa for g in gpus.values()})
                if len(numa) > 1:
                    self._add(
                        "topology-numa",
                        p.subject,
                        f"The replica needs one NUMA node but its GPUs on node '{p.node.name}' sit on NUMA "
                        f"nodes {numa}.",
                        kept=self._kept([p]),
                    )

    def _isolation(self) -> None:
        """Rule 10: team-exclusive nodes, no GPU shared across teams or across isolated tiers (kept
        when only running replicas that stay break it, :meth:`_kept`)."""
        for rule in self.inp.policy.isolation:
            if rule.kind is IsolationKind.TEAM_EXCLUSIVE:
                self._team_exclusive(rule)
            else:
                self._shared(rule)

    def _team_exclusive(self, rule: IsolationRule) -> None:
        """Nodes listed by the rule (or in its pool) host only the rule's team."""
        reserved = set(rule.nodes) | {
            n.name for n in self.inp.cluster.nodes if rule.pool and n.pool == rule.pool
        }
        intruders: defaultdict[str, list[_Placed]] = defaultdict(list)
        for p in self.placed:
            if p.node.name in reserved and p.workload.team != rule.team:
                intruders[p.node.name].append(p)
        for node in self.inp.cluster.nodes:
            if node.name in intruders:
                hosted = ", ".join(f"{p.subject} (team {p.workload.team})" for p in intruders[node.name])
                self._add(
                    "isolation",
                    f"node {node.name}",
                    f"The node is reserved for team '{rule.team}' but hosts {hosted}.",
                    kept=self._kept(intruders[node.name]),
                )

    def _shared(self, rule: IsolationRule) -> None:
        """No GPU serves two teams (or two of the rule's tiers), whether by fractions or MIG instances."""
        by_team = rule.kind is IsolationKind.NO_SHARED_GPU_ACROSS_TEAMS
        what = "teams" if by_team else "isolated tiers"
        tiers = set(rule.tiers)
        for key, entries in self.loads.items():
            if by_team:
                groups = {p.workload.team for p, _ in entries}
            else:
                groups = {p.workload.tier for p, _ in entries} & tiers
            if len(groups) > 1:
                self._add(
                    "isolation",
                    gpu_subject(*key),
                    f"The GPU is shared by {what} {', '.join(sorted(groups))}, "
                    f"which rule '{rule.kind}' forbids.",
                    kept=self._kept(p for p, _ in entries),
                )

    def _equivalents(self, use: GpuUse, gpu: Gpu, unit: int) -> int:
        """GPU-equivalents of one entry in ``1/unit`` GPUs (whole 1, fraction milli/1000, MIG share)."""
        if use.mig_profile is not None:
            spec = self._spec(gpu)
            prof = spec.profile_map.get(use.mig_profile)
            return 0 if prof is None else prof.compute_slices * unit // spec.compute_slices
        if use.milli is not None:
            return use.milli * unit // FULL_MILLI
        return unit

    def _quotas(self) -> None:
        """Rule 11: a team's GPU-equivalents stay within quota; only preemptible work may borrow. A team
        over its quota only by running replicas that stay keeps it (:meth:`_kept`): no new placement
        or move counts against the quota while the team is over it."""
        if not self.inp.policy.quotas:
            return
        # Integer sums in a unit that divides every share exactly (milli-GPU and every MIG geometry).
        unit = FULL_MILLI * math.lcm(*(m.compute_slices for m in self.catalog.models))
        by_team: defaultdict[str, list[_Placed]] = defaultdict(list)
        for p in self.placed:
            by_team[p.workload.team].append(p)
        for q in self.inp.policy.quotas:
            if math.isinf(q.gpus):
                continue
            used, firm_used = 0, 0
            users: list[_Placed] = []  # the replicas whose use counts against the limit
            for p, use, gpu in self._quota_uses(q, by_team[q.team]):
                eq = self._equivalents(use, gpu, unit)
                used += eq
                if not p.workload.preemptible:
                    firm_used += eq
                if eq and not (q.borrow and p.workload.preemptible):
                    users.append(p)
            total, firm = Fraction(used, unit), Fraction(firm_used, unit)
            limit = _limit(q.gpus)
            subject = " ".join(
                [f"team {q.team}"]
                + ([f"model {q.gpu_model}"] if q.gpu_model else [])
                + ([f"pool {q.pool}"] if q.pool else [])
            )
            if not q.borrow and total > limit:
                self._add(
                    "quota",
                    subject,
                    f"Team '{q.team}' uses {float(total):g} GPU-equivalents, over its quota of {q.gpus:g}.",
                    kept=self._kept(users),
                )
            elif q.borrow and firm > limit:
                self._add(
                    "quota",
                    subject,
                    f"Team '{q.team}' uses {float(firm):g} GPU-equivalents for non-preemptible work, "
                    f"over its quota of {q.gpus:g}; only preemptible work may borrow beyond it.",
                    kept=self._kept(users),
                )

    def _quota_uses(self, q: Quota, placed: Iterable[_Placed]) -> Iterable[tuple[_Placed, GpuUse, Gpu]]:
        """The GPU entries a quota counts: on its GPU model and in its pool, when it names them."""
        model = None if q.gpu_model is None else self._canonical(q.gpu_model)
        for p in placed:
            if q.pool is not None and p.node.pool != q.pool:
                continue
            for use, gpu in p.uses:
                if model is None or self._canonical(gpu.model) == model:
                    yield p, use, gpu

    def _stopped(self) -> list[_Stopped]:
        """Running replicas (``running_on``) that the plan stops, in input order: moved (assigned to
        another node or other GPU entries), preempted (not assigned) or drained in place for a MIG
        re-partition (a ``migrate`` action marked ``DRAIN``); each with whether its action exists."""
        target: dict[tuple[str, int], Assignment] = {}
        for assignment in self.plan.assignments:
            target.setdefault((assignment.workload, assignment.replica), assignment)
        actions: set[tuple[str, str, int]] = set()
        for act in self.plan.actions:
            if act.workload is not None and act.replica is not None:
                kind = DRAIN if act.kind == MIGRATE and act.detail == DRAIN else act.kind
                actions.add((kind, act.workload, act.replica))
        stopped: list[_Stopped] = []
        for w in self.inp.workloads:
            for r, place in enumerate(w.running_on):
                a = target.get((w.id, r))
                if a is None:
                    how = PREEMPT
                elif not w.stays(r, a.node, a.gpus):
                    how = MIGRATE
                elif (DRAIN, w.id, r) in actions:
                    how = DRAIN
                else:
                    continue
                stopped.append(_Stopped(w, r, place, a, how, (how, w.id, r) in actions))
        return stopped

    def _newcomer_ranks(self) -> dict[str, int]:
        """The best (lowest) tier rank of the replicas the plan starts on each node (replicas that do not
        run yet), the tiers a preemption there may make room for."""
        best: dict[str, int] = {}
        for p in self.placed:
            if p.assignment.replica < len(p.workload.running_on):
                continue
            rank = self.inp.policy.tier_rank(p.workload.tier)
            best[p.node.name] = min(rank, best.get(p.node.name, rank))
        return best

    def _disruption(self, stopped: Sequence[_Stopped], actions: bool) -> None:
        """Rule 13: only preemptible work in a tier that may be preempted is stopped, under
        ``disruption.preempt_only_for_higher_tier`` only for a replica of a strictly higher tier that the
        plan starts on its node, and (``actions``: the plan carries its actions) every move and
        preemption that the assignments imply has its action (a drain is known by its action)."""
        policy = self.inp.policy
        every_tier = policy.disruption.preempt_latency_sensitive  # the policy opens every tier
        newcomers = self._newcomer_ranks() if policy.disruption.preempt_only_for_higher_tier else {}
        for s in stopped:
            w = s.workload
            running = _where(s.place.node, s.place.gpus)
            if s.how == PREEMPT:
                if not w.preemptible:
                    self._add(
                        "preempt-forbidden",
                        s.subject,
                        f"The plan stops {s.what}, which runs on {running}, but the workload is not "
                        "preemptible.",
                    )
                elif not (policy.tier(w.tier).may_be_preempted or every_tier):
                    self._add(
                        "preempt-forbidden",
                        s.subject,
                        f"The plan stops {s.what}, which runs on {running}, but its tier '{w.tier}' may not "
                        "be preempted (and disruption.preempt_latency_sensitive is false).",
                    )
                elif policy.disruption.preempt_only_for_higher_tier and newcomers.get(
                    s.place.node, len(policy.tiers)
                ) >= policy.tier_rank(w.tier):
                    self._add(
                        "preempt-higher-tier",
                        s.subject,
                        f"The plan preempts {s.what}, which runs on {running}, but starts no replica of a "
                        f"tier above '{w.tier}' on node '{s.place.node}' "
                        "(disruption.preempt_only_for_higher_tier is true).",
                    )
            if s.scheduled or not actions:
                continue
            if s.target is None:
                message = (
                    f"The plan stops {s.what}, which runs on {running}, but has no preempt action for it."
                )
            else:
                message = (
                    f"The plan moves {s.what} from {running} to {_where(s.target.node, s.target.gpus)} "
                    "but has no migrate action for it."
                )
            self._add("disruption-unscheduled", s.subject, message)

    def _rounds(self) -> int:
        """The rounds the plan was made for: its provenance's ``replan_rounds`` (a positive whole number),
        else one."""
        rounds = self.plan.provenance.get(ROUNDS_KEY)
        return rounds if isinstance(rounds, int) and not isinstance(rounds, bool) and rounds > 0 else 1

    def _disruption_total(self, stopped: Sequence[_Stopped]) -> None:
        """Rule 13: over the whole plan, the migrations and preemptions its assignments imply (drains for
        a re-partition excluded: rounds space them out) stay within the per-round budget times the rounds
        the plan was made for (:data:`ROUNDS_KEY`); spreading actions over more rounds does not buy more
        of them. (``max_moves_per_team`` is checked per round only.)"""
        budget = self.inp.policy.disruption
        rounds = self._rounds()
        made_for = f"{rounds} round(s)" + (f" (provenance {ROUNDS_KEY})" if rounds > 1 else "")
        checks = (
            ("moves", MIGRATE, budget.max_moves_per_round, "max_moves_per_round"),
            ("preempts", PREEMPT, budget.max_preemptions_per_round, "max_preemptions_per_round"),
        )
        for verb, how, limit, name in checks:
            group = [s for s in stopped if s.how == how]
            if len(group) <= limit * rounds:
                continue
            names = ", ".join(f"{s.workload.id}#{s.replica}" for s in group[:MISSING_NAMED])
            names += ", ..." if len(group) > MISSING_NAMED else ""
            self._add(
                "disruption-budget",
                "plan",
                f"The plan {verb} {len(group)} running replica(s) ({names}), more than "
                f"disruption.{name} ({limit}) times the {made_for} it was made for.",
            )

    def _disruption_budget(self) -> None:
        """Rule 13: each round's ``migrate`` actions (drains included) and ``preempt`` actions stay
        within the disruption budget, in all and per team."""
        budget = self.inp.policy.disruption
        workloads = self.inp.workload_by_id
        moves: defaultdict[int, list[str]] = defaultdict(list)
        preempts: defaultdict[int, list[str]] = defaultdict(list)
        team_moves: defaultdict[int, defaultdict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for act in self.plan.actions:
            name = f"{act.workload}#{act.replica}"
            if act.kind == MIGRATE:
                moves[act.round].append(name)
                w = workloads.get(act.workload or "")
                if w is not None:
                    team_moves[act.round][w.team].append(name)
            elif act.kind == PREEMPT:
                preempts[act.round].append(name)
        for rnd in sorted(moves.keys() | preempts.keys()):
            if len(moves[rnd]) > budget.max_moves_per_round:
                self._add(
                    "disruption-budget",
                    f"round {rnd}",
                    f"Round {rnd} moves or drains {len(moves[rnd])} running replica(s) "
                    f"({', '.join(moves[rnd])}), more than disruption.max_moves_per_round "
                    f"({budget.max_moves_per_round}).",
                )
            if len(preempts[rnd]) > budget.max_preemptions_per_round:
                self._add(
                    "disruption-budget",
                    f"round {rnd}",
                    f"Round {rnd} preempts {len(preempts[rnd])} running replica(s) "
                    f"({', '.join(preempts[rnd])}), more than disruption.max_preemptions_per_round "
                    f"({budget.max_preemptions_per_round}).",
                )
            limit = budget.max_moves_per_team
            for team, names in sorted(team_moves[rnd].items()):
                if limit is not None and len(names) > limit:
                    self._add(
                        "disruption-budget",
                        f"round {rnd} team {team}",
                        f"Round {rnd} moves {len(names)} running replica(s) of team '{team}' "
                        f"({', '.join(names)}), more than disruption.max_moves_per_team ({limit}).",
                    )

    def _min_runtime(self, stopped: Sequence[_Stopped]) -> None:
        """Rule 13: a replica is moved, preempted or drained only after running ``min_runtime_s`` at the
        plan's time (``provenance['now']``); not checkable, and recorded as skipped, for replicas
        without ``started_at`` or a plan without a time."""
        least = self.inp.policy.disruption.min_runtime_s
        if least <= 0 or not stopped:
            return
        now = _plan_time(self.plan)
        if now is None:
            self.skipped.append(Skipped("min-runtime", "without the plan's time (provenance 'now')"))
            return
        unknown = 0
        for s in stopped:
            started = s.workload.started_at
            if started is None:
                unknown += 1
                continue
            ran = max(0.0, (now - started).total_seconds())
            if ran < least:
                self._add(
                    "min-runtime",
                    s.subject,
                    f"The plan {s.verb} {s.what}, which started at {started.isoformat()} and has run "
                    f"{ran:.10g} s at the plan's time {now.isoformat()}; disruption.min_runtime_s asks "
                    f"for at least {least:.10g} s.",
                )
        if unknown:
            self.skipped.append(
                Skipped("min-runtime", f"for {unknown} stopped replica(s) without started_at")
            )


def check_plan(
    plan: Plan,
    inp: PlanningInput,
    catalog: HardwareCatalog | None = None,
    *,
    workloads_implied: bool = False,
    actions_derived: bool = True,
) -> Report:
    """Every rule ``plan`` breaks for ``inp`` (in a deterministic order) and the rule families that
    could not be checked.

    Parameters
    ----------
    plan
        The plan to check, from any solver or from a file.
    inp
        The cluster, workloads and policy the plan is for.
    catalog
        The hardware catalog (MIG profiles and placements); the bundled one by default.
    workloads_implied
        ``inp``'s workloads were rebuilt from the plan by :func:`implied_workloads`: the families only
        the demand feeds (:data:`WORKLOAD_FAMILIES`, and isolation and quotas when the policy has such
        rules, as they read teams and tiers) are reported as skipped instead of passing vacuously.
    actions_derived
        ``plan`` carries its actions; false for a trial plan built before they are derived, whose MIG
        layout changes, moves and preemptions are then not required to have their actions (family
        :data:`ACTIONS_FAMILY`, reported as skipped).
    """
    skip: dict[str, str] = {}
    if workloads_implied:
        families = [*WORKLOAD_FAMILIES]
        families += ["isolation"] if inp.policy.isolation else []
        families += ["quotas"] if inp.policy.quotas else []
        skip = dict.fromkeys(families, WITHOUT_WORKLOADS)
    if not actions_derived:
        skip[ACTIONS_FAMILY] = WITHOUT_ACTIONS
    checker = _Checker(plan=plan, inp=inp, catalog=catalog or default_catalog(), skip=skip)
    violations = checker.run()
    if checker.kept:
        log.info("%d rule(s) the current state breaks stay broken", len(checker.kept))
    log.debug(
        "validated %d assignments: %d violation(s), %d rule family(ies) skipped",
        len(plan.assignments),
        len(violations),
        len(checker.skipped),
    )
    return Report(tuple(violations), tuple(checker.skipped), tuple(checker.kept))


def validate_plan(
    plan: Plan,
    inp: PlanningInput,
    catalog: HardwareCatalog | None = None,
    *,
    actions_derived: bool = True,
) -> list[Violation]:
    """Every rule ``plan`` breaks for ``inp``, in a deterministic order (empty when the plan is valid);
    :func:`check_plan` also says which rule families could not be checked (and what
    ``actions_derived`` means)."""
    return list(check_plan(plan, inp, catalog, actions_derived=actions_derived).violations)


class ImpliedWorkloadError(InputError):
    """A plan entry from which no workload can be rebuilt; ``loc`` is its path inside the plan."""

    def __init__(self, loc: tuple[str | int, ...], reason: str) -> None:
        self.loc = loc
        self.reason = reason
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        super().__init__(f"plan {path}: {reason}")


def implied_workloads(plan: Plan, policy: Policy | None = None) -> tuple[Workload, ...]:
    """Workloads as the plan itself describes them, to validate a plan without its demand.

    Each workload gets the replicas the plan names and the shape of its first assignment. Its team and
    tier are placeholders that ``policy`` knows (its first team, else ``default``; the ``standard`` tier,
    else its first): the rule families that read them are skipped by
    ``check_plan(..., workloads_implied=True)``. Raises :class:`ImpliedWorkloadError` naming the plan
    field when an entry makes no valid workload (an empty workload id).
    """
    policy = policy or Policy()
    tiers = [t.name for t in policy.tiers]
    placeholders = {
        "team": policy.teams[0] if policy.teams else "default",
        "tier": STANDARD if STANDARD in tiers or not tiers else tiers[0],
    }
    replicas: dict[str, int] = {}
    shapes: dict[str, dict[str, object]] = {}
    first: dict[str, tuple[str | int, ...]] = {}
    for i, a in enumerate(plan.assignments):
        replicas[a.workload] = max(replicas.get(a.workload, 0), a.replica + 1)
        first.setdefault(a.workload, ("assignments", i))
        shape: dict[str, object] = {
            "cpu_milli": a.cpu_milli,
            "memory_mib": a.memory_mib,
            "gpu_memory_mib": a.gpu_memory_mib,
        }
        if a.gpus and a.gpus[0].mig_profile is not None:
            shape["mig_profile"] = a.gpus[0].mig_profile
        elif a.gpus and a.gpus[0].milli is not None:
            shape["gpu_milli"] = a.gpus[0].milli
        elif a.gpus:
            shape["gpus"] = len(a.gpus)
        shapes.setdefault(a.workload, shape)
    for i, u in enumerate(plan.unplaced):
        replicas[u.workload] = max(replicas.get(u.workload, 0), u.replica + 1)
        first.setdefault(u.workload, ("unplaced", i))
        shapes.setdefault(u.workload, {})
    workloads: list[Workload] = []
    for w, n in sorted(replicas.items()):
        try:
            workloads.append(Workload.model_validate({"id": w, "replicas": n, **placeholders, **shapes[w]}))
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            field_path = tuple("workload" if p == "id" else p for p in error["loc"])
            raise ImpliedWorkloadError((*first[w], *field_path), str(error["msg"])) from None
    return tuple(workloads)

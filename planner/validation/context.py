"""What every rule family shares: the plan, its input and catalog, the indexes the families build in one
pass over the plan (placed replicas, GPU loads, MIG layouts and modes, link graphs), and the violations
found so far, recorded by :meth:`CheckContext.add`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import networkx as nx

from gpuplan.models.cluster import Gpu, MigInstance, Node
from gpuplan.models.hardware import GpuModelSpec, HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Assignment, GpuUse, Plan
from gpuplan.models.workload import Shape, Workload
from gpuplan.planner.validation.report import KEPT_RULES, Skipped, Violation, replica_subject

GpuKey = tuple[str, int]


@dataclass(frozen=True)
class Placed:
    """An assignment whose workload, replica and node exist."""

    assignment: Assignment
    workload: Workload
    node: Node
    shape: Shape | None
    uses: tuple[tuple[GpuUse, Gpu], ...]

    @property
    def subject(self) -> str:
        return replica_subject(self.workload.id, self.assignment.replica)


@dataclass
class CheckContext:
    """The state the rule families share while they run once each over indexes built in a single pass."""

    plan: Plan
    inp: PlanningInput
    catalog: HardwareCatalog
    skip: dict[str, str] = field(default_factory=dict)
    out: list[Violation] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    placed: list[Placed] = field(default_factory=list)
    loads: dict[GpuKey, list[tuple[Placed, GpuUse]]] = field(default_factory=dict)
    layouts: dict[GpuKey, tuple[MigInstance, ...]] = field(default_factory=dict)
    #: MIG modes the plan changes (``True``: on), read once from its ``mig_modes``.
    modes: dict[GpuKey, bool] = field(default_factory=dict)
    graphs: dict[tuple[object, ...], nx.Graph] = field(default_factory=dict)
    node_graphs: dict[str, nx.Graph] = field(default_factory=dict)
    canon: dict[str, str] = field(default_factory=dict)
    unknown_models: set[str] = field(default_factory=set)
    kept: list[Violation] = field(default_factory=list)

    def checks(self, family: str) -> bool:
        """Whether ``family`` is checked; if not, it is recorded as skipped."""
        if family in self.skip:
            self.skipped.append(Skipped(family, self.skip[family]))
            return False
        return True

    def add(self, rule: str, subject: str, message: str, *, kept: bool = False) -> None:
        """Record a violation; ``kept``: the current state already breaks the rule there and the
        plan only keeps it (:meth:`only_kept`), so it is reported as staying broken instead (for the rules
        of :data:`KEPT_RULES` only)."""
        (self.kept if kept and rule in KEPT_RULES else self.out).append(Violation(rule, subject, message))

    def stays(self, p: Placed) -> bool:
        """Whether ``p`` is a running replica that stays where it runs (node and GPU entries, or the same
        GPUs held when its indices are a guess: :meth:`Workload.stays`)."""
        a = p.assignment
        return p.workload.stays(a.replica, a.node, a.gpus)

    def only_kept(self, replicas: Iterable[Placed]) -> bool:
        """Whether a broken rule (one of :data:`KEPT_RULES`) is only kept from the current state:
        every replica it concerns runs now and stays exactly where it runs, so the plan places nothing
        new, moves nothing and adds no usage where the rule is broken (it may stop some of them)."""
        return all(self.stays(p) for p in replicas)

    def canonical(self, name: str) -> str:
        """The catalog's name for a GPU model (a name the catalog does not know as given), memoized."""
        if name not in self.canon:
            self.canon[name] = self.catalog.canonical(name) if self.catalog.has_model(name) else name
        return self.canon[name]

    def spec(self, gpu: Gpu) -> GpuModelSpec:
        """The catalog's specification of the GPU's model."""
        return self.catalog.model(gpu.model)

    def mig_on(self, key: GpuKey, gpu: Gpu) -> bool:
        """Whether the GPU is in MIG mode after the plan (its mode change, else the cluster's mode)."""
        return self.modes.get(key, gpu.mig is not None)

    def effective_layout(self, key: GpuKey, gpu: Gpu) -> tuple[MigInstance, ...] | None:
        """The plan's layout for the GPU, else the one its mode leaves: none (``None``: MIG disabled),
        no instance after MIG is turned on, else the cluster's current one."""
        if key in self.layouts:
            return self.layouts[key]
        if not self.mig_on(key, gpu):
            return None
        return () if gpu.mig is None else gpu.mig.instances

"""Independent plan validation: every rule a plan must obey, checked without any solver code.

This module deliberately imports nothing from ``solvers/`` or ``planner.compile``: it re-derives
every rule from the schema objects in ``models/``, so that it can check any solver's output.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import networkx as nx

from gpuplan.models.catalog import default_catalog
from gpuplan.models.cluster import Gpu, MigInstance, Node, mig_layout_problems
from gpuplan.models.hardware import GpuModelSpec, HardwareCatalog
from gpuplan.models.plan import Assignment, GpuUse, Plan
from gpuplan.models.policy import IsolationKind, IsolationRule, Quota
from gpuplan.models.problem import PlanningInput
from gpuplan.models.workload import Shape, TopologyNeed, Workload
from gpuplan.planner.topology import link_graph

log = logging.getLogger(__name__)

#: Milli-GPU of one whole GPU.
FULL_MILLI = 1000

GpuKey = tuple[str, int]


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


def replica_subject(workload: str, replica: int) -> str:
    """Subject naming one replica."""
    return f"workload {workload} replica {replica}"


def gpu_subject(node: str, gpu: int) -> str:
    """Subject naming one GPU."""
    return f"node {node} gpu {gpu}"


def describe_use(use: GpuUse) -> str:
    """A GPU entry in words: ``whole GPU 0``, ``470 milli of GPU 1`` or ``MIG 3g.40gb@0 on GPU 2``."""
    if use.mig_profile is not None:
        return f"MIG {use.mig_profile}@{use.mig_start} on GPU {use.index}"
    if use.milli is not None:
        return f"{use.milli} milli of GPU {use.index}"
    return f"whole GPU {use.index}"


def _describe_uses(uses: Sequence[GpuUse]) -> str:
    return ", ".join(describe_use(u) for u in uses) if uses else "no GPU"


def _describe_shape(shape: Shape) -> str:
    if shape.kind == "whole":
        return f"{shape.gpus} whole GPU(s)"
    if shape.kind == "fraction":
        return f"{shape.gpu_milli} milli of one GPU"
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
        return len(uses) == 1 and uses[0].kind == "fraction" and uses[0].milli == shape.gpu_milli
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


@dataclass
class _Checker:
    """Runs every rule family once over indexes built in a single pass."""

    plan: Plan
    inp: PlanningInput
    catalog: HardwareCatalog
    out: list[Violation] = field(default_factory=list)
    placed: list[_Placed] = field(default_factory=list)
    loads: dict[GpuKey, list[tuple[_Placed, GpuUse]]] = field(default_factory=dict)
    layouts: dict[GpuKey, tuple[MigInstance, ...]] = field(default_factory=dict)
    graphs: dict[tuple[object, ...], nx.Graph] = field(default_factory=dict)
    node_graphs: dict[str, nx.Graph] = field(default_factory=dict)
    canon: dict[str, str] = field(default_factory=dict)
    unknown_models: set[str] = field(default_factory=set)

    def run(self) -> list[Violation]:
        """All violations, grouped by rule family in a fixed order."""
        self._references()
        self._replicas()
        self._shapes()
        self._layouts()
        self._gpus()
        self._gpu_models()
        self._node_capacity()
        self._gangs()
        self._topology()
        self._isolation()
        self._quotas()
        return self.out

    def _add(self, rule: str, subject: str, message: str) -> None:
        self.out.append(Violation(rule, subject, message))

    def _canonical(self, name: str) -> str:
        if name not in self.canon:
            self.canon[name] = self.catalog.canonical(name) if self.catalog.has_model(name) else name
        return self.canon[name]

    def _spec(self, gpu: Gpu) -> GpuModelSpec:
        return self.catalog.model(gpu.model)

    def _effective_layout(self, key: GpuKey, gpu: Gpu) -> tuple[MigInstance, ...] | None:
        """The plan's layout for the GPU, else the cluster's current one (``None``: MIG disabled)."""
        if key in self.layouts:
            return self.layouts[key]
        return None if gpu.mig is None else gpu.mig.instances

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
            else:
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
        """Rule 2: every replica is placed or waits, exactly once."""
        placed = Counter((a.workload, a.replica) for a in self.plan.assignments)
        waiting = Counter((u.workload, u.replica) for u in self.plan.unplaced)
        for w in self.inp.workloads:
            for r in range(w.replicas):
                n_placed, n_waiting = placed[(w.id, r)], waiting[(w.id, r)]
                if n_placed + n_waiting == 0:
                    self._add(
                        "replica-missing",
                        replica_subject(w.id, r),
                        f"Replica {r} of workload '{w.id}' is neither placed nor listed as unplaced.",
                    )
                elif n_placed + n_waiting > 1:
                    self._add(
                        "replica-duplicate",
                        replica_subject(w.id, r),
                        f"Replica {r} of workload '{w.id}' appears {n_placed} time(s) in assignments and "
                        f"{n_waiting} time(s) in unplaced; it must appear exactly once.",
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

    def _gpus(self) -> None:
        """Rules 4 and 5: per-GPU exclusivity, milli capacity, MIG/non-MIG mixing, MIG instance use."""
        for p in self.placed:
            for use, _ in p.uses:
                self.loads.setdefault((p.node.name, use.index), []).append((p, use))
        for key, entries in self.loads.items():
            gpu = entries[0][0].node.gpu_by_index[key[1]]
            layout = self._effective_layout(key, gpu)
            migs: list[tuple[_Placed, GpuUse]] = []
            whole: list[_Placed] = []
            milli = 0
            for p, u in entries:
                if u.mig_profile is not None:
                    migs.append((p, u))
                elif u.milli is not None:
                    milli += u.milli
                else:
                    whole.append(p)
            non_mig = len(entries) > len(migs)
            if len(entries) == 1 and not migs and layout is None:
                continue  # the common case: one whole or fractional use of a non-MIG GPU
            subject = gpu_subject(*key)
            if whole and len(entries) > 1:
                users = ", ".join(sorted({p.subject for p, _ in entries}))
                self._add(
                    "whole-exclusive",
                    subject,
                    f"The GPU is given whole to {whole[0].subject} but has {len(entries)} uses ({users}).",
                )
            elif milli > FULL_MILLI:
                self._add(
                    "gpu-overcommit",
                    subject,
                    f"Fractional uses add up to {milli} milli-GPU, more than {FULL_MILLI}.",
                )
            if migs and non_mig:
                self._add(
                    "mig-mixed-fraction", subject, "The GPU mixes MIG instances with whole or fractional use."
                )
            elif non_mig and layout is not None:
                self._add(
                    "mig-mixed-fraction",
                    subject,
                    "The GPU is in MIG mode but is given whole or as a fraction.",
                )
            if migs:
                self._mig_uses(subject, self._spec(gpu), layout, migs)

    def _mig_uses(
        self,
        subject: str,
        spec: GpuModelSpec,
        layout: tuple[MigInstance, ...] | None,
        migs: list[tuple[_Placed, GpuUse]],
    ) -> None:
        """Each MIG use names a valid placement and an instance of the layout, used at most once."""
        instances = set() if layout is None else {(i.profile, i.start) for i in layout}
        served: defaultdict[tuple[str, int], list[str]] = defaultdict(list)
        for p, u in migs:
            if u.mig_profile is None or u.mig_start is None:
                continue  # malformed entry, reported as shape-mismatch
            prof = spec.profile_map.get(u.mig_profile)
            label = f"{u.mig_profile}@{u.mig_start}"
            if prof is None:
                self._add(
                    "gpu-model",
                    p.subject,
                    f"The replica uses MIG profile '{u.mig_profile}' on {subject}, a {spec.name}, which does "
                    "not offer it.",
                )
            elif u.mig_start not in prof.starts:
                self._add(
                    "mig-start",
                    p.subject,
                    f"The replica uses MIG {label} on {subject}, but '{u.mig_profile}' cannot start "
                    f"at memory slice {u.mig_start} on {spec.name} (valid starts: {sorted(prof.starts)}).",
                )
            elif layout is None:
                self._add(
                    "mig-layout-mismatch",
                    p.subject,
                    f"The replica uses MIG {label} on {subject}, "
                    "which has MIG disabled in both the plan and the cluster.",
                )
            elif (u.mig_profile, u.mig_start) not in instances:
                self._add(
                    "mig-layout-mismatch",
                    p.subject,
                    f"The replica uses MIG {label} on {subject}, "
                    "which is not an instance of that GPU's layout.",
                )
            else:
                served[(u.mig_profile, u.mig_start)].append(p.subject)
        for (profile, start), users in served.items():
            if len(users) > 1:
                self._add(
                    "mig-instance-shared",
                    subject,
                    f"MIG instance {profile}@{start} serves {len(users)} replicas "
                    f"({', '.join(sorted(users))}).",
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
        """Rule 9: NVLink replicas use a fully NVLink-connected GPU set, NUMA replicas one NUMA node."""
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
                    )
            else:
                numa = sorted({g.numa for g in gpus.values()})
                if len(numa) > 1:
                    self._add(
                        "topology-numa",
                        p.subject,
                        f"The replica needs one NUMA node but its GPUs on node '{p.node.name}' sit on NUMA "
                        f"nodes {numa}.",
                    )

    def _isolation(self) -> None:
        """Rule 10: team-exclusive nodes, no GPU shared across teams or across isolated tiers."""
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
        intruders: defaultdict[str, list[str]] = defaultdict(list)
        for p in self.placed:
            if p.node.name in reserved and p.workload.team != rule.team:
                intruders[p.node.name].append(f"{p.subject} (team {p.workload.team})")
        for node in self.inp.cluster.nodes:
            if node.name in intruders:
                self._add(
                    "isolation",
                    f"node {node.name}",
                    f"The node is reserved for team '{rule.team}' "
                    f"but hosts {', '.join(intruders[node.name])}.",
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
        """Rule 11: a team's GPU-equivalents stay within quota; only preemptible work may borrow."""
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
            for p, use, gpu in self._quota_uses(q, by_team[q.team]):
                eq = self._equivalents(use, gpu, unit)
                used += eq
                if not p.workload.preemptible:
                    firm_used += eq
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
                )
            elif q.borrow and firm > limit:
                self._add(
                    "quota",
                    subject,
                    f"Team '{q.team}' uses {float(firm):g} GPU-equivalents for non-preemptible work, "
                    f"over its quota of {q.gpus:g}; only preemptible work may borrow beyond it.",
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


def validate_plan(plan: Plan, inp: PlanningInput, catalog: HardwareCatalog | None = None) -> list[Violation]:
    """Every rule ``plan`` breaks for ``inp``, in a deterministic order (empty when the plan is valid).

    Parameters
    ----------
    plan
        The plan to check, from any solver or from a file.
    inp
        The cluster, workloads and policy the plan is for.
    catalog
        The hardware catalog (MIG profiles and placements); the bundled one by default.
    """
    checker = _Checker(plan=plan, inp=inp, catalog=catalog or default_catalog())
    violations = checker.run()
    log.debug("validated %d assignments: %d violation(s)", len(plan.assignments), len(violations))
    return violations

"""The solver-neutral placement problem: integers, canonical model names and candidate structure.

``planner.pipeline.compile`` builds it from a :class:`models.PlanningInput`; every back-end reads only this.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from gpuplan.models.cluster import Sharing, sharing_offers, sharing_replicas
from gpuplan.models.hardware import MILLI_PER_GPU, HardwareCatalog
from gpuplan.models.plan import Assignment, GpuUse
from gpuplan.models.policy import Policy, fair_units
from gpuplan.models.rules import disruption
from gpuplan.models.rules.fairness import Standing, replica_units, served_units
from gpuplan.models.rules.gang import runs_in_part
from gpuplan.models.scheduling import Taint
from gpuplan.models.workload import TopologyNeed

#: Room reported for shapes that ask for no GPU memory (more than any GPU's fractions).
MEMORY_UNBOUNDED = 1 << 30


@dataclass(frozen=True)
class GpuSlot:
    """One physical GPU: canonical model, NUMA node, MIG state (``None`` = MIG disabled) and, for a
    MIG-disabled GPU, its node's sharing mode (``None``: none given)."""

    index: int
    model: str
    numa: int
    mig: tuple[tuple[str, int], ...] | None = None
    sharing: Sharing | None = None
    #: GPU memory in MiB (the model's): the second per-GPU capacity, shared by fractions that ask for it.
    memory_mib: int = 0

    def offers(self, kind: str) -> bool:
        """Whether the sharing mode lets a shape of ``kind`` use the GPU: every back-end asks this, so
        a fraction never lands on an exclusive GPU nor a whole GPU on a time-sliced one."""
        return sharing_offers(self.sharing, kind)

    @property
    def shares(self) -> int | None:
        """How many fractions the GPU holds at most (its time-slicing replicas), ``None``: no limit."""
        return sharing_replicas(self.sharing)


def admitted(shape: ShapeSpec, node: str) -> bool:
    """Whether kube-scheduler's filters let ``shape`` be placed on node ``node`` (not in its
    ``refused`` set): every back-end asks this wherever it asks the shape's GPU models."""
    return node not in shape.refused


def admitting(requests: tuple[Request, ...], nodes: Collection[str]) -> tuple[Request, ...]:
    """``requests`` with ``nodes`` taken out of every alternative's ``refused`` set: a relaxation for the
    bounds of nodes whose sharing or MIG mode a plan may change, which changes the device plugin's
    resources they advertise."""
    names = frozenset(nodes)
    if not names or not any(s.refused & names for q in requests for s in q.shapes):
        return requests
    return tuple(
        replace(q, shapes=tuple(replace(s, refused=s.refused - names) for s in q.shapes)) for q in requests
    )


def memory_room(shape: ShapeSpec, free_mib: int) -> int:
    """How many replicas of fraction ``shape`` fit in ``free_mib`` MiB of one GPU's memory (unbounded, as
    :data:`MEMORY_UNBOUNDED`, when the shape asks for no GPU memory). Every back-end bounds the fractions
    of one GPU by this, the second per-GPU capacity next to milli-GPU."""
    if not shape.gpu_memory_mib:
        return MEMORY_UNBOUNDED
    return max(0, free_mib) // shape.gpu_memory_mib


@dataclass(frozen=True)
class NodeSpec:
    """A node with its capacities, GPUs, NVLink cliques and pairwise link costs."""

    name: str
    pool: str | None
    labels: Mapping[str, str]
    cpu_milli: int
    memory_mib: int
    gpus: tuple[GpuSlot, ...]
    nvlink_cliques: tuple[frozenset[int], ...] = ()
    pair_cost: Mapping[tuple[int, int], int] = field(default_factory=dict)
    #: What kube-scheduler's filters read besides the labels (``models.rules.scheduling``): the node's
    #: taints and advertised extended resources. Shapes carry the verdict (``ShapeSpec.refused``); node
    #: classes never merge nodes that differ in these or in their labels.
    taints: tuple[Taint, ...] = ()
    resources: tuple[str, ...] = ()

    def topology_groups(self, shape: ShapeSpec, positions: list[int]) -> list[list[int]]:
        """The groups of GPU ``positions`` that may hold a multi-GPU replica of ``shape`` together: one
        NVLink clique or one NUMA node when the shape needs it, else all of them (groups may be too
        small; callers keep those with enough GPUs)."""
        if shape.gpus < 2 or shape.topology in (TopologyNeed.ANY, TopologyNeed.SAME_NODE):
            return [positions]
        if shape.topology is TopologyNeed.NVLINK:
            return [[p for p in positions if self.gpus[p].index in clique] for clique in self.nvlink_cliques]
        by_numa: dict[int, list[int]] = {}
        for p in positions:
            by_numa.setdefault(self.gpus[p].numa, []).append(p)
        return list(by_numa.values())

    def cost(self, gpus: tuple[int, ...] | list[int]) -> int:
        """Link cost of a GPU set (sum over its pairs)."""
        s = sorted(gpus)
        return sum(self.pair_cost[(a, b)] for i, a in enumerate(s) for b in s[i + 1 :])


@dataclass(frozen=True)
class ShapeSpec:
    """One alternative of a request; ``models`` empty means any GPU model."""

    kind: str
    gpus: int
    milli: int
    mig_profile: str | None
    models: frozenset[str]
    cpu_milli: int
    memory_mib: int
    topology: TopologyNeed
    #: GPU memory (MiB) per GPU used; only models (and MIG profiles) with that much are in ``models``.
    gpu_memory_mib: int = 0
    #: The models the workload names (empty: any), before the GPU memory narrows them (for messages).
    named_models: frozenset[str] = frozenset()
    #: The nodes of the compiled cluster whose taints, labels or advertised resources kube-scheduler's
    #: filters refuse this alternative on (:func:`gpuplan.models.rules.scheduling.admits`): no new
    #: placement or move there (a running replica may stay); empty: every node. Nodes the compile did
    #: not see (a purchase's, a counterfactual's) are not in it.
    refused: frozenset[str] = frozenset()

    @property
    def gpu_milli_total(self) -> int:
        """GPU request in milli-GPU (a whole GPU counts :data:`MILLI_PER_GPU`; MIG counts 0)."""
        return self.gpus * MILLI_PER_GPU + self.milli


@dataclass(frozen=True)
class Running:
    """Where a replica runs now."""

    node: str
    gpus: tuple[GpuUse, ...]
    alternative: int


@dataclass(frozen=True)
class Request:
    """One replica to place (or keep placed)."""

    workload: str
    replica: int
    team: str
    tier: str
    tier_weight: int
    tier_rank: int
    priority: int
    wait_s: int
    shapes: tuple[ShapeSpec, ...]
    gang: str | None = None
    gang_domain: str | None = None
    preemptible: bool = False
    running: Running | None = None
    #: Seconds a running replica has run (``None``: unknown, e.g. no ``started_at``).
    runtime_s: int | None = None
    #: Whether a running replica may be moved or preempted at all (``Workload.disruptible``).
    disruptible: bool = True

    @property
    def key(self) -> tuple[str, int]:
        """(workload id, replica)."""
        return (self.workload, self.replica)

    def assignment(self, where: Running) -> Assignment:
        """The plan entry of this replica placed at ``where``."""
        shape = self.shapes[where.alternative]
        return Assignment(
            workload=self.workload,
            replica=self.replica,
            node=where.node,
            gpus=where.gpus,
            cpu_milli=shape.cpu_milli,
            memory_mib=shape.memory_mib,
            gpu_memory_mib=shape.gpu_memory_mib,
            alternative=where.alternative,
        )


@dataclass(frozen=True)
class PlacementProblem:
    """All a back-end needs to produce a placement (how the solve runs is given next to it, as
    :class:`~gpuplan.solvers.run_options.RunOptions`)."""

    nodes: tuple[NodeSpec, ...]
    requests: tuple[Request, ...]
    catalog: HardwareCatalog
    policy: Policy
    #: The alternatives of each replica that arrived recently (a rounds loop's window): the expected
    #: arrival mix that fragmentation is measured against. Empty: the requests' own mix
    #: (``solvers.placement.fragmentation.problem_mix``).
    arrivals: tuple[tuple[ShapeSpec, ...], ...] = ()
    #: Each team's fair-share standing at planning time (empty without a fair-share policy).
    fair_share: Mapping[str, Standing] = field(default_factory=dict)
    #: Under a fairness floor, the units (``floor_unit`` per GPU-equivalent) each team must hold
    #: (:func:`~gpuplan.models.rules.fairness.input_floors`); empty without one.
    fair_floor: Mapping[str, int] = field(default_factory=dict)
    floor_unit: int = 1
    #: Whether :meth:`queue_order` puts the replicas that reach each team's floor first (a second greedy
    #: start under a fairness floor; the plain order serves the tiers first).
    floor_first: bool = False

    def fair_units(self, team: str) -> int:
        """The multiplier of ``team``'s queue penalty, in hundredths under a fair-share policy (a team
        without a standing has used nothing: the largest factor), else 1."""
        fair = self.policy.fair_share
        if fair is None or not self.fair_share:
            return 1
        found = self.fair_share.get(team)
        return fair_units(fair.max_factor) if found is None else found.units

    def served_units(self, assignments: Iterable[Assignment]) -> dict[str, int]:
        """Units (``floor_unit`` per GPU-equivalent) each team holds in ``assignments``
        (:func:`~gpuplan.models.rules.fairness.served_units`)."""
        team = {q.key: q.team for q in self.requests}
        models = {(n.name, g.index): g.model for n in self.nodes for g in n.gpus}
        return served_units(
            assignments,
            lambda a: team[(a.workload, a.replica)],
            lambda node, index: models[(node, index)],
            self.catalog,
            self.floor_unit,
        )

    def queue_order(self) -> list[Request]:
        """Requests by tier (best first), priority (high first), fair-share standing (best first), wait
        (long first), then in the order they were given (arrival order); with ``floor_first``, the
        waiting replicas that bring each team up to its fairness floor (in that order, each at its first
        alternative's size) first."""
        order = sorted(
            self.requests, key=lambda r: (r.tier_rank, -r.priority, -self.fair_units(r.team), -r.wait_s)
        )
        if not (self.fair_floor and self.floor_first):
            return order
        held = self.served_units(r.assignment(r.running) for r in self.requests if r.running is not None)
        short = {t: f - held.get(t, 0) for t, f in self.fair_floor.items()}
        first: list[Request] = []
        for r in order:
            if r.running is None and short.get(r.team, 0) > 0:
                first.append(r)
                short[r.team] -= self._size(r.shapes[0])
        chosen = {id(r) for r in first}
        return first + [r for r in order if id(r) not in chosen]

    def _size(self, shape: ShapeSpec) -> int:
        """Units (``floor_unit`` per GPU-equivalent) a replica of ``shape`` asks for."""
        return replica_units(
            shape.kind,
            shape.gpus,
            shape.milli,
            shape.mig_profile,
            shape.models,
            self.catalog,
            self.floor_unit,
        )


def memory_models(
    catalog: HardwareCatalog, kind: str, profile: str | None, gpu_memory_mib: int, models: frozenset[str]
) -> frozenset[str]:
    """``models`` (empty: any) narrowed to the GPU models whose GPU, or ``profile`` instance, holds
    ``gpu_memory_mib`` MiB (``models`` itself without a memory ask): whole GPUs and MIG instances are
    given whole, so the memory rule for them is where they may go."""
    if not gpu_memory_mib or kind == "cpu":
        return models
    names = models or frozenset(m.name for m in catalog.models)
    return frozenset(n for n in names if catalog.model(n).fits_memory(kind, profile, gpu_memory_mib))


def any_model(shape: ShapeSpec, catalog: HardwareCatalog) -> ShapeSpec:
    """``shape`` with its list of GPU models relaxed: any model with room for its GPU memory ask."""
    return replace(
        shape, models=memory_models(catalog, shape.kind, shape.mig_profile, shape.gpu_memory_mib, frozenset())
    )


def may_move(policy: Policy, req: Request) -> bool:
    """Whether the disruption budget lets running replica ``req`` migrate at all
    (:func:`gpuplan.models.rules.disruption.may_move`)."""
    return disruption.may_move(policy.disruption, req.runtime_s, req.disruptible)


def may_preempt(policy: Policy, req: Request) -> bool:
    """Whether the policy lets running replica ``req`` be preempted at all: it is preemptible, its tier
    may be preempted (or latency-sensitive work may), the budget allows preemptions and it ran long
    enough (:func:`gpuplan.models.rules.disruption.may_preempt`)."""
    return disruption.may_preempt(
        policy.disruption, req.preemptible, policy.tier(req.tier), req.runtime_s, req.disruptible
    )


def disturbable(policy: Policy, req: Request) -> bool:
    """Whether a running replica may move or be preempted (otherwise it stays where it runs)."""
    return may_move(policy, req) or may_preempt(policy, req)


def gangs_in_part(requests: Iterable[Request]) -> frozenset[str]:
    """The gangs that run only in part now (:func:`gpuplan.models.rules.gang.runs_in_part`): a plan may
    keep such a gang as it runs (every running member where it runs, no other member placed), complete
    it or stop it, and never places any other gang in part."""
    total: Counter[str] = Counter()
    running: Counter[str] = Counter()
    for q in requests:
        if q.gang is not None:
            total[q.gang] += 1
            running[q.gang] += q.running is not None
    return frozenset(g for g in total if runs_in_part(running[g], total[g]))


def running_members(requests: Iterable[Request]) -> dict[str, list[tuple[Request, str]]]:
    """The running members of each gang and the node each runs on: where a plan that keeps running work
    keeps them, so that the gang's other members join them (``Placer.place_gang``)."""
    out: defaultdict[str, list[tuple[Request, str]]] = defaultdict(list)
    for q in requests:
        if q.gang is not None and q.running is not None:
            out[q.gang].append((q, q.running.node))
    return dict(out)

"""What each GPU and node holds right now, with the checks that keep a state from over-committing.

Action ordering, the simulated cluster and the start-time timeline all move replicas on and off this
one model. Each start is checked against the per-GPU rules of :mod:`gpuplan.models.rules.gpu` (the
validator's own), and here against CPU and memory per node, the drain a sharing change needs and the
MIG instance a re-partition destroys (no replica may run on it; the GPU's other instances keep running).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from gpuplan.models.cluster import (
    Cluster,
    MigInstance,
    Sharing,
    describe_sharing,
    mig_layout_problems,
)
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.plan import Assignment, GpuUse, NodeSharing
from gpuplan.models.rules.gpu import (
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
    GpuUser,
    gpu_breaches,
)
from gpuplan.models.rules.gpu import GpuState as RuleState
from gpuplan.models.workload import Workload

#: A replica: (workload id, replica index).
Key = tuple[str, int]


class OverCommitError(RuntimeError):
    """A step would put more on a GPU or node than it holds (or touch a busy MIG instance)."""


@dataclass(frozen=True)
class Holding:
    """Where one replica runs and what it takes there."""

    node: str
    gpus: tuple[GpuUse, ...]
    cpu_milli: int = 0
    memory_mib: int = 0
    alternative: int = 0
    #: GPU memory (MiB) held on each GPU used (shared by the fractions of a GPU).
    gpu_memory_mib: int = 0


def running_holdings(w: Workload) -> Iterator[tuple[Key, Holding]]:
    """Each running replica of ``w`` (from ``running_on``) and where it runs with what it takes there."""
    for r, place in enumerate(w.running_on):
        alt = w.running_alternative(r)
        shape = w.shapes[min(alt, len(w.shapes) - 1)]
        gpus = tuple(GpuUse(**g.model_dump()) for g in place.gpus)
        yield (
            (w.id, r),
            Holding(place.node, gpus, shape.cpu_milli, shape.memory_mib, alt, shape.gpu_memory_mib),
        )


@dataclass
class GpuState:
    """Users of one GPU, its MIG layout (``None`` = MIG disabled) and its node's sharing mode."""

    model: str
    mig: set[tuple[str, int]] | None
    users: dict[Key, GpuUse] = field(default_factory=dict)
    sharing: Sharing | None = None


@dataclass
class Occupancy:
    """A mutable cluster state: GPU users, MIG layouts and CPU/memory per node."""

    catalog: HardwareCatalog
    gpus: dict[tuple[str, int], GpuState]
    capacity: dict[str, tuple[int, int]]
    used: dict[str, list[int]]
    holders: dict[Key, Holding] = field(default_factory=dict)

    @classmethod
    def empty(cls, cluster: Cluster, catalog: HardwareCatalog) -> Occupancy:
        """The cluster with its MIG layouts and nothing running."""
        gpus = {
            (n.name, g.index): GpuState(
                model=catalog.canonical(g.model),
                mig=None if g.mig is None else {(i.profile, i.start) for i in g.mig.instances},
                sharing=n.sharing,
            )
            for n in cluster.nodes
            for g in n.gpus
        }
        return cls(
            catalog=catalog,
            gpus=gpus,
            capacity={n.name: (n.cpu_milli, n.memory_mib) for n in cluster.nodes},
            used={n.name: [0, 0] for n in cluster.nodes},
        )

    @classmethod
    def of(cls, cluster: Cluster, workloads: Iterable[Workload], catalog: HardwareCatalog) -> Occupancy:
        """The cluster with every replica in ``running_on`` placed (raises if the state over-commits)."""
        occ = cls.empty(cluster, catalog)
        for w in workloads:
            for key, hold in running_holdings(w):
                occ.start(key, hold)
        return occ

    def copy(self) -> Occupancy:
        """An independent copy (the catalog and node capacities are shared: they never change)."""
        return Occupancy(
            catalog=self.catalog,
            gpus={
                k: GpuState(g.model, None if g.mig is None else set(g.mig), dict(g.users), g.sharing)
                for k, g in self.gpus.items()
            },
            capacity=self.capacity,
            used={n: list(u) for n, u in self.used.items()},
            holders=dict(self.holders),
        )

    def problem(self, key: Key, hold: Holding) -> str | None:
        """Why ``hold`` cannot start now (``None`` if it can): node CPU and memory, then each GPU's
        rules (:func:`~gpuplan.models.rules.gpu.gpu_breaches`) with ``hold`` beside the GPU's users."""
        if hold.node not in self.capacity:
            return f"node '{hold.node}' does not exist"
        cpu, mem = self.capacity[hold.node]
        used = self.used[hold.node]
        if used[0] + hold.cpu_milli > cpu or used[1] + hold.memory_mib > mem:
            return f"node '{hold.node}' lacks CPU or memory"
        for use in hold.gpus:
            gpu = self.gpus.get((hold.node, use.index))
            if gpu is None:
                return f"node '{hold.node}' has no GPU {use.index}"
            others = [k for k in gpu.users if k != key]
            users = [GpuUser(gpu.users[k], self._gpu_memory(k)) for k in others]
            users.append(GpuUser(use, hold.gpu_memory_mib))
            state = RuleState(
                spec=self.catalog.model(gpu.model),
                mig=None if gpu.mig is None else frozenset(gpu.mig),
                sharing=gpu.sharing,
            )
            new = len(others)
            for breach in gpu_breaches(users, state):
                if new in breach.users:
                    return _why(f"{hold.node}:{use.index}", breach, users, state)
        return None

    def _gpu_memory(self, key: Key) -> int:
        """The GPU memory (MiB) ``key`` holds on each GPU it uses."""
        hold = self.holders.get(key)
        return 0 if hold is None else hold.gpu_memory_mib

    def start(self, key: Key, hold: Holding, *, force: bool = False) -> None:
        """Run ``key`` at ``hold``; raises :class:`OverCommitError` if it does not fit. ``force`` records
        it regardless (a union of uses at different times, as the start-time timeline builds)."""
        if key in self.holders:
            raise OverCommitError(f"{key[0]}#{key[1]} already runs on {self.holders[key].node}")
        why = None if force else self.problem(key, hold)
        if why is not None:
            raise OverCommitError(f"{key[0]}#{key[1]}: {why}")
        self.holders[key] = hold
        self.used[hold.node][0] += hold.cpu_milli
        self.used[hold.node][1] += hold.memory_mib
        for use in hold.gpus:
            self.gpus[(hold.node, use.index)].users[key] = use

    def stop(self, key: Key) -> Holding | None:
        """Stop ``key`` wherever it runs and return where that was (``None`` if it was not running)."""
        hold = self.holders.pop(key, None)
        if hold is None:
            return None
        self.used[hold.node][0] -= hold.cpu_milli
        self.used[hold.node][1] -= hold.memory_mib
        for use in hold.gpus:
            self.gpus[(hold.node, use.index)].users.pop(key, None)
        return hold

    def remove_node(self, node: str) -> list[Key]:
        """Forget a node that disappeared; return the replicas that ran there."""
        lost = [k for k, h in self.holders.items() if h.node == node]
        for k in lost:
            self.stop(k)
        self.capacity = {n: c for n, c in self.capacity.items() if n != node}
        self.used.pop(node, None)
        for key in [g for g in self.gpus if g[0] == node]:
            del self.gpus[key]
        return lost

    def set_sharing_problem(self, node: str) -> str | None:
        """Why ``node``'s sharing mode cannot change now: its non-MIG GPUs must be drained."""
        busy = [k for (n, _), g in self.gpus.items() if n == node and g.mig is None for k in g.users]
        if busy:
            return f"node '{node}' is not drained ({len(busy)} replica(s) still run on its non-MIG GPUs)"
        return None

    def set_sharing(self, change: NodeSharing) -> None:
        """Give a drained node the sharing mode ``change`` names."""
        why = self.set_sharing_problem(change.node)
        if why is not None:
            raise OverCommitError(why)
        for (n, _), g in self.gpus.items():
            if n == change.node:
                g.sharing = change.sharing

    def set_mig_mode_problem(self, node: str, gpu: int) -> str | None:
        """Why the MIG mode of a GPU cannot change now: it must exist, support MIG and be drained."""
        state = self.gpus.get((node, gpu))
        if state is None:
            return f"node '{node}' has no GPU {gpu}"
        if not self.catalog.model(state.model).mig_capable:
            return f"{node}:{gpu} is a {state.model}, which does not support MIG"
        if state.users:
            return f"{node}:{gpu} is not drained ({len(state.users)} replica(s) still run)"
        return None

    def set_mig_mode(self, node: str, gpu: int, enabled: bool) -> None:
        """Turn MIG mode of a drained GPU on (no instance yet) or off (its instances go)."""
        why = self.set_mig_mode_problem(node, gpu)
        if why is not None:
            raise OverCommitError(why)
        self.gpus[(node, gpu)].mig = set() if enabled else None

    def destroy_problem(self, node: str, gpu: int, inst: tuple[str, int]) -> str | None:
        """Why instance ``inst`` cannot be destroyed now: a replica still runs on it. The GPU's other
        instances keep running (NVIDIA destroys one GPU instance at a time; the validator and the
        solvers re-partition idle instances beside busy ones)."""
        state = self.gpus.get((node, gpu))
        if state is None or state.mig is None or inst not in state.mig:
            return f"{node}:{gpu} has no MIG instance {inst[0]}@{inst[1]}"
        on = [k for k, u in state.users.items() if (u.mig_profile, u.mig_start) == inst]
        if on:
            where = f"{node}:{gpu} instance {inst[0]}@{inst[1]}"
            return f"{where} is not drained ({len(on)} replica(s) still run)"
        return None

    def destroy(self, node: str, gpu: int, inst: tuple[str, int]) -> None:
        """Destroy a MIG instance no replica runs on."""
        why = self.destroy_problem(node, gpu, inst)
        if why is not None:
            raise OverCommitError(why)
        state = self.gpus[(node, gpu)]
        assert state.mig is not None
        state.mig.discard(inst)

    def create_problem(self, node: str, gpu: int, inst: tuple[str, int]) -> str | None:
        """Why instance ``inst`` cannot be created now (slices taken, invalid placement, GPU busy)."""
        state = self.gpus.get((node, gpu))
        if state is None:
            return f"node '{node}' has no GPU {gpu}"
        if state.mig is None and state.users:
            return f"{node}:{gpu} must be drained before MIG mode is enabled"
        layout = sorted((state.mig or set()) | {inst}, key=lambda i: i[1])
        spec = self.catalog.model(state.model)
        problems = mig_layout_problems(spec, tuple(MigInstance(profile=p, start=s) for p, s in layout))
        return problems[0][1] if problems else None

    def create(self, node: str, gpu: int, inst: tuple[str, int], *, force: bool = False) -> None:
        """Create a MIG instance (enabling MIG mode on an idle GPU if needed); ``force`` skips the checks."""
        why = None if force else self.create_problem(node, gpu, inst)
        if why is not None:
            raise OverCommitError(why)
        state = self.gpus[(node, gpu)]
        state.mig = (state.mig or set()) | {inst}

    def assignments(self) -> dict[Key, Assignment]:
        """What runs where, as plan assignments."""
        return {
            k: Assignment(
                workload=k[0],
                replica=k[1],
                node=h.node,
                gpus=h.gpus,
                cpu_milli=h.cpu_milli,
                memory_mib=h.memory_mib,
                gpu_memory_mib=h.gpu_memory_mib,
                alternative=h.alternative,
            )
            for k, h in self.holders.items()
        }


def _why(gpu: str, breach: Breach, users: Sequence[GpuUser], state: RuleState) -> str:
    """Why the last of ``users`` cannot join the others on ``gpu`` (``node:index``), in a few words."""
    use = users[-1].use
    inst = f"{use.mig_profile}@{use.mig_start or 0}"
    if breach.rule == WHOLE_EXCLUSIVE and use.milli is None and use.mig_profile is None:
        return f"{gpu} is not free"
    if breach.rule in (WHOLE_EXCLUSIVE, GPU_OVERCOMMIT):
        return f"{gpu} lacks {use.milli} milli-GPU"
    if breach.rule == MIG_MIXED:
        return f"{gpu} is in MIG mode" if use.mig_profile is None else f"{gpu} is not in MIG mode"
    if breach.rule in (MIG_PROFILE, MIG_START, MIG_LAYOUT):
        return f"{gpu} has no MIG instance {inst}"
    if breach.rule == MIG_SHARED:
        return f"MIG instance {inst} on {gpu} is busy"
    if breach.rule == SHARING_MODE:
        assert state.sharing is not None
        return f"{gpu} is {describe_sharing(state.sharing)}"
    if breach.rule == SHARING_REPLICAS:
        return f"{gpu} has no time-sliced share left (its {breach.limit} replicas are taken)"
    if len(breach.users) == 1 and not (use.milli is not None and use.mig_profile is None):
        return f"{gpu} has {breach.limit} MiB of GPU memory, {breach.amount} MiB asked"
    used = breach.amount - users[-1].memory_mib
    return f"{gpu} lacks GPU memory: {used} MiB used + {users[-1].memory_mib} MiB asked > {breach.limit} MiB"


def holding(a: Assignment) -> Holding:
    """The resources a plan assignment takes."""
    return Holding(a.node, a.gpus, a.cpu_milli, a.memory_mib, a.alternative, a.gpu_memory_mib)


def running_conflicts(
    cluster: Cluster, workloads: Sequence[Workload], catalog: HardwareCatalog
) -> list[tuple[int, int, str]]:
    """Running replicas that cannot run beside those listed before them, as (position of the workload,
    replica, sentence naming the workload and the field).

    A state that over-commits a GPU or a node cannot exist, so ``running_on`` that describes one is bad
    input: refused when it is submitted rather than planned into an invalid plan. The workloads must
    name existing nodes and GPUs (:func:`~gpuplan.models.inputs.reference_errors` checks that first).
    """
    occ = Occupancy.empty(cluster, catalog)
    conflicts: list[tuple[int, int, str]] = []
    for i, w in enumerate(workloads):
        for key, hold in running_holdings(w):
            why = occ.problem(key, hold)
            if why is None:
                occ.start(key, hold)
            else:
                conflicts.append((i, key[1], f"workload '{w.id}' field running_on[{key[1]}]: {why}"))
    return conflicts

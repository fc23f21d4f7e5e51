"""What each GPU and node holds right now, with the checks that keep a state from over-committing.

Action ordering, the simulated cluster and the start-time timeline all move replicas on and off this
one model, so the rules (whole GPUs are exclusive, fractions add up to 1000 milli and to at most a
time-sliced GPU's replicas, a MIG instance serves
one replica and is destroyed only on a drained GPU, CPU and memory per node) live in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from gpuplan.models.base import InputError
from gpuplan.models.cluster import (
    Cluster,
    MigInstance,
    Sharing,
    describe_sharing,
    mig_layout_problems,
    sharing_offers,
    sharing_replicas,
)
from gpuplan.models.hardware import MILLI_PER_GPU, HardwareCatalog
from gpuplan.models.plan import Assignment, GpuUse, NodeSharing
from gpuplan.models.problem import PlanningInput
from gpuplan.models.workload import Workload

#: A replica: (workload id, replica index).
Key = tuple[str, int]

FULL_MILLI = MILLI_PER_GPU


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
        alt = place.alternative or 0
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

    @property
    def shares(self) -> int | None:
        """How many fractions the GPU holds at most (time-slicing replicas; ``None``: no count limit)."""
        return sharing_replicas(self.sharing)


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
        """Why ``hold`` cannot start now (``None`` if it can)."""
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
            others = [u for k, u in gpu.users.items() if k != key]
            if use.mig_profile is not None:
                inst = (use.mig_profile, use.mig_start or 0)
                if gpu.mig is None or inst not in gpu.mig:
                    return f"{hold.node}:{use.index} has no MIG instance {inst[0]}@{inst[1]}"
                if any((u.mig_profile, u.mig_start) == inst for u in others):
                    return f"MIG instance {inst[0]}@{inst[1]} on {hold.node}:{use.index} is busy"
            elif gpu.mig is not None:
                return f"{hold.node}:{use.index} is in MIG mode"
            elif gpu.sharing is not None and not sharing_offers(gpu.sharing, use.kind):
                return f"{hold.node}:{use.index} is {describe_sharing(gpu.sharing)}"
            elif use.milli is None:
                if others:
                    return f"{hold.node}:{use.index} is not free"
            elif any(u.milli is None for u in others) or (
                sum(u.milli or 0 for u in others) + use.milli > FULL_MILLI
            ):
                return f"{hold.node}:{use.index} lacks {use.milli} milli-GPU"
            elif gpu.shares is not None and sum(u.milli is not None for u in others) >= gpu.shares:
                return (
                    f"{hold.node}:{use.index} has no time-sliced share left "
                    f"(its {gpu.shares} replicas are taken)"
                )
            else:
                short = self._memory_problem(key, hold, gpu, use.index)
                if short is not None:
                    return short
        return None

    def _memory_problem(self, key: Key, hold: Holding, gpu: GpuState, index: int) -> str | None:
        """Why the GPU memory of a fraction does not fit beside the other fractions of ``gpu``."""
        if not hold.gpu_memory_mib:
            return None
        used = sum(self.holders[k].gpu_memory_mib for k in gpu.users if k != key and k in self.holders)
        capacity = self.catalog.model(gpu.model).memory_mib
        if used + hold.gpu_memory_mib <= capacity:
            return None
        return (
            f"{hold.node}:{index} lacks GPU memory: {used} MiB used + "
            f"{hold.gpu_memory_mib} MiB asked > {capacity} MiB"
        )

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
        """Why instance ``inst`` cannot be destroyed now: a re-partition needs the whole GPU drained."""
        state = self.gpus.get((node, gpu))
        if state is None or state.mig is None or inst not in state.mig:
            return f"{node}:{gpu} has no MIG instance {inst[0]}@{inst[1]}"
        if state.users:
            return f"{node}:{gpu} is not drained ({len(state.users)} replica(s) still run)"
        return None

    def destroy(self, node: str, gpu: int, inst: tuple[str, int]) -> None:
        """Destroy a MIG instance of a drained GPU."""
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


def holding(a: Assignment) -> Holding:
    """The resources a plan assignment takes."""
    return Holding(a.node, a.gpus, a.cpu_milli, a.memory_mib, a.alternative, a.gpu_memory_mib)


class RunningConflictError(InputError):
    """Running work that over-commits a GPU or node: the first conflict, the count of the others and
    the path of the field (``workloads``, position, ``running_on``, replica)."""

    def __init__(self, message: str, loc: tuple[str | int, ...]) -> None:
        super().__init__(message)
        self.loc = loc


def check_running(inp: PlanningInput, catalog: HardwareCatalog) -> None:
    """Refuse running work that over-commits a GPU or node (:func:`running_conflicts`): the one input
    check that files (CLI), request bodies (API) and library callers share."""
    conflicts = running_conflicts(inp.cluster, inp.workloads, catalog)
    if conflicts:
        i, r, msg = conflicts[0]
        more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
        raise RunningConflictError(msg + more, ("workloads", i, "running_on", r))


def running_conflicts(
    cluster: Cluster, workloads: Sequence[Workload], catalog: HardwareCatalog
) -> list[tuple[int, int, str]]:
    """Running replicas that cannot run beside those listed before them, as (position of the workload,
    replica, sentence naming the workload and the field).

    A state that over-commits a GPU or a node cannot exist, so ``running_on`` that describes one is bad
    input: refused when it is submitted rather than planned into an invalid plan. The workloads must
    name existing nodes and GPUs (:func:`~gpuplan.models.problem.reference_errors` checks that first).
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

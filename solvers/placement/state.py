"""Fast mutable cluster state for the greedy solvers.

A node's state is a small immutable :class:`NodeState` (free CPU, memory, GPU milli and MIG instances);
:class:`ClusterState` swaps states in and out, keeps an undo journal for gangs and groups nodes whose
states are interchangeable under one *signature*, so a score computed once serves every node sharing it.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from gpuplan.models.hardware import MILLI_PER_GPU, GpuModelSpec, HardwareCatalog
from gpuplan.solvers.problem import NodeSpec

log = logging.getLogger(__name__)

#: One MIG instance on a GPU: (start, profile, size in memory slices, occupied by a replica).
MigSlot = tuple[int, str, int, bool]

#: Node classes by their static description, shared by every placer of the process.
_CLASS_IDS: dict[Hashable, int] = {}

#: Validity of MIG layouts already checked, by (GPU model, ((profile, start), ...)).
LayoutCache = dict[tuple[str, tuple[tuple[str, int], ...]], bool]

#: Free instances and creatable placements of a MIG profile on one GPU, as ((start, size), ...) each, by
#: (GPU model, the GPU's slots, profile) (see ``options.mig_placements``).
MigStartCache = dict[
    tuple[str, tuple[MigSlot, ...], str], tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]
]


@dataclass(frozen=True, slots=True)
class NodeState:
    """Free resources of one node.

    ``free[p]`` is the free milli-GPU of the GPU at position ``p`` (for a MIG-enabled GPU: its memory
    slices not held by occupied instances, in milli); ``mig[p]`` is ``None`` when MIG is disabled, else
    the GPU's instances sorted by start; ``tags[p]`` are the sharing tags of the replicas sharing the
    GPU (see :class:`solvers.greedy.rules.Demand`), ``None`` when no isolation rule needs them;
    ``gmem[p]`` is the GPU memory (MiB) of the GPU at ``p`` that its fractions do not hold;
    ``shares[p]`` are the fractions the GPU may still take (see :func:`initial_shares`), ``None`` when
    no GPU of the node is time-sliced.
    """

    cpu: int
    mem: int
    free: tuple[int, ...]
    mig: tuple[tuple[MigSlot, ...] | None, ...]
    tags: tuple[tuple[str, ...], ...] | None = None
    gmem: tuple[int, ...] = ()
    shares: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True, eq=False)
class NodeInfo:
    """What never changes about a node: its spec, GPU model specs and symmetry class."""

    pos: int
    spec: NodeSpec
    models: tuple[GpuModelSpec, ...]
    position_of: dict[int, int]
    cls: int
    symmetric: bool
    uniform_cost: bool
    catalog: HardwareCatalog
    allow_create: bool
    layouts_checked: LayoutCache
    reserved: frozenset[str] | None = None
    tagged: bool = False
    mig_starts: MigStartCache = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Node name."""
        return self.spec.name

    def index(self, pos: int) -> int:
        """GPU index of the GPU at position ``pos``."""
        return self.spec.gpus[pos].index


def initial_shares(spec: NodeSpec) -> tuple[int, ...] | None:
    """Fractions each GPU of an idle node may take: its time-slicing replicas, :data:`MILLI_PER_GPU` (no
    limit beyond the milli capacity: a fraction takes at least 1 milli) for the others; ``None`` when no
    GPU of the node has a limit."""
    limits = [g.shares for g in spec.gpus]
    if all(r is None for r in limits):
        return None
    return tuple(MILLI_PER_GPU if r is None else r for r in limits)


def has_share(state: NodeState, pos: int) -> bool:
    """Whether the GPU at ``pos`` may take one more fraction (a time-sliced GPU has a share left)."""
    return state.shares is None or state.shares[pos] > 0


def with_share(shares: tuple[int, ...] | None, pos: int, taken: int = 1) -> tuple[int, ...] | None:
    """Per-GPU ``shares`` with ``taken`` more held on the GPU at ``pos``."""
    if shares is None:
        return None
    return (*shares[:pos], shares[pos] - taken, *shares[pos + 1 :])


def slice_milli(model: GpuModelSpec, slices: int) -> int:
    """Milli-GPU of ``slices`` memory slices of ``model`` (exact for 4- and 8-slice geometries)."""
    return MILLI_PER_GPU * slices // model.memory_slices


def mig_free(model: GpuModelSpec, slots: tuple[MigSlot, ...]) -> int:
    """Free milli-GPU of a MIG-enabled GPU: memory slices not held by occupied instances."""
    held = sum(size for _, _, size, occupied in slots if occupied)
    return slice_milli(model, model.memory_slices - held)


def node_info(
    pos: int,
    spec: NodeSpec,
    catalog: HardwareCatalog,
    *,
    allow_create: bool,
    layouts: LayoutCache,
    reserved: frozenset[str] | None = None,
    tagged: bool = False,
    mig_starts: MigStartCache | None = None,
) -> NodeInfo:
    """Static description of a node; nodes with equal descriptions share a class id.

    ``layouts`` memoises MIG layout checks for ``catalog`` and ``mig_starts`` the MIG placements of a
    GPU's slots (a placer shares one dict of each among its nodes);
    ``reserved`` are the only teams allowed on the node; ``tagged`` makes GPUs remember sharing tags.
    """
    models = tuple(catalog.model(g.model) for g in spec.gpus)
    costs = tuple(sorted(spec.pair_cost.items()))
    cliques = tuple(sorted(tuple(sorted(c)) for c in spec.nvlink_cliques))
    key = (
        spec.cpu_milli,
        spec.memory_mib,
        tuple((g.index, g.model, g.numa, g.mig is not None, g.sharing) for g in spec.gpus),
        cliques,
        costs,
        allow_create,
        spec.pool,
        tuple(sorted(spec.labels.items())),
        (spec.taints, spec.resources),
        None if reserved is None else tuple(sorted(reserved)),
        tagged,
    )
    cls = _CLASS_IDS.setdefault(key, len(_CLASS_IDS))
    uniform = len({c for _, c in costs}) <= 1
    trivial_cliques = all(len(c) < 2 for c in cliques) or (
        len(cliques) == 1 and len(cliques[0]) == len(spec.gpus)
    )
    symmetric = (
        uniform
        and trivial_cliques
        and len({g.model for g in spec.gpus}) <= 1
        and len({g.numa for g in spec.gpus}) <= 1
        and all(g.mig is None for g in spec.gpus)
    )
    return NodeInfo(
        pos=pos,
        spec=spec,
        models=models,
        position_of={g.index: p for p, g in enumerate(spec.gpus)},
        cls=cls,
        symmetric=symmetric,
        uniform_cost=uniform,
        catalog=catalog,
        allow_create=allow_create,
        layouts_checked=layouts,
        reserved=reserved,
        tagged=tagged,
        mig_starts={} if mig_starts is None else mig_starts,
    )


def initial_state(info: NodeInfo) -> NodeState:
    """The node with nothing running: MIG layouts as compiled, every instance free."""
    migs: list[tuple[MigSlot, ...] | None] = []
    free: list[int] = []
    for g, model in zip(info.spec.gpus, info.models, strict=True):
        if g.mig is None:
            migs.append(None)
            free.append(MILLI_PER_GPU)
            continue
        slots = tuple(
            sorted((start, prof, model.profile(prof).size_at(start), False) for prof, start in g.mig)
        )
        migs.append(slots)
        free.append(mig_free(model, slots))
    tags = tuple(() for _ in free) if info.tagged else None
    gmem = tuple(g.memory_mib for g in info.spec.gpus)
    return NodeState(
        info.spec.cpu_milli,
        info.spec.memory_mib,
        tuple(free),
        tuple(migs),
        tags,
        gmem,
        initial_shares(info.spec),
    )


def conflicts(state: NodeState, pos: int, tags: tuple[str, ...]) -> bool:
    """Whether the GPU at ``pos`` serves a team or tier that an isolation rule keeps apart from ``tags``,
    or already serves two that one keeps apart (running work that breaks it: nothing new joins). A tag is
    ``"<rule>=<group>"``, the group of :func:`gpuplan.models.rules.isolation.sharing_group`: two users
    may share the GPU unless one rule gives them different groups (``may_share``)."""
    if state.tags is None:
        return False
    held = state.tags[pos]
    rules = [h.partition("=")[0] for h in held]
    if len(set(rules)) < len(rules):
        return True
    return bool(tags) and any(
        h != t and h.partition("=")[0] == t.partition("=")[0] for h in held for t in tags
    )


def with_tags(
    held: tuple[tuple[str, ...], ...] | None, pos: int, tags: tuple[str, ...]
) -> tuple[tuple[str, ...], ...] | None:
    """Per-GPU tags ``held`` with ``tags`` added to the GPU at ``pos``."""
    if held is None or not tags:
        return held
    merged = tuple(sorted(set(held[pos]) | set(tags)))
    return (*held[:pos], merged, *held[pos + 1 :])


def gpu_key(info: NodeInfo, state: NodeState) -> Hashable:
    """The GPU part of a node's signature (sorted free amounts, milli-GPU and GPU memory, when the GPUs
    are interchangeable)."""
    if info.symmetric:
        if state.tags is None and state.shares is None:
            return tuple(sorted(zip(state.free, state.gmem, strict=True)))
        tags = state.tags or ((),) * len(state.free)
        shares = state.shares or (0,) * len(state.free)
        return tuple(sorted(zip(state.free, state.gmem, tags, shares, strict=True)))
    return (state.free, state.gmem, state.mig, state.tags, state.shares)


def frag_key(info: NodeInfo, state: NodeState) -> Hashable:
    """Nodes with equal keys have the same scores for every shape (scores ignore memory)."""
    return (info.cls, state.cpu, gpu_key(info, state))


def signature(info: NodeInfo, state: NodeState) -> tuple[Hashable, int]:
    """``(frag_key, free memory)``: nodes with equal signatures accept the same placements."""
    return (frag_key(info, state), state.mem)


class Group:
    """The nodes sharing one signature, lowest tie-break rank first (a heap with lazy deletion)."""

    __slots__ = ("heap", "members")

    def __init__(self) -> None:
        self.members: set[int] = set()
        self.heap: list[tuple[int, int]] = []

    def add(self, n: int, rank: int) -> None:
        """Add node ``n``."""
        self.members.add(n)
        heapq.heappush(self.heap, (rank, n))

    def remove(self, n: int) -> None:
        """Remove node ``n`` (its heap entry goes lazily)."""
        self.members.discard(n)

    def first(self) -> int:
        """The member with the lowest rank."""
        heap = self.heap
        while heap[0][1] not in self.members:
            heapq.heappop(heap)
        return heap[0][1]


def spread_rank(names: Sequence[str]) -> list[int]:
    """A tie-break rank of the nodes named ``names``: their positions ordered by a hash of each name.

    Among nodes of equal score the greedy takes the lowest rank. Ranking by the input's row order
    concentrates ties on the first rows (often one rack or one GPU model, since inventories list nodes
    by name) and makes the plan depend on the order of the rows; a hash of the name spreads ties over
    the fleet the same way whatever that order, as the reference simulator's random node rank does.
    """
    digest = [hashlib.blake2b(n.encode(), digest_size=8).digest() for n in names]
    order = sorted(range(len(names)), key=lambda n: (digest[n], names[n]))
    rank = [0] * len(names)
    for r, n in enumerate(order):
        rank[n] = r
    return rank


class ClusterState:
    """Current state of every node, grouped by signature, with an undo journal for gangs.

    ``rank[n]`` orders nodes for tie-breaks (lower first); it defaults to :func:`spread_rank`.
    """

    def __init__(self, infos: Sequence[NodeInfo], rank: Sequence[int] | None = None) -> None:
        self.infos = tuple(infos)
        self.rank = spread_rank([i.name for i in self.infos]) if rank is None else list(rank)
        if sorted(self.rank) != list(range(len(self.infos))):
            raise ValueError("rank must be a permutation of the node positions")
        self.states = [initial_state(i) for i in self.infos]
        self.sigs = [signature(i, s) for i, s in zip(self.infos, self.states, strict=True)]
        self.groups: dict[tuple[Hashable, int], Group] = {}
        for n, sig in enumerate(self.sigs):
            self.groups.setdefault(sig, Group()).add(n, self.rank[n])
        self.capacity_gpu_milli = sum(MILLI_PER_GPU * len(i.spec.gpus) for i in self.infos)
        self.free_gpu_milli = sum(sum(s.free) for s in self.states)
        self._journal: list[tuple[int, NodeState]] | None = None
        #: Where each open transaction starts in the journal, innermost last.
        self._marks: list[int] = []
        #: Bumped by every change of a node's state, so callers can memoise answers about the state.
        self.version = 0

    @property
    def used_gpu_milli(self) -> int:
        """Allocated GPU capacity over the whole cluster, in milli-GPU."""
        return self.capacity_gpu_milli - self.free_gpu_milli

    def set(self, n: int, state: NodeState) -> None:
        """Replace the state of node ``n`` (journalled while a gang is open)."""
        old = self.states[n]
        if self._journal is not None:
            self._journal.append((n, old))
        self._swap(n, old, state)

    def _swap(self, n: int, old: NodeState, new: NodeState) -> None:
        self.states[n] = new
        self.version += 1
        self.free_gpu_milli += sum(new.free) - sum(old.free)
        sig = signature(self.infos[n], new)
        prev = self.sigs[n]
        if sig == prev:
            return
        group = self.groups[prev]
        group.remove(n)
        if not group.members:
            del self.groups[prev]
        self.groups.setdefault(sig, Group()).add(n, self.rank[n])
        self.sigs[n] = sig

    def begin(self) -> None:
        """Start journalling changes (for a gang placed all together or not at all); transactions
        nest: each :meth:`commit` or :meth:`rollback` ends the innermost one."""
        if self._journal is None:
            self._journal = []
        self._marks.append(len(self._journal))

    def commit(self) -> None:
        """Keep the changes of the innermost transaction (an outer one may still undo them)."""
        self._marks.pop()
        if not self._marks:
            self._journal = None

    def rollback(self) -> None:
        """Undo every change since the innermost :meth:`begin`."""
        mark = self._marks.pop()
        journal = self._journal or []
        for n, old in reversed(journal[mark:]):
            self._swap(n, self.states[n], old)
        del journal[mark:]
        if not self._marks:
            self._journal = None

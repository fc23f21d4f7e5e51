"""The placement kernel: a mutable copy of the cluster on which replicas are kept and placed one at a time.

:class:`Placer` checks every rule a single placement must keep (capacity, MIG valid starts, NVLink and
NUMA groups, isolation, quotas, gang domains) and ranks nodes by a :class:`Scorer`. The greedy
back-ends, the online benchmark, the predicted-start timeline, explanations and the exact solver's
candidate rankings all place through it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import replace
from typing import Protocol

from gpuplan.models.cluster import MigInstance
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.plan import Assignment, MigLayout, Unplaced
from gpuplan.models.policy import Policy
from gpuplan.solvers.placement.options import Option, apply, describe, keep, options, uses
from gpuplan.solvers.placement.rules import Demand, Rules, reserved_teams
from gpuplan.solvers.placement.state import (
    ClusterState,
    Group,
    LayoutCache,
    MigStartCache,
    NodeInfo,
    NodeState,
    initial_state,
    node_info,
    signature,
)
from gpuplan.solvers.problem import NodeSpec, Request, Running, ShapeSpec

log = logging.getLogger(__name__)

#: Reason codes of unplaced replicas.
NEVER_FITS = "NEVER_FITS"
GANG = "GANG"
NO_CAPACITY = "NO_CAPACITY"

#: Restricts the nodes a placement may use (e.g. to one value of a gang's domain label).
NodeFilter = Callable[[NodeInfo], bool]


class Scorer(Protocol):
    """How a greedy policy ranks nodes and picks the option inside a node.

    The engine takes the node with the highest score; ties go to the node of lowest tie-break rank.
    """

    def score(
        self, info: NodeInfo, state: NodeState, shape: ShapeSpec, opts: Sequence[Option]
    ) -> tuple[float, int]:
        """The node's score for ``shape`` and the index of the chosen option in ``opts`` (non-empty)."""
        ...


class FirstFitScorer:
    """Every feasible node scores the same, so the engine takes the first one in tie-break order."""

    def score(
        self, info: NodeInfo, state: NodeState, shape: ShapeSpec, opts: Sequence[Option]
    ) -> tuple[float, int]:
        """Score 0 and the first option (options come cheapest first)."""
        return 0.0, 0


class Placer:
    """Places replicas one at a time on a mutable copy of the cluster.

    Parameters
    ----------
    nodes
        The cluster, as compiled into the placement problem.
    catalog
        Hardware catalog (GPU model specs and MIG profiles).
    scorer
        The policy's node score.
    allow_create
        Whether new MIG instances may be created on MIG-enabled GPUs.
    rank
        Tie-break rank of each node (lower wins among equal scores); by default a hash of each node's
        name (:func:`~gpuplan.solvers.placement.state.spread_rank`: ties spread over the fleet, the same
        for any row order). The reference simulator prefixes node names with a random rank per run and
        keeps the smallest name among equal scores, so the online benchmark passes a seeded random
        permutation.
    policy
        Isolation rules and quotas to keep (none by default).
    """

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        catalog: HardwareCatalog,
        scorer: Scorer,
        *,
        allow_create: bool = True,
        rank: Sequence[int] | None = None,
        policy: Policy | None = None,
    ) -> None:
        policy = policy or Policy()
        self.policy = policy
        self.rules = Rules(policy, catalog)
        layouts: LayoutCache = {}
        starts: MigStartCache = {}
        self.infos = tuple(
            node_info(
                i,
                n,
                catalog,
                allow_create=allow_create,
                layouts=layouts,
                mig_starts=starts,
                reserved=reserved_teams(policy, n),
                tagged=self.rules.tagged,
            )
            for i, n in enumerate(nodes)
        )
        self._reserved = any(i.reserved is not None for i in self.infos)
        self.cluster = ClusterState(self.infos, rank)
        self.scorer = scorer
        self._by_name = {i.name: i.pos for i in self.infos}
        self._scores: dict[
            tuple[ShapeSpec, tuple[str, ...], tuple[int, ...]], dict[Hashable, float | None]
        ] = {}
        self._empty: dict[Hashable, tuple[NodeInfo, NodeState]] = {}
        self._classes: dict[Hashable, tuple[NodeInfo, NodeState, list[NodeInfo]]] = {}
        for info in self.infos:
            state = initial_state(info)
            sig = signature(info, state)
            self._empty.setdefault(sig, (info, state))
            self._classes.setdefault((sig, info.reserved), (info, state, []))[2].append(info)
        self._never: dict[tuple[ShapeSpec, str], bool] = {}
        self._bare: dict[ShapeSpec, ShapeSpec] = {}

    @property
    def used_gpu_milli(self) -> int:
        """Allocated GPU capacity, in milli-GPU (MIG instances by their memory slices)."""
        return self.cluster.used_gpu_milli

    @property
    def capacity_gpu_milli(self) -> int:
        """GPU capacity of the cluster, in milli-GPU."""
        return self.cluster.capacity_gpu_milli

    def keep(self, request: Request) -> Assignment:
        """Take a running replica's resources where it runs and return its unchanged assignment."""
        running = request.running
        assert running is not None
        self.hold(request, running)
        return request.assignment(running)

    def hold(self, request: Request, where: Running) -> None:
        """Take the resources of ``request`` at ``where`` as if it ran there (``keep`` without the
        assignment, for a replica that does not run there now, such as a reservation)."""
        shape = request.shapes[where.alternative]
        n = self._by_name[where.node]
        info = self.infos[n]
        demand = self.rules.demand(request)
        self.cluster.set(n, keep(info, self.cluster.states[n], shape, where.gpus, demand.tags))
        positions = [info.position_of[g.index] for g in where.gpus]
        self.rules.charge(info, shape, positions, demand)

    def release(
        self, n: int, gone: Sequence[tuple[Request, Assignment]], stay: Sequence[tuple[Request, Assignment]]
    ) -> None:
        """Take the replicas ``gone`` off node ``n``: its state is rebuilt from the replicas that
        ``stay`` there (every replica on the node is in one list or the other) and the quota use of
        those that go is given back."""
        info = self.infos[n]
        state = initial_state(info)
        for req, a in stay:
            state = keep(info, state, req.shapes[a.alternative], a.gpus, self.rules.demand(req).tags)
        self.cluster.set(n, state)
        for req, a in gone:
            positions = [info.position_of[g.index] for g in a.gpus]
            self.rules.charge(info, req.shapes[a.alternative], positions, self.rules.demand(req), -1)

    def place(self, request: Request, within: NodeFilter | None = None) -> Assignment | None:
        """Place one replica on its first alternative that fits anywhere (on nodes ``within`` accepts,
        if given); ``None`` if none does."""
        demand = self.rules.demand(request)
        for k, shape in enumerate(request.shapes):
            found = self._choose(shape, demand, within)
            if found is not None:
                return self._take(request, k, *found, demand)
        return None

    def place_on(self, request: Request, n: int, alternative: int) -> Assignment | None:
        """Place one replica with its alternative ``alternative`` on node ``n`` (the scorer picks the
        GPUs); ``None`` if it does not fit there or the node is closed to its team."""
        demand = self.rules.demand(request)
        reserved = self.infos[n].reserved
        if reserved is not None and demand.team not in reserved:
            return None
        found = self._node_choice(n, request.shapes[alternative], demand)
        return None if found is None else self._take(request, alternative, n, found[1], demand)

    def fits_on(self, request: Request, n: int, alternative: int) -> bool:
        """Whether :meth:`place_on` would place the replica there now (nothing is taken)."""
        demand = self.rules.demand(request)
        reserved = self.infos[n].reserved
        if reserved is not None and demand.team not in reserved:
            return False
        return self._node_choice(n, request.shapes[alternative], demand) is not None

    def _take(self, request: Request, k: int, n: int, option: Option, demand: Demand) -> Assignment:
        """Apply ``option`` for alternative ``k`` of ``request`` on node ``n``; its plan entry."""
        shape = request.shapes[k]
        info = self.infos[n]
        self.cluster.set(n, apply(info, self.cluster.states[n], shape, option, demand.tags))
        self.rules.charge(info, shape, option.gpus, demand)
        return Assignment(
            workload=request.workload,
            replica=request.replica,
            node=info.name,
            gpus=uses(info, option),
            cpu_milli=shape.cpu_milli,
            memory_mib=shape.memory_mib,
            gpu_memory_mib=shape.gpu_memory_mib,
            alternative=k,
        )

    def place_gang(
        self, members: Sequence[Request], placed: Sequence[tuple[Request, str]] = ()
    ) -> tuple[list[Assignment], Request | None]:
        """Place every member or none; on failure return no assignment and the member that failed.

        A gang with a domain label (``gang_domain``) goes inside one value of that label (never to a
        node without it): the values are tried in node-rank order and the first one holding the whole
        gang wins. ``placed``: the gang's other members that stay placed (request, node name: the
        running members of a gang that runs in part, kept where they run), whose value the members
        join (none is placed when those sit outside one value).
        """
        domains = sorted({m.gang_domain for m in [*members, *(r for r, _ in placed)] if m.gang_domain})
        if not domains:
            return self._place_all(members, None)

        def value(info: NodeInfo) -> tuple[str | None, ...]:
            return tuple(info.spec.labels.get(d) for d in domains)

        def inside(v: tuple[str | None, ...]) -> NodeFilter:
            return lambda info: value(info) == v

        ordered = sorted(self.infos, key=lambda i: self.cluster.rank[i.pos])
        values = dict.fromkeys(value(i) for i in ordered if None not in value(i))
        if placed:
            at = [self._by_name.get(node) for _, node in placed]
            joined = {(None,) if n is None else value(self.infos[n]) for n in at}
            values = dict.fromkeys(v for v in joined if None not in v) if len(joined) == 1 else {}
        first_blocker: Request | None = None
        for v in values:
            got, blocker = self._place_all(members, inside(v))
            if blocker is None:
                return got, None
            first_blocker = first_blocker or blocker
        return [], first_blocker or members[0]

    def _place_all(
        self, members: Sequence[Request], within: NodeFilter | None
    ) -> tuple[list[Assignment], Request | None]:
        self.cluster.begin()
        used = list(self.rules.used)
        placed: list[Assignment] = []
        for m in members:
            a = self.place(m, within)
            if a is None:
                self.cluster.rollback()
                self.rules.used = used
                return [], m
            placed.append(a)
        self.cluster.commit()
        return placed, None

    def trial(self, requests: Sequence[Request]) -> list[Assignment]:
        """Where the greedy loop would place ``requests`` now, without keeping any of it."""
        self.cluster.begin()
        used = list(self.rules.used)
        try:
            return [a for a in (self.place(r) for r in requests) if a is not None]
        finally:
            self.cluster.rollback()
            self.rules.used = used

    def fits_empty(self, request: Request, n: int) -> bool:
        """Whether node ``n``, were it empty, could host one of the request's alternatives (its team
        allowed there)."""
        info = self.infos[n]
        if info.reserved is not None and request.team not in info.reserved:
            return False
        empty = initial_state(info)
        return any(options(info, empty, s) for s in request.shapes)

    def never_fits(self, request: Request) -> bool:
        """Whether no node of the cluster open to the request's team could host any alternative, even
        if it were empty."""
        return all(self._never_fits(s, request.team) for s in request.shapes)

    def _never_fits(self, shape: ShapeSpec, team: str) -> bool:
        # The team matters only when some node is reserved for teams.
        key = (shape, team if self._reserved else "")
        found = self._never.get(key)
        if found is None:
            found = not any(
                options(i, s, shape)
                for i, s in self._empty.values()
                if i.reserved is None or team in i.reserved
            )
            self._never[key] = found
        return found

    def empty_classes(self) -> Iterator[tuple[NodeInfo, NodeState, Sequence[NodeInfo]]]:
        """The nodes in classes that accept the same placements when empty (equal signatures, reserved
        for the same teams): each class's first node, its empty state and the class's nodes."""
        yield from self._classes.values()

    def unplaced(self, request: Request) -> Unplaced:
        """Why a replica could not be placed now."""
        what = " or ".join(describe(s) for s in request.shapes)
        if self.never_fits(request):
            code, reason = NEVER_FITS, f"no node of the cluster could host {what}, even if empty"
        else:
            code, reason = NO_CAPACITY, f"no node has room for {what} now"
        return Unplaced(workload=request.workload, replica=request.replica, code=code, reason=reason)

    def mig_layouts(self) -> tuple[MigLayout, ...]:
        """The final instance list of every MIG-enabled GPU, sorted by start."""
        out: list[MigLayout] = []
        for info, state in zip(self.infos, self.cluster.states, strict=True):
            for p, slots in enumerate(state.mig):
                if slots is None:
                    continue
                out.append(
                    MigLayout(
                        node=info.name,
                        gpu=info.index(p),
                        instances=tuple(MigInstance(profile=pn, start=s) for s, pn, _, _ in slots),
                    )
                )
        return tuple(out)

    def _node_choice(self, n: int, shape: ShapeSpec, demand: Demand) -> tuple[float, Option] | None:
        info = self.infos[n]
        state = self.cluster.states[n]
        opts = options(info, state, shape, demand.tags)
        if demand.quotas:
            opts = [o for o in opts if self.rules.fits(info, shape, o, demand)]
        if not opts:
            return None
        score, i = self.scorer.score(info, state, shape, opts)
        return score, opts[i]

    def _scored_groups(
        self, shape: ShapeSpec, demand: Demand, within: NodeFilter | None
    ) -> Iterator[tuple[float, Group]]:
        """Every signature group where ``shape`` fits now, with its score.

        Scores ignore memory, so they are memoised per (shape without memory, sharing tags, quota
        budget) and node key without memory; a node's free memory, its team reservation and
        ``within`` only decide whether it is a candidate.
        """
        bare = self._bare.get(shape)
        if bare is None:
            bare = replace(shape, memory_mib=0)
            self._bare[shape] = bare
        cache = self._scores.setdefault((bare, demand.tags, self.rules.budget(demand)), {})
        need = shape.memory_mib
        screen = within is not None or self._reserved
        for (key, mem), group in self.cluster.groups.items():
            if mem < need:
                continue
            if screen:
                info = self.infos[group.first()]
                if info.reserved is not None and demand.team not in info.reserved:
                    continue
                if within is not None and not within(info):
                    continue
            score = cache[key] if key in cache else self._score(cache, key, group.first(), bare, demand)
            if score is not None:
                yield score, group

    def _choose(
        self, shape: ShapeSpec, demand: Demand, within: NodeFilter | None
    ) -> tuple[int, Option] | None:
        """The node and option for ``shape``: the highest score, ties to the lowest-ranked node."""
        rank = self.cluster.rank
        best: tuple[float, int] | None = None
        chosen = -1
        for score, group in self._scored_groups(shape, demand, within):
            if best is not None and score < best[0]:
                continue
            # Highest score, then lowest rank (the simulator keeps the smallest node name).
            n = group.first()
            candidate = (score, -rank[n])
            if best is None or candidate > best:
                best, chosen = candidate, n
        if best is None:
            return None
        found = self._node_choice(chosen, shape, demand)
        assert found is not None
        return chosen, found[1]

    def use_scorer(self, scorer: Scorer) -> None:
        """Score with ``scorer`` from now on (a target mix re-estimated between rounds): the scores
        memoised for the previous one are dropped."""
        self.scorer = scorer
        self._scores.clear()

    def ranked(self, request: Request, limit: int) -> list[int]:
        """Up to ``limit`` nodes per alternative where ``request`` fits now, best score first (ties by
        rank): the candidate nodes an exact solver restricts itself to on a large cluster."""
        demand = self.rules.demand(request)
        rank = self.cluster.rank
        out: dict[int, None] = {}
        for shape in request.shapes:
            scored = sorted(
                self._scored_groups(shape, demand, None), key=lambda sg: (-sg[0], rank[sg[1].first()])
            )
            taken = 0
            for _, group in scored:
                for n in sorted(group.members, key=rank.__getitem__)[: limit - taken]:
                    out.setdefault(n)
                    taken += 1
                if taken >= limit:
                    break
        return list(out)

    def _score(
        self, cache: dict[Hashable, float | None], key: Hashable, n: int, bare: ShapeSpec, demand: Demand
    ) -> float | None:
        """Score of node ``n`` (whose key is ``key``) for a memory-less shape, memoised."""
        if key in cache:
            return cache[key]
        found = self._node_choice(n, bare, demand)
        score = None if found is None else found[0]
        cache[key] = score
        return score

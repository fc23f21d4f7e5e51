"""The cluster as a plan leaves it, for why-not questions: every assignment held on a greedy placer.

Explanations and counterfactual searches ask "does this shape fit now, with that rule relaxed or those
replicas gone?"; :class:`PlanState` answers on the exact per-node state (free GPU milli, MIG instances,
sharing tags, CPU, memory, quota use) with the greedy placer's feasibility functions, so an answer
never disagrees with what a solver could have done on the same state.

Nodes are visited in one canonical order, by name (never input order, never the order in which earlier
questions happened to leave the placer's groups), so the plan's reasons and ``gpuplan explain`` name
the same node.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime

from gpuplan.models.hardware import MILLI_PER_GPU, HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Assignment, Plan, Unplaced
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.layouts import cluster_after
from gpuplan.solvers.greedy import Fgd
from gpuplan.solvers.placement import FirstFitScorer, Placer
from gpuplan.solvers.placement.options import Option, options
from gpuplan.solvers.placement.options import keep as keep_on
from gpuplan.solvers.placement.rules import Demand
from gpuplan.solvers.placement.state import NodeInfo, NodeState, initial_state
from gpuplan.solvers.problem import PlacementProblem, Request, Running, ShapeSpec

Key = tuple[str, int]


def _queue_rank(problem: PlacementProblem, q: Request) -> tuple[int, int, int, int, str, int]:
    """A request's place in the canonical queue: tier, priority (high first), fair-share standing (best
    first), wait (long first), key."""
    return (q.tier_rank, -q.priority, -problem.fair_units(q.team), -q.wait_s, q.workload, q.replica)


@dataclass(frozen=True)
class Fit:
    """A node where a shape fits, and the option chosen there."""

    node: int
    option: Option


@dataclass(frozen=True)
class Checks:
    """The rules a fit question applies: quotas, sharing isolation (the demand's tags) and team-exclusive
    nodes. A reason or a counterfactual leaves one out to learn whether it alone keeps a replica off."""

    quota: bool = True
    tags: bool = True
    reserved: bool = True


#: Every rule checked.
ALL_CHECKS = Checks()


class PlanState:
    """Every assignment of ``plan`` held on one placer over the cluster the plan leaves behind.

    ``problem`` is the compiled input (on the cluster with the plan's MIG layouts); ``was_running``
    holds the replicas that ran before the plan; ``occupants[n]`` the replicas the plan puts on node
    ``n``.
    """

    def __init__(self, inp: PlanningInput, plan: Plan, catalog: HardwareCatalog, now: datetime) -> None:
        self.inp = inp
        self.plan = plan
        self.catalog = catalog
        self.now = now
        #: The input on the cluster the plan leaves (its MIG layouts and sharing modes).
        self.after = inp.model_copy(update={"cluster": cluster_after(inp.cluster, plan)})
        self.problem: PlacementProblem = compile_problem(self.after, catalog, now)
        self.requests: dict[Key, Request] = {q.key: q for q in self.problem.requests}
        self.was_running = {q.key for q in self.problem.requests if q.running is not None}
        #: Queue position by tier, priority, fair-share standing and wait, then by workload id and
        #: replica: equals are ranked by name, never by the input's row order, so "ahead of it" names
        #: the same replicas however the workloads file is ordered.
        ranked = sorted(self.problem.requests, key=lambda q: _queue_rank(self.problem, q))
        self.queue_pos = {q.key: i for i, q in enumerate(ranked)}
        self.assigned: dict[Key, Assignment] = {(a.workload, a.replica): a for a in plan.assignments}
        #: Waiting replicas the plan reserves capacity for at a predicted start.
        self.reservations: dict[Key, Unplaced] = {
            (u.workload, u.replica): u for u in plan.unplaced if u.reserved_node is not None
        }
        names = sorted(range(len(self.problem.nodes)), key=lambda n: self.problem.nodes[n].name)
        rank = [0] * len(names)
        for r, n in enumerate(names):
            rank[n] = r
        self.placer: Placer = Placer(
            self.problem.nodes,
            self.problem.catalog,
            Fgd().scorer(self.problem),
            allow_create=self.problem.policy.mig.allow_create,
            rank=rank,
            policy=self.problem.policy,
        )
        #: Node positions in canonical (name) order.
        self.by_name: tuple[int, ...] = tuple(names)
        self.pos = {info.name: info.pos for info in self.placer.infos}
        self.occupants: list[list[Key]] = [[] for _ in self.placer.infos]
        self.lifted: set[Key] = set()
        #: First fits per (shape, demand, rules ignored), valid while the cluster's state version holds.
        self._first_fits: dict[tuple[object, ...], Fit | None] = {}
        self._memo_version = -1
        self._hosts: dict[tuple[ShapeSpec, str], list[int]] = {}
        self._switched: dict[bool, Placer] = {}
        self._switched_nodes: dict[tuple[int, tuple[int, ...], bool], NodeInfo] = {}
        self._switch_fits: dict[tuple[ShapeSpec, Demand], list[tuple[str, list[int]]]] = {}
        self._switch_fits_base: dict[tuple[ShapeSpec, Demand], list[tuple[str, list[int]]]] = {}
        #: MIG-capable GPUs per node not in each MIG mode (static), and how deep in trials the state is.
        self._capable: dict[bool, list[tuple[int, list[int]]]] = {}
        self._depth = 0
        self._gangs: dict[str, list[tuple[Request, str]]] | None = None
        self._members: dict[str, list[Request]] | None = None
        for key, a in sorted(self.assigned.items()):
            self.placer.keep(self.held(key, a))
            self.occupants[self.pos[a.node]].append(key)

    def held(self, key: Key, a: Assignment) -> Request:
        """The request of ``key`` running where ``a`` puts it."""
        return replace(self.requests[key], running=Running(a.node, a.gpus, a.alternative))

    def gang_placed(self, gang: str) -> list[tuple[Request, str]]:
        """The members of ``gang`` the plan places, with their nodes (a gang the plan keeps as it runs,
        in part: its waiting members may only join them, ``Placer.place_gang``)."""
        if self._gangs is None:
            self._gangs = {}
            for key, a in sorted(self.assigned.items()):
                g = self.requests[key].gang
                if g is not None:
                    self._gangs.setdefault(g, []).append((self.requests[key], a.node))
        return self._gangs.get(gang, [])

    def gang_members(self, gang: str) -> list[Request]:
        """Every replica of ``gang``, running or not, as the input has it."""
        if self._members is None:
            self._members = {}
            for q in self.problem.requests:
                if q.gang is not None:
                    self._members.setdefault(q.gang, []).append(q)
        return self._members.get(gang, [])

    @property
    def infos(self) -> tuple[NodeInfo, ...]:
        """Static node descriptions, by position."""
        return self.placer.infos

    def state(self, n: int) -> NodeState:
        """Current state of node ``n``."""
        return self.placer.cluster.states[n]

    def free_milli(self, n: int, models: Collection[str]) -> int:
        """Free GPU capacity of node ``n`` on GPUs of ``models`` (any model when empty), in milli-GPU."""
        info = self.infos[n]
        return sum(f for p, f in enumerate(self.state(n).free) if not models or info.models[p].name in models)

    def demand(self, request: Request) -> Demand:
        """Team, sharing tags and charged quotas of a request."""
        return self.placer.rules.demand(request)

    def allowed(self, info: NodeInfo, team: str) -> bool:
        """Whether team-exclusive rules let ``team`` use the node."""
        return info.reserved is None or team in info.reserved

    def fits_now(self, shape: ShapeSpec, demand: Demand, checks: Checks = ALL_CHECKS) -> Iterator[Fit]:
        """Nodes where ``shape`` fits on the current state (one per group of interchangeable nodes, the
        first by name), in name order, with quotas, sharing isolation and team-exclusive nodes each
        checked as ``checks`` says."""
        # The placer ranks nodes by name, so a group's first member is its first by name.
        rank = self.placer.cluster.rank
        for n in sorted((g.first() for g in self.placer.cluster.groups.values()), key=rank.__getitem__):
            info = self.infos[n]
            if checks.reserved and not self.allowed(info, demand.team):
                continue
            opts = options(info, self.state(n), shape, demand.tags if checks.tags else ())
            if checks.quota and demand.quotas:
                opts = [o for o in opts if self.placer.rules.fits(info, shape, o, demand)]
            if opts:
                yield Fit(n, opts[0])

    def first_fit(self, shape: ShapeSpec, demand: Demand, checks: Checks = ALL_CHECKS) -> Fit | None:
        """The first of :meth:`fits_now`, memoised while the state does not change: replicas waiting
        with the same shape and demand ask the same question of the same state."""
        self._check_version()
        key = (shape, demand, checks)
        if key not in self._first_fits:
            self._first_fits[key] = next(self.fits_now(shape, demand, checks), None)
        return self._first_fits[key]

    def roomiest_hosts(self, shape: ShapeSpec, team: str) -> list[int]:
        """Nodes that could host ``shape`` if emptied (reservations for ``team`` kept), most free GPU
        capacity of its models first, then by name; memoised like :meth:`first_fit`."""
        self._check_version()
        key = (shape, team)
        if key not in self._hosts:
            self._hosts[key] = sorted(
                self.fits_empty(shape, team),
                key=lambda n: (-self.free_milli(n, shape.models), self.infos[n].name),
            )
        return self._hosts[key]

    def _check_version(self) -> None:
        """Forget memoised answers once the state has changed."""
        version = self.placer.cluster.version
        if version != self._memo_version:
            self._first_fits.clear()
            self._hosts.clear()
            self._switch_fits.clear()
            self._memo_version = version

    def largest(self, models: Collection[str]) -> NodeInfo | None:
        """The largest node (GPUs, then CPU; ties by name) with a GPU of one of ``models`` (any model
        when empty)."""
        eligible = [i for i in self.infos if any(not models or m.name in models for m in i.models)]
        return min(eligible, key=lambda i: (-len(i.spec.gpus), -i.spec.cpu_milli, i.name), default=None)

    def fits_empty(self, shape: ShapeSpec, team: str | None) -> Iterator[int]:
        """Nodes that could host ``shape`` if they were empty (``team`` None: ignore reservations), in
        name order."""
        verdict: dict[int, bool] = {}
        for n in self.by_name:
            info = self.infos[n]
            if team is not None and not self.allowed(info, team):
                continue
            if info.cls not in verdict:
                verdict[info.cls] = bool(options(info, initial_state(info), shape))
            if verdict[info.cls]:
                yield n

    def switched_hosts(self, shape: ShapeSpec, team: str | None) -> list[tuple[str, list[int]]]:
        """Nodes (name order) that could host ``shape`` if they were empty and their MIG-capable GPUs were
        in the other MIG mode (off for whole GPUs and fractions, on with no instance for a MIG profile),
        each with the indices of the GPUs that would switch: what turning MIG off or on would serve."""
        enabled = shape.kind == "mig"
        if shape.kind not in ("mig", "whole", "fraction"):
            return []
        if enabled not in self._switched:
            self._switched[enabled] = self._switched_placer(enabled)
        placer = self._switched[enabled]
        out = []
        for info in sorted(placer.infos, key=lambda i: i.name):
            if team is not None and not self.allowed(info, team):
                continue
            spec = info.spec
            flips = [
                g.index
                for g, own in zip(spec.gpus, self.infos[self.pos[info.name]].spec.gpus, strict=True)
                if (g.mig is not None) != (own.mig is not None)
            ]
            if flips and options(info, initial_state(info), shape):
                out.append((info.name, flips))
        return out

    def switched_now(self, shape: ShapeSpec, demand: Demand) -> list[tuple[str, list[int]]]:
        """Nodes (name order) where ``shape`` fits on the state the plan leaves once the MIG-capable GPUs
        that nothing there uses are switched to the other MIG mode (off for whole GPUs and fractions, on
        for a MIG profile), each with those GPUs: where turning MIG off or on would give it room now."""
        enabled = shape.kind == "mig"
        if shape.kind not in ("mig", "whole", "fraction"):
            return []
        # On the plan's own state (outside trials) the answer never changes: kept for the whole run.
        memo = self._switch_fits_base if self._depth == 0 else self._switch_fits
        if self._depth:
            self._check_version()
        key = (shape, demand)
        if key not in memo:
            memo[key] = [
                (self.infos[n].name, flips)
                for n, flips in self._switchable(enabled)
                if self.allowed(self.infos[n], demand.team)
                and self._fits_switched(n, flips, enabled, shape, demand)
            ]
        return memo[key]

    def _switchable(self, enabled: bool) -> list[tuple[int, list[int]]]:
        """Nodes (name order) with MIG-capable GPUs not in MIG mode ``enabled`` that nothing uses on the
        current state, with those GPUs."""
        if enabled not in self._capable:
            self._capable[enabled] = [
                (n, flips)
                for n in self.by_name
                if (
                    flips := [
                        g.index
                        for g in self.infos[n].spec.gpus
                        if (g.mig is None) == enabled and self.catalog.model(g.model).mig_capable
                    ]
                )
            ]
        out = []
        for n, capable in self._capable[enabled]:
            used = {
                g.index
                for key in self.occupants[n]
                if key not in self.lifted
                for g in self.assigned[key].gpus
            }
            flips = [i for i in capable if i not in used]
            if flips:
                out.append((n, flips))
        return out

    def _fits_switched(
        self, n: int, flips: list[int], enabled: bool, shape: ShapeSpec, demand: Demand
    ) -> bool:
        """Whether ``shape`` fits node ``n`` as it is now with the GPUs ``flips`` in MIG mode ``enabled``."""
        switched = self._node_switched(n, tuple(flips), enabled)
        state = initial_state(switched)
        for key in self.occupants[n]:
            if key in self.lifted:
                continue
            a, req = self.assigned[key], self.requests[key]
            state = keep_on(switched, state, req.shapes[a.alternative], a.gpus, self.demand(req).tags)
        return bool(options(switched, state, shape, demand.tags))

    def _node_switched(self, n: int, flips: tuple[int, ...], enabled: bool) -> NodeInfo:
        """Node ``n``'s description with the GPUs ``flips`` in MIG mode ``enabled`` (memoised)."""
        key = (n, flips, enabled)
        if key not in self._switched_nodes:
            spec = self.problem.nodes[n]
            sharing = self.after.cluster.node_by_name[spec.name].sharing
            gpus = tuple(
                replace(g, mig=() if enabled else None, sharing=None if enabled else sharing)
                if g.index in flips
                else g
                for g in spec.gpus
            )
            placer = Placer(
                (replace(spec, gpus=gpus),),
                self.problem.catalog,
                FirstFitScorer(),
                allow_create=True,
                policy=self.problem.policy,
            )
            self._switched_nodes[key] = placer.infos[0]
        return self._switched_nodes[key]

    def _switched_placer(self, enabled: bool) -> Placer:
        """A placer over the cluster the plan leaves with every idle-or-not MIG-capable GPU switched to
        MIG mode ``enabled`` (nodes as compiled, in the same positions)."""
        sharing = {n.name: n.sharing for n in self.after.cluster.nodes}
        nodes = tuple(
            replace(
                n,
                gpus=tuple(
                    replace(g, mig=() if enabled else None, sharing=None if enabled else sharing[n.name])
                    if self.catalog.model(g.model).mig_capable and (g.mig is None) == enabled
                    else g
                    for g in n.gpus
                ),
            )
            for n in self.problem.nodes
        )
        return Placer(
            nodes,
            self.problem.catalog,
            FirstFitScorer(),
            allow_create=True,
            policy=self.problem.policy,
        )

    def without(self, n: int, gone: Iterable[Key]) -> NodeState:
        """Node ``n``'s state if the replicas ``gone`` left it."""
        info = self.infos[n]
        drop = set(gone) | self.lifted
        state = initial_state(info)
        for key in self.occupants[n]:
            if key in drop:
                continue
            a = self.assigned[key]
            req = self.requests[key]
            state = keep_on(info, state, req.shapes[a.alternative], a.gpus, self.demand(req).tags)
        return state

    def gpu_milli(self, key: Key) -> int:
        """GPU capacity an assigned replica holds, in milli-GPU (a MIG instance by its memory share)."""
        a = self.assigned[key]
        info = self.infos[self.pos[a.node]]
        total = 0
        for g in a.gpus:
            if g.milli is not None:
                total += g.milli
            elif g.mig_profile is not None and g.mig_start is not None:
                model = info.models[info.position_of[g.index]]
                slices = model.profile(g.mig_profile).size_at(g.mig_start)
                total += MILLI_PER_GPU * slices // model.memory_slices
            else:
                total += MILLI_PER_GPU
        return total

    @contextmanager
    def trial(self) -> Iterator[None]:
        """Undo every change made to the state (placements, lifts, quota use) inside the block."""
        states = list(self.placer.cluster.states)
        used = list(self.placer.rules.used)
        lifted = set(self.lifted)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            for n, st in enumerate(states):
                if self.placer.cluster.states[n] is not st:
                    self.placer.cluster.set(n, st)
            self.placer.rules.used = used
            self.lifted = lifted

    def lift(self, keys: Iterable[Key]) -> None:
        """Take assigned replicas off the state (their resources and quota use); use inside :meth:`trial`."""
        fresh = [k for k in keys if k in self.assigned and k not in self.lifted]
        self.lifted.update(fresh)
        touched: set[int] = set()
        for key in fresh:
            a = self.assigned[key]
            n = self.pos[a.node]
            info = self.infos[n]
            req = self.requests[key]
            demand = self.demand(req)
            positions = [info.position_of[g.index] for g in a.gpus]
            for i, c in zip(
                demand.quotas,
                self.placer.rules.charges(info, req.shapes[a.alternative], positions, demand),
                strict=True,
            ):
                self.placer.rules.used[i] -= c
            touched.add(n)
        for n in touched:
            self.placer.cluster.set(n, self.without(n, ()))

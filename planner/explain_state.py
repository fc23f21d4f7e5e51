"""The cluster as a plan leaves it, for why-not questions: every assignment held on a greedy placer.

Explanations and counterfactual searches ask "does this shape fit now, with that rule relaxed or those
replicas gone?"; :class:`PlanState` answers on the exact per-node state (free GPU milli, MIG instances,
sharing tags, CPU, memory, quota use) with the greedy placer's feasibility functions, so an answer
never disagrees with what a solver could have done on the same state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.plan import Assignment, Plan
from gpuplan.models.problem import PlanningInput
from gpuplan.planner.compile import compile_problem
from gpuplan.planner.layouts import cluster_after
from gpuplan.solvers.greedy import Fgd
from gpuplan.solvers.placement import Placer
from gpuplan.solvers.placement.options import Option, options
from gpuplan.solvers.placement.options import keep as keep_on
from gpuplan.solvers.placement.rules import Demand
from gpuplan.solvers.placement.state import NodeInfo, NodeState, initial_state
from gpuplan.solvers.problem import PlacementProblem, Request, Running, ShapeSpec

Key = tuple[str, int]


@dataclass(frozen=True)
class Fit:
    """A node where a shape fits, and the option chosen there."""

    node: int
    option: Option


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
        after = inp.model_copy(update={"cluster": cluster_after(inp.cluster, plan)})
        self.problem: PlacementProblem = compile_problem(after, catalog, now)
        self.requests: dict[Key, Request] = {q.key: q for q in self.problem.requests}
        self.was_running = {q.key for q in self.problem.requests if q.running is not None}
        self.queue_pos = {q.key: i for i, q in enumerate(self.problem.queue_order())}
        self.assigned: dict[Key, Assignment] = {(a.workload, a.replica): a for a in plan.assignments}
        self.placer: Placer = Fgd().placer(self.problem)
        self.pos = {info.name: info.pos for info in self.placer.infos}
        self.occupants: list[list[Key]] = [[] for _ in self.placer.infos]
        self.lifted: set[Key] = set()
        for key, a in self.assigned.items():
            self.placer.keep(self.held(key, a))
            self.occupants[self.pos[a.node]].append(key)

    def held(self, key: Key, a: Assignment) -> Request:
        """The request of ``key`` running where ``a`` puts it."""
        return replace(self.requests[key], running=Running(a.node, a.gpus, a.alternative))

    @property
    def infos(self) -> tuple[NodeInfo, ...]:
        """Static node descriptions, by position."""
        return self.placer.infos

    def state(self, n: int) -> NodeState:
        """Current state of node ``n``."""
        return self.placer.cluster.states[n]

    def demand(self, request: Request) -> Demand:
        """Team, sharing tags and charged quotas of a request."""
        return self.placer.rules.demand(request)

    def allowed(self, info: NodeInfo, team: str) -> bool:
        """Whether team-exclusive rules let ``team`` use the node."""
        return info.reserved is None or team in info.reserved

    def fits_now(
        self,
        shape: ShapeSpec,
        demand: Demand,
        *,
        quota: bool = True,
        tags: bool = True,
        reserved: bool = True,
    ) -> Iterator[Fit]:
        """Nodes where ``shape`` fits on the current state (one per group of interchangeable nodes),
        with quotas, sharing isolation and team-exclusive nodes each optionally ignored."""
        for group in list(self.placer.cluster.groups.values()):
            n = group.first()
            info = self.infos[n]
            if reserved and not self.allowed(info, demand.team):
                continue
            opts = options(info, self.state(n), shape, demand.tags if tags else ())
            if quota and demand.quotas:
                opts = [o for o in opts if self.placer.rules.fits(info, shape, o, demand)]
            if opts:
                yield Fit(n, opts[0])

    def fits_empty(self, shape: ShapeSpec, team: str | None) -> Iterator[int]:
        """Nodes that could host ``shape`` if they were empty (``team`` None: ignore reservations)."""
        seen: set[int] = set()
        for info in self.infos:
            if info.cls in seen:
                continue
            if team is not None and not self.allowed(info, team):
                continue
            if options(info, initial_state(info), shape):
                seen.add(info.cls)
                yield from (i.pos for i in self.infos if i.cls == info.cls)

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
                total += 1000 * model.profile(g.mig_profile).size_at(g.mig_start) // model.memory_slices
            else:
                total += 1000
        return total

    @contextmanager
    def trial(self) -> Iterator[None]:
        """Undo every change made to the state (placements, lifts, quota use) inside the block."""
        states = list(self.placer.cluster.states)
        used = list(self.placer.rules.used)
        lifted = set(self.lifted)
        try:
            yield
        finally:
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

"""The executor: plan from what the back-end reports, apply one round within the budget, read back, repeat.

Nothing is lost or placed twice: the demand (not the back-end) says which replicas should exist; each
round starts from the observed state, so a replica whose start failed or whose node vanished is simply
waiting again in the next plan, and the back-end refuses to run a replica that already runs.
:meth:`Executor.run` is the one rounds loop (``gpuplan simulate`` and the benchmarks drive it): arrivals
join the demand round by round, finished work leaves it, and under the FGD paper's protocol a waiting
workload that fits nowhere is dropped.

With an ``admission`` back-end the executor also acts between rounds, as a real scheduler does: each
arriving workload is placed at once (:meth:`Executor.admit`) into free capacity the last plan has not
reserved, by the placement kernel under the policy's rules (quotas, isolation), and the next round
re-optimises everything as usual. With ``evict`` as well, work of a tier the policy never preempts
(latency-sensitive) that finds no room, on arrival or left waiting by a round's plan, preempts the
fewest lower-tier replicas on one node for it at once (:mod:`gpuplan.planner.executor.evict`), within
the round's preemption budget between two rounds: it does not wait for a round (whose solver may fall
back to a heuristic plan that preempts nothing).

Each round's planning input carries the latest arrivals (a window of :data:`ARRIVAL_WINDOW` replicas) as
its ``arrivals``: the plan scores the free capacity it leaves against the mix of work expected next,
not against what happens to run and wait (which drifts to small work once rounds saturate).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from gpuplan.models.catalog import default_catalog
from gpuplan.models.cluster import Cluster
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Action, Assignment, MigMode, Plan
from gpuplan.models.policy import Policy
from gpuplan.models.workload import GpuRef, Placement, Workload, where
from gpuplan.planner.executor.backend import Backend, Observation, Outcome
from gpuplan.planner.executor.evict import evict_for
from gpuplan.planner.pipeline.actions import (
    MIGRATE,
    PREEMPT,
    START,
    current_occupancy,
    ordered_actions,
    schedule_rounds,
)
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.layouts import cluster_with_mig_modes
from gpuplan.planner.pipeline.migmode import may_switch
from gpuplan.planner.pipeline.timeline import previous_reservations, quiet_overcommit
from gpuplan.planner.validation.occupancy import Holding, Key, holding
from gpuplan.solvers.greedy import FirstFit, GreedySolver
from gpuplan.solvers.placement import Placer
from gpuplan.solvers.problem import PlacementProblem, Request, Running, running_members

log = logging.getLogger(__name__)

#: Turns the observed planning input into a plan (e.g. ``make_plan`` with a solver and a time limit).
Planner = Callable[[PlanningInput, datetime], Plan]

#: Replicas of the latest arrivals whose mix each round's plan is given as the work expected next. Large
#: enough that a shape making 5% of arrivals is estimated within about 0.7 point (one binomial standard
#: deviation), small enough to follow a change of mix within about a dozen of B2's rounds (1% of the
#: openb fleet's capacity is about 80 pods). Not tuned: benchmarks/README.md (B2 ablation) compares sizes.
ARRIVAL_WINDOW = 1000


@dataclass(frozen=True)
class StateInput:
    """The planning input built from an observation, and how its replica numbers map to the back-end's."""

    inp: PlanningInput
    to_backend: dict[Key, Key]
    strays: tuple[Key, ...] = ()


def state_input(
    obs: Observation, demand: Sequence[Workload], policy: Policy, arrivals: tuple[Workload, ...] = ()
) -> StateInput:
    """The demand with ``running_on`` (and ``started_at``) from what the back-end runs, and ``arrivals``
    as the input's expected arrival mix.

    Replicas are interchangeable, so a workload's running replicas take the first replica numbers;
    running replicas the demand no longer asks for are returned as ``strays`` (to be stopped).
    """
    by_workload: dict[str, list[Key]] = {}
    for key in sorted(obs.running):
        by_workload.setdefault(key[0], []).append(key)
    nodes = obs.cluster.node_by_name
    workloads: list[Workload] = []
    mapping: dict[Key, Key] = {}
    strays: list[Key] = []
    for w in demand:
        running = [k for k in by_workload.pop(w.id, []) if obs.running[k].node in nodes]
        strays.extend(running[w.replicas :])
        running = running[: w.replicas]
        free = iter(sorted(set(range(w.replicas + len(running))) - {k[1] for k in running}))
        for r in range(w.replicas):
            mapping[(w.id, r)] = running[r] if r < len(running) else (w.id, next(free))
        places = tuple(_placement(obs.running[k], w) for k in running)
        starts = [obs.started[k] for k in running if k in obs.started]
        started = max(starts) if starts else None
        if places == w.running_on and started == w.started_at:
            workloads.append(w)
        else:  # no more places than replicas (the one rule these fields have): no re-validation
            workloads.append(w.model_copy(update={"running_on": places, "started_at": started}))
    for keys in by_workload.values():
        strays.extend(keys)
    inp = PlanningInput(cluster=obs.cluster, workloads=tuple(workloads), policy=policy, arrivals=arrivals)
    return StateInput(inp, mapping, tuple(strays))


def _placement(hold: Holding, w: Workload) -> Placement:
    """Where a replica of ``w`` runs, as ``running_on`` gives it (with the alternative it runs as, when
    ``w`` has alternatives: two of the same kind differ in GPUs, CPU or memory)."""
    gpus = tuple(
        GpuRef(index=g.index, milli=g.milli, mig_profile=g.mig_profile, mig_start=g.mig_start)
        for g in hold.gpus
    )
    return Placement(node=hold.node, gpus=gpus, alternative=hold.alternative if w.alternatives else None)


@dataclass(frozen=True)
class RoundReport:
    """One executed round: the plan, what was applied and what failed, and the disruption it caused."""

    number: int
    now: datetime
    plan: Plan
    outcomes: tuple[Outcome, ...]
    plan_wall_s: float
    deferred: int = 0
    lost: tuple[Key, ...] = field(default=())
    dropped: tuple[str, ...] = ()
    #: Replicas admitted on arrival since the previous round (back-end numbering).
    admitted: tuple[Key, ...] = ()
    #: Replicas preempted outside the plan since the previous round, to start work of a tier the policy
    #: never preempts (``Executor.evict``), each with when (back-end numbering).
    evicted: tuple[tuple[Key, datetime], ...] = ()

    @property
    def failed(self) -> list[Outcome]:
        """Actions that did not succeed."""
        return [o for o in self.outcomes if not o.ok]

    def count(self, kind: str) -> int:
        """Applied actions of ``kind``."""
        return sum(1 for o in self.outcomes if o.ok and o.action.kind == kind)

    @property
    def moves(self) -> int:
        """Migrations applied (drains included)."""
        return self.count(MIGRATE)

    @property
    def preemptions(self) -> int:
        """Preemptions applied."""
        return self.count(PREEMPT)


def unfit(
    obs: Observation, demand: Sequence[Workload], policy: Policy, catalog: HardwareCatalog
) -> list[str]:
    """Waiting workloads of ``demand`` (no replica running) with a replica that fits on no node of
    ``obs`` on its own.

    Everything running stays where it is; MIG instances may be created where ``policy`` allows it, and
    idle ones count as gone where it allows re-partitioning (what a plan could free for the replica), as
    does the MIG mode of idle MIG-capable GPUs (a replica that fits once they switch is not unfit).
    """
    cluster = _without_idle_instances(obs) if policy.mig.allow_repartition else obs.cluster
    gone = _unfit_on(obs, cluster, demand, policy, catalog)
    # An idle MIG-capable GPU may switch MIG mode where the policy allows it (planner.pipeline.migmode):
    # every such GPU off (for whole GPUs and fractions), then every one on (for MIG work).
    busy = {(h.node, u.index) for h in obs.running.values() for u in h.gpus}
    for enabled in (False, True):
        switches = [
            MigMode(node=n.name, gpu=g.index, enabled=enabled)
            for n in cluster.nodes
            for g in n.gpus
            if (n.name, g.index) not in busy
            and (g.mig is None) == enabled
            and catalog.model(g.model).mig_capable
            and may_switch(policy, enabled)
        ]
        if gone and switches:
            switched = _unfit_on(obs, cluster_with_mig_modes(cluster, switches), demand, policy, catalog)
            gone = [w for w in gone if w in switched]
    return gone


def _unfit_on(
    obs: Observation, cluster: Cluster, demand: Sequence[Workload], policy: Policy, catalog: HardwareCatalog
) -> list[str]:
    """The waiting workloads of ``demand`` with a replica that fits on no node of ``cluster`` on its own
    (everything in ``obs`` running stays)."""
    state = state_input(Observation(obs.now, cluster, obs.running, obs.started), demand, policy)
    problem = compile_problem(state.inp, catalog, obs.now)
    placer = FirstFit().placer(problem)
    for r in problem.requests:
        if r.running is not None:
            placer.keep(r)
    running = {r.workload for r in problem.requests if r.running is not None}
    waiting = [r for r in problem.requests if r.workload not in running]
    return list(dict.fromkeys(r.workload for r in waiting if not placer.ranked(r, 1)))


def _without_idle_instances(obs: Observation) -> Cluster:
    """The observed cluster with only the MIG instances that running replicas use."""
    used: set[tuple[str, int, str, int]] = set()
    for hold in obs.running.values():
        for u in hold.gpus:
            if u.mig_profile is not None:
                used.add((hold.node, u.index, u.mig_profile, u.mig_start or 0))
    nodes = []
    for node in obs.cluster.nodes:
        gpus = []
        for g in node.gpus:
            entry = g.model_dump()
            if g.mig is not None:
                entry["mig"]["instances"] = [
                    i
                    for i in entry["mig"]["instances"]
                    if (node.name, g.index, i["profile"], i["start"]) in used
                ]
            gpus.append(entry)
        nodes.append({**node.model_dump(exclude={"gpus", "topology"}), "gpus": gpus})
    return Cluster.model_validate({"nodes": nodes})


class Executor:
    """Drives a back-end one round at a time under ``policy``'s disruption budget.

    ``policy`` may be replaced between rounds (the next round plans and schedules under it); ``demand``
    holds what :meth:`run` carries from round to round, in arrival order. :meth:`run` keeps the latest
    ``arrival_window`` replicas that arrived (0: none) and each round's input carries them
    (:attr:`arrivals`).
    """

    def __init__(
        self,
        backend: Backend,
        planner: Planner,
        policy: Policy,
        catalog: HardwareCatalog | None = None,
        *,
        admission: GreedySolver | None = None,
        evict: bool = False,
        arrival_window: int = ARRIVAL_WINDOW,
    ) -> None:
        self.backend = backend
        self.planner = planner
        self.policy = policy
        self.catalog = catalog or default_catalog()
        #: The greedy back-end whose node score places arriving work between rounds (``None``: arrivals
        #: wait for the next round).
        self.admission = admission
        #: Whether work of a tier the policy never preempts, when it finds no room on arrival or is left
        #: waiting by a round's plan, preempts lower-tier work for it at once (within the round's
        #: preemption budget between two rounds) instead of waiting for the next round.
        self.evict = evict
        self._evicted = 0
        self._stopped: list[tuple[Key, datetime]] = []
        self.rounds = 0
        self.demand: dict[str, Workload] = {}
        self.arrival_window = arrival_window
        self._arrived: deque[Workload] = deque()
        self._arrived_replicas = 0
        # The last round's plan and the replica numbering it was made with (what its reservations are).
        self._last: tuple[Plan, StateInput] | None = None

    @property
    def arrivals(self) -> tuple[Workload, ...]:
        """The latest arrivals :meth:`run` has seen, oldest first: at most ``arrival_window`` replicas
        (or the newest workload alone, when it has more)."""
        return tuple(self._arrived)

    def _arrive(self, batch: Iterable[Workload]) -> None:
        """Add ``batch`` to the arrivals window and drop the oldest beyond its size."""
        if self.arrival_window <= 0:
            return
        for w in batch:
            self._arrived.append(w)
            self._arrived_replicas += w.replicas
        while len(self._arrived) > 1 and self._arrived_replicas > self.arrival_window:
            self._arrived_replicas -= self._arrived.popleft().replicas

    def withdraw(self, ids: Iterable[str]) -> None:
        """Take workloads out of the demand :meth:`run` carries (finished or cancelled between rounds)."""
        for i in ids:
            self.demand.pop(i, None)

    def run(
        self,
        batches: Iterable[Sequence[Workload]],
        *,
        before: Callable[[int], None] | None = None,
        arriving: Callable[[Workload], None] | None = None,
        drop_unfit: bool = False,
    ) -> Iterator[RoundReport]:
        """One round per batch of arrivals, the demand carried over; yields each round's report.

        ``before(k)`` runs before round ``k`` (from 1): the place to move a simulated clock, withdraw
        finished work or change the policy. Each batch joins the demand, which is then planned and the
        plan's first round applied. With an admission back-end, the batch's workloads arrive one by one
        before that (``arriving(w)`` runs first: the place to move a simulated clock to ``w``'s arrival)
        and each is admitted at once where it fits; the report names what was admitted. With
        ``drop_unfit``, a waiting workload that fits on no node of the state after the round, on its own,
        leaves the demand (the FGD paper's protocol drops a pod that does not fit); the report names them.
        Each batch joins the arrivals window (:attr:`arrivals`) before its round is planned.
        """
        for k, batch in enumerate(batches, start=1):
            admitted: list[Key] = []
            if self.admission is not None:
                for w in batch:
                    if arriving is not None:
                        arriving(w)
                    outcomes = self.admit([w])
                    admitted.extend(_key(o.action) for o in outcomes if o.ok and o.action.kind == START)
            if before is not None:
                before(k)
            self.demand.update((w.id, w) for w in batch)
            self._arrive(batch)
            report = self.round(list(self.demand.values()))
            if self.admission is not None and self.evict:
                # What the plan leaves waiting of a tier never preempted: started now where preempting
                # makes room (a round whose solver fell back to a heuristic plan preempts nothing).
                urgent = {
                    u.workload
                    for u in report.plan.unplaced
                    if u.workload in self.demand
                    and not self.policy.tier(self.demand[u.workload].tier).may_be_preempted
                }
                if urgent:
                    self._start_now(urgent, "started after the round")
            report = replace(report, admitted=tuple(admitted), evicted=tuple(self._stopped))
            self._stopped = []
            if drop_unfit:
                gone = unfit(self.backend.observe(), list(self.demand.values()), self.policy, self.catalog)
                self.withdraw(gone)
                report = replace(report, dropped=tuple(gone))
            yield report

    def round(self, demand: Sequence[Workload]) -> RoundReport:
        """Observe, plan (the input carries :attr:`arrivals`), apply the first round of the plan's actions;
        return what happened."""
        obs = self.backend.observe()
        state = state_input(obs, demand, self.policy, self.arrivals)
        self._evicted = 0
        t0 = time.perf_counter()
        plan = self.planner(state.inp, obs.now)
        wall = time.perf_counter() - t0
        occ = current_occupancy(state.inp, plan.assignments, self.catalog)
        targets = {(a.workload, a.replica): a for a in plan.assignments}
        runtime = {
            (w.id, r): (obs.now - w.started_at).total_seconds()
            for w in state.inp.workloads
            if w.started_at is not None
            for r in range(len(w.running_on))
        }
        sched = schedule_rounds(
            occ,
            ordered_actions(state.inp, plan.assignments, plan.mig_layouts, plan.sharing, plan.mig_modes),
            targets,
            state.inp.workload_by_id,
            self.policy,
            runtime_s=runtime,
        )
        first = [_to_backend(a, state.to_backend) for a in sched.actions if a.round == 1]
        first = [
            Action(kind=PREEMPT, workload=k[0], replica=k[1], detail="not in the demand")
            for k in state.strays
        ] + first
        backend_targets: dict[Key, Assignment] = {
            state.to_backend[k]: a.model_copy(update={"replica": state.to_backend[k][1]})
            for k, a in targets.items()
        }
        outcomes = self.backend.apply(first, backend_targets)
        self._last = (plan, state)
        self.rounds += 1
        for o in outcomes:
            if not o.ok:
                log.info(
                    "round %d: %s %s#%s failed: %s",
                    self.rounds,
                    o.action.kind,
                    o.action.workload,
                    o.action.replica,
                    o.reason,
                )
        return RoundReport(self.rounds, obs.now, plan, tuple(outcomes), wall, len(sched.deferred))

    def admit(self, arrivals: Sequence[Workload]) -> list[Outcome]:
        """Put ``arrivals`` into the demand and start at once what fits in free capacity the last plan
        has not reserved (no move, no MIG re-partition: only what a scheduler can do between rounds);
        the rest waits for the next round. Returns the outcomes of the starts (and of the preemptions
        made for them).

        Running work and the targets of moves not made yet are taken first. The arrivals are then
        placed in queue order by the admission back-end's score under the policy's rules, each after the
        last plan's reservations of the waiting replicas ahead of it in the queue (same or better tier
        and priority: targets not reached yet, reserved GPUs) are taken too, quotas included: an arrival
        never takes what the plan holds for work ahead of it, while a higher tier may take what it holds
        for a lower one (the next round plans the lower one again, as the timeline orders the queue). A
        gang is admitted whole or not at all, and only when all its members arrive together. Work that
        runs outside the demand (stopped at the next round) is not seen here: the back-end refuses a
        start on its GPUs, and that arrival waits for the round. With ``evict``, an arrival of a tier the
        policy never preempts that finds no room preempts lower-tier work for it (:func:`evict_for`).
        """
        self.demand.update((w.id, w) for w in arrivals)
        if self.admission is None or not arrivals:
            return []
        return self._start_now({w.id for w in arrivals}, "admitted")

    def _start_now(self, ids: set[str], detail: str) -> list[Outcome]:
        """Start the waiting workloads ``ids`` of the demand where they fit now (see :meth:`admit`),
        preempting for them where ``evict`` allows it; the outcomes of the actions applied."""
        assert self.admission is not None
        obs = self.backend.observe()
        state = state_input(obs, list(self.demand.values()), self.policy)
        problem = compile_problem(state.inp, self.catalog, obs.now)
        placer = Placer(
            problem.nodes,
            self.catalog,
            self.admission.scorer(problem),
            allow_create=False,
            policy=self.policy,
        )
        held: dict[str, list[tuple[Request, Assignment]]] = {}
        for r in problem.requests:
            if r.running is not None:
                held.setdefault(r.running.node, []).append((r, placer.keep(r)))
        # A workload's own reservation is not held against it.
        reserved = [x for x in self._reserved(problem, obs, state) if x[1].workload not in ids]
        queue = [r for r in problem.queue_order() if r.workload in ids and r.running is None]
        waiting = {r.gang for r in problem.requests if r.gang is not None and r.workload not in ids}
        placed: list[Assignment] = []
        victims: list[Request] = []
        gangs: set[str] = set()
        for r in queue:
            # Reservations are in queue order, so those ahead of each arrival are a growing prefix.
            while reserved and reserved[0][0] <= _rank(r):
                _, owner, spot = reserved.pop(0)
                # Reservations at different times may share a GPU: the union over-commits it, on purpose
                # (the timeline silences the same warning).
                with quiet_overcommit():
                    placer.hold(owner, spot)
                held.setdefault(spot.node, []).append((owner, owner.assignment(spot)))
            if r.gang is None:
                a = placer.place(r)
                left = self.policy.disruption.max_preemptions_per_round - self._evicted
                if a is None and self.evict and left > 0 and not self.policy.tier(r.tier).may_be_preempted:
                    found = evict_for(placer, self.policy, r, held, left)
                    if found is not None:
                        a, stopped = found
                        self._evicted += len(stopped)
                        victims.extend(stopped)
                        gone = {q.key for q in stopped}
                        held[a.node] = [qa for qa in held[a.node] if qa[0].key not in gone]
                if a is not None:
                    placed.append(a)
                    held.setdefault(a.node, []).append((r, a))
            elif r.gang not in gangs and r.gang not in waiting:
                gangs.add(r.gang)
                members = [m for m in queue if m.gang == r.gang]
                # The rest of a gang that runs in part joins its running members (their domain value).
                beside = running_members(problem.requests).get(r.gang, ())
                placed.extend(placer.place_gang(members, beside)[0])
        targets = {state.to_backend[(a.workload, a.replica)]: a for a in placed}
        stops = [
            Action(kind=PREEMPT, workload=k[0], replica=k[1], detail=f"{detail}: room for a higher tier")
            for k in (state.to_backend[q.key] for q in victims)
        ]
        starts = [
            Action(kind=START, workload=k[0], replica=k[1], to=where(a.node, a.gpus), detail=detail)
            for k, a in targets.items()
        ]
        backend_targets = {k: a.model_copy(update={"replica": k[1]}) for k, a in targets.items()}
        outcomes = self.backend.apply(stops + starts, backend_targets) if starts else []
        self._stopped.extend((_key(o.action), obs.now) for o in outcomes if o.ok and o.action.kind == PREEMPT)
        log.info(
            "%s %d of %d waiting replica(s), %d preempted for them",
            detail,
            sum(o.ok and o.action.kind == START for o in outcomes),
            len(queue),
            len(stops),
        )
        return outcomes

    def _reserved(
        self, problem: PlacementProblem, obs: Observation, state: StateInput
    ) -> list[tuple[tuple[int, int], Request, Running]]:
        """What the last plan reserves, in queue order of its owners: the targets of its replicas that do
        not run there yet (moves first, then deferred or failed starts) and the reserved GPUs of what
        waits, each with its owner's queue rank and a request of its workload."""
        if self._last is None:
            return []
        plan, then = self._last
        owner: dict[str, Request] = {}
        for r in problem.requests:
            owner.setdefault(r.workload, r)
        moving = {r.workload for r in problem.requests if r.running is not None}
        holds: list[tuple[str, Holding]] = []
        for a in plan.assignments:
            key = then.to_backend.get((a.workload, a.replica))
            now = obs.running.get(key) if key is not None else None
            if now is None or (now.node, now.gpus) != (a.node, a.gpus):
                holds.append((a.workload, holding(a)))
        holds.extend((k[0], r.hold) for k, r in previous_reservations(plan, state.inp).items())
        nodes = {n.name for n in problem.nodes}
        out = [
            (
                MOVES_FIRST if wid in moving else _rank(owner[wid]),
                owner[wid],
                Running(h.node, h.gpus, h.alternative),
            )
            for wid, h in holds
            if wid in owner and h.node in nodes
        ]
        return sorted(out, key=lambda x: x[0])


#: Queue rank of the targets of running work being moved: held before any arrival is placed.
MOVES_FIRST = (-1, 0)


def _rank(r: Request) -> tuple[int, int]:
    """A request's place in the queue by tier and priority (lower goes first)."""
    return (r.tier_rank, -r.priority)


def _key(a: Action) -> Key:
    assert a.workload is not None and a.replica is not None
    return (a.workload, a.replica)


def _to_backend(a: Action, mapping: dict[Key, Key]) -> Action:
    """The action with the back-end's replica number."""
    if a.workload is None or a.replica is None:
        return a
    return a.model_copy(update={"replica": mapping[(a.workload, a.replica)][1]})

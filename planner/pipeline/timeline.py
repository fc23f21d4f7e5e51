"""Predicted start times: roll the plan forward over expected ends and reserve GPUs (conservative backfill).

Running work ends at ``started_at + duration`` (the workload's ``duration_s``, else its tier's
``default_duration_s``; unknown = never). Waiting replicas are taken in queue order (tier, priority,
time waited); each gets the earliest expected end at which it fits on everything that overlaps its own
expected run, including the reservations of replicas ahead of it. So a lower tier backfills a hole only
where it does not delay any reservation made before it, as in Slurm's conservative backfill.

A replica the solver starts now keeps the solver's GPUs when they are compatible with the reservations
ahead of it, and waits otherwise; a waiting replica whose earliest time is now is started now. A replica
the solver left waiting although it fits now in the room of the solver's starts behind it was passed
over by the objective's choice: its reservation keeps off those starts rather than hold them back. A
reservation from the previous plan is tried first at every time, so when durations are exact and
nothing new arrives, each replica starts exactly when and where it was predicted.

Why rolling forward rather than CP-SAT interval variables: the greedy placer decides feasibility per GPU
with all of MIG, fractions and topology for a few milliseconds per probe, whereas one interval (or
no-overlap) per replica and GPU slot multiplies the placement model by the number of time points; see
``benchmarks/README.md`` (B5) for the time it takes per round.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from gpuplan.models.hardware import MILLI_PER_GPU, HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Assignment, MigLayout, Plan, PlanStatus, Unplaced
from gpuplan.models.policy import Policy
from gpuplan.models.workload import Workload, fitting_alternative
from gpuplan.planner.pipeline.deadline import Deadline
from gpuplan.planner.pipeline.layouts import cluster_with_layouts
from gpuplan.planner.pipeline.verdict import result_violations
from gpuplan.planner.validation.occupancy import Holding, Key, Occupancy, holding
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.evaluate import with_layouts
from gpuplan.solvers.greedy import BestFitScorer
from gpuplan.solvers.placement import Placer
from gpuplan.solvers.problem import NodeSpec, PlacementProblem, Request, Running

log = logging.getLogger(__name__)

U = TypeVar("U")

#: Reservations beyond this many seconds are not made (the replica's start stays unknown).
HORIZON_S = 30 * 86400.0
#: Code of a replica the solver would start now but which would delay a reservation ahead of it.
RESERVED = "RESERVED_FOR_EARLIER"
#: Waiting replicas times nodes above which no timeline is computed (each probe builds a placer).
MAX_PROBE_SIZE = 200_000
#: A running replica past its expected end is assumed to end this soon.
OVERDUE_S = 1.0
#: Term set when the time limit stopped the predicted-start pass (the solver's plan is kept).
TIMELINE_CUT = "timeline_cut"


@dataclass(frozen=True)
class Reservation:
    """Where and when (seconds from now) a waiting replica is expected to start."""

    key: Key
    start_s: float
    hold: Holding


@dataclass(frozen=True)
class _Interval:
    key: Key
    start: float
    end: float
    hold: Holding
    #: GPU capacity the holding takes per GPU (milli), set when the roll records the interval.
    take: tuple[tuple[tuple[str, int], int], ...] | None = None


def duration_s(w: Workload, policy: Policy) -> float | None:
    """Expected run time of a replica of ``w``: its ``duration_s``, else its tier's default."""
    if w.duration_s is not None:
        return w.duration_s
    return policy.tier(w.tier).default_duration_s


def remaining_s(w: Workload, policy: Policy, now: datetime) -> float:
    """Expected seconds left for a running replica of ``w`` (infinite when unknown)."""
    d = duration_s(w, policy)
    if d is None:
        return math.inf
    ran = 0.0 if w.started_at is None else (now - w.started_at).total_seconds()
    return max(OVERDUE_S, d - ran)


class _Roll:
    """The state of one roll-forward: fixed intervals, reservations made so far, and the probes."""

    def __init__(
        self,
        inp: PlanningInput,
        problem: PlacementProblem,
        layouts: Sequence[MigLayout],
        catalog: HardwareCatalog,
    ):
        self.inp = inp
        self.catalog = catalog
        # ``problem`` is compiled from ``inp``: its nodes with the plan's layouts are the compiled cluster
        # the plan leaves behind.
        cluster = cluster_with_layouts(inp.cluster, layouts)
        self.nodes: tuple[NodeSpec, ...] = with_layouts(problem.nodes, layouts)
        self.base_state = Occupancy.empty(cluster, catalog)
        self.requests = {r.key: r for r in problem.requests}
        # Quotas bind now; later usage is not known well enough to charge reservations against them.
        self.later_policy = inp.policy.model_copy(update={"quotas": ()})
        self.scorer = BestFitScorer.for_nodes(self.nodes)
        self.intervals: list[_Interval] = []
        self.capacity = MILLI_PER_GPU * sum(len(n.gpus) for n in self.nodes)
        # Placers holding every interval that overlaps all time (running from now, no known end); a probe
        # adds the rest on top and undoes them, instead of rebuilding a placer each time. The placer for
        # later times is built at its first probe (many plans never probe a later time).
        self.now_placer = self._placer(inp.policy)
        self._later_placer: Placer | None = None
        self.base: list[_Interval] = []
        self.in_base: set[Key] = set()
        # Expected ends within the horizon: the times a waiting replica may start at.
        self.ends: set[float] = set()
        # The unions of the intervals that probes last asked for (intervals are only ever added, so the
        # next probe usually asks for the same ones and a few more): as a state, and as GPU use.
        self._occ = _Union(self.intervals, self.base_state.copy)
        self._used: _Union[dict[tuple[str, int], int]] = _Union(self.intervals, dict)

    def _placer(self, policy: Policy) -> Placer:
        allow = policy.mig.allow_create
        return Placer(self.nodes, self.catalog, self.scorer, allow_create=allow, policy=policy)

    @property
    def later_placer(self) -> Placer:
        """The base placer for later times (quotas do not bind there), built at first use."""
        if self._later_placer is None:
            self._later_placer = self._placer(self.later_policy)
            for iv in self.base:
                _keep(self._later_placer, self.requests, iv)
        return self._later_placer

    def add(self, iv: _Interval) -> None:
        """Record an interval (into the base placers when it never ends)."""
        iv = replace(iv, take=tuple(self.milli(iv.hold).items()))
        self.intervals.append(iv)
        if iv.end <= HORIZON_S:
            self.ends.add(iv.end)
        if iv.start == 0 and math.isinf(iv.end):
            _keep(self.now_placer, self.requests, iv)
            if self._later_placer is not None:
                _keep(self._later_placer, self.requests, iv)
            self.base.append(iv)
            self.in_base.add(iv.key)

    def milli(self, hold: Holding) -> dict[tuple[str, int], int]:
        """GPU capacity a holding takes per GPU, in milli-GPU (a MIG instance by its memory slices)."""
        out: dict[tuple[str, int], int] = {}
        for g in hold.gpus:
            take = g.milli or MILLI_PER_GPU
            if g.mig_profile is not None:
                state = self.base_state.gpus.get((hold.node, g.index))
                if state is None:
                    continue
                spec = self.catalog.model(state.model)
                slices = spec.profile(g.mig_profile).size_at(g.mig_start or 0)
                take = MILLI_PER_GPU * slices // spec.memory_slices
            out[(hold.node, g.index)] = out.get((hold.node, g.index), 0) + take
        return out

    def free_milli(self, ivs: Sequence[_Interval]) -> int:
        """GPU capacity left beside the union of ``ivs``, recorded intervals (each GPU counted full at
        most once, as the placer counts an over-committed GPU)."""
        used = self._used.of(ivs, _use)
        return self.capacity - sum(min(MILLI_PER_GPU, u) for u in used.values())

    def overlapping(self, t: float, d: float) -> list[_Interval]:
        """Intervals that overlap ``[t, t + d)``."""
        return [iv for iv in self.intervals if iv.start < t + d and iv.end > t]

    def occupancy(self, ivs: Sequence[_Interval]) -> Occupancy:
        """The base state holding the union of ``ivs`` (as the placer sees them: all at once, so a probe is
        exactly as conservative as the placer's).

        The state is shared with the next call: callers undo what they change."""
        return self._occ.of(ivs, _hold)

    def probe(
        self,
        t: float,
        members: Sequence[Request],
        ivs: list[_Interval],
        tries: Sequence[Sequence[Holding]],
        beside: Sequence[tuple[Request, str]] = (),
    ) -> list[Holding] | None:
        """Placements for every member on top of ``ivs``: the first compatible choice of ``tries``, else
        the best-fit placer's (a gang's members beside its members ``beside``, kept where they run)."""
        if tries:
            occ = self.occupancy(ivs)
            for holds in tries:
                if _all_fit(occ, [m.key for m in members], holds):
                    return list(holds)
        placer = self.now_placer if t == 0 else self.later_placer
        states = list(placer.cluster.states)
        used = list(placer.rules.used)
        try:
            for iv in ivs:
                if iv.key not in self.in_base:
                    _keep(placer, self.requests, iv)
            if len(members) == 1 and not beside:
                found = placer.place(members[0])
                return None if found is None else [holding(found)]
            placed, blocker = placer.place_gang(members, beside)
            return None if blocker is not None else [holding(a) for a in placed]
        finally:
            for n, state in enumerate(states):
                if placer.cluster.states[n] is not state:
                    placer.cluster.set(n, state)
            placer.rules.used = used


def _kept(req: Request, chosen: Mapping[Key, Assignment]) -> bool:
    """Whether ``req`` runs now and the plan keeps it placed (its interval runs from now)."""
    return req.running is not None and req.key in chosen


class _Union(Generic[U]):
    """A value built from a list of recorded intervals, extended when the next list begins with the last
    one (the same steps in the same order as from scratch, so the same value)."""

    def __init__(self, recorded: list[_Interval], fresh: Callable[[], U]) -> None:
        self.recorded = recorded
        self.fresh = fresh
        self.value = fresh()
        self.ivs: list[_Interval] = []
        #: Whether ``ivs`` is the first ``len(ivs)`` recorded intervals (checked without comparing them).
        self.head = True
        #: Whether ``value`` holds exactly ``ivs``.
        self.whole = True

    def of(self, ivs: Sequence[_Interval], step: Callable[[U, _Interval], None]) -> U:
        """The value for ``ivs`` (a sub-list of the recorded intervals, in their order)."""
        done = self.ivs
        everything = len(ivs) == len(self.recorded)
        if (
            self.whole
            and len(done) <= len(ivs)
            and ((everything and self.head) or all(a is b for a, b in zip(done, ivs, strict=False)))
        ):
            value, rest = self.value, ivs[len(done) :]
        else:
            value, rest = self.fresh(), ivs
        self.whole = False  # until every step below is in (a step may raise)
        for iv in rest:
            step(value, iv)
        self.value, self.ivs, self.head, self.whole = value, list(ivs), everything, True
        return value


def _hold(occ: Occupancy, iv: _Interval) -> None:
    """Add an interval to a union state (over-committing if need be)."""
    _ensure_instances(occ, iv.hold, force=True)
    occ.start(iv.key, iv.hold, force=True)


def _use(used: dict[tuple[str, int], int], iv: _Interval) -> None:
    """Add a recorded interval's GPU use to per-GPU totals."""
    assert iv.take is not None
    for gpu, take in iv.take:
        used[gpu] = used.get(gpu, 0) + take


def _keep(placer: Placer, requests: Mapping[Key, Request], iv: _Interval) -> None:
    """Take an interval's resources in ``placer``."""
    req = requests.get(iv.key)
    if req is not None:
        placer.hold(req, Running(iv.hold.node, iv.hold.gpus, iv.hold.alternative))


@contextmanager
def quiet_overcommit() -> Iterator[None]:
    """Silence the placer's over-commit warning: the union of intervals at different times may
    over-commit a GPU on purpose (the placer only needs it as taken)."""
    quiet = logging.getLogger("gpuplan.solvers.placement.options")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        yield
    finally:
        quiet.setLevel(level)


def _ensure_instances(occ: Occupancy, hold: Holding, force: bool = False) -> None:
    """Create the MIG instances ``hold`` uses that the state lacks (when the slices are free, or always
    with ``force``)."""
    for g in hold.gpus:
        if g.mig_profile is None:
            continue
        inst = (g.mig_profile, g.mig_start or 0)
        state = occ.gpus.get((hold.node, g.index))
        missing = state is not None and (state.mig is None or inst not in state.mig)
        if missing and (force or occ.create_problem(hold.node, g.index, inst) is None):
            occ.create(hold.node, g.index, inst, force=True)


def _all_fit(occ: Occupancy, keys: Sequence[Key], holds: Sequence[Holding]) -> bool:
    """Whether every ``keys[i]`` can start at ``holds[i]`` on ``occ`` in turn; ``occ`` is left as it was
    (cheaper than trying on a copy of the whole cluster)."""
    started: list[Key] = []
    layouts: dict[tuple[str, int], set[tuple[str, int]] | None] = {}
    try:
        for key, hold in zip(keys, holds, strict=True):
            for g in hold.gpus:
                state = occ.gpus.get((hold.node, g.index))
                if state is not None:
                    layouts.setdefault((hold.node, g.index), state.mig)
            if not _fits(occ, key, hold):
                return False
            started.append(key)
        return True
    finally:
        for key in started:
            occ.stop(key)
        # ``Occupancy.create`` replaces a layout's set rather than changing it, so this restores it.
        for gpu, mig in layouts.items():
            occ.gpus[gpu].mig = mig


def _fits(occ: Occupancy, key: Key, hold: Holding) -> bool:
    """Start ``key`` at ``hold`` on ``occ`` if it fits there (creating free MIG instances it needs)."""
    _ensure_instances(occ, hold)
    if occ.problem(key, hold) is not None:
        return False
    occ.start(key, hold)
    return True


@dataclass(frozen=True)
class Timeline:
    """What starts now (possibly changed from the solver's choice) and the reservations of the rest."""

    starts: dict[Key, Holding]
    reservations: dict[Key, Reservation]
    demoted: frozenset[Key] = frozenset()
    #: Whether the deadline stopped the roll before every replica had its turn.
    cut: bool = False


# Every keep of the roll may over-commit on purpose (see ``quiet_overcommit``).
@quiet_overcommit()
def roll_forward(
    inp: PlanningInput,
    problem: PlacementProblem,
    result: SolveResult,
    catalog: HardwareCatalog,
    now: datetime,
    previous: Mapping[Key, Reservation],
    deadline: Deadline | None = None,
) -> Timeline:
    """Reserve a start time and GPUs for every replica that does not keep running (see the module);
    stop, ``cut``, when ``deadline`` passes."""
    roll = _Roll(inp, problem, result.mig_layouts, catalog)
    chosen = {(a.workload, a.replica): a for a in result.assignments}
    workloads = inp.workload_by_id
    for key, a in chosen.items():
        if roll.requests[key].running is not None:
            end = remaining_s(workloads[key[0]], inp.policy, now)
            roll.add(_Interval(key, 0.0, end, holding(a)))
    starts: dict[Key, Holding] = {}
    reservations: dict[Key, Reservation] = {}
    demoted: set[Key] = set()
    done: set[str] = set()
    processed: set[Key] = set()
    requests = roll.requests
    # The solver's starts as intervals from now, made once: a replica it leaves waiting is probed with
    # those not reached yet.
    solver_starts = {
        k: _Interval(k, 0.0, math.inf, holding(a)) for k, a in chosen.items() if requests[k].running is None
    }
    start_ends = {
        k: end
        for k in solver_starts
        if (end := duration_s(workloads[k[0]], inp.policy) or math.inf) <= HORIZON_S
    }
    # The same starts as they run: until their expected end.
    solver_runs = {k: replace(iv, end=start_ends.get(k, math.inf)) for k, iv in solver_starts.items()}
    order = problem.queue_order()
    for req in order:
        if req.key in chosen and req.running is not None:
            continue
        if deadline is not None and deadline.expired():
            return Timeline(starts, reservations, frozenset(demoted), cut=True)
        kept: list[tuple[Request, str]] = []
        if req.gang is not None:
            if req.gang in done:
                continue
            done.add(req.gang)
            # The running members the plan keeps where they run (a gang that runs in part): the others
            # start beside them, all together, or wait.
            gang = [r for r in order if r.gang == req.gang]
            kept = [(r, chosen[r.key].node) for r in gang if _kept(r, chosen)]
            members = [r for r in gang if r.key not in starts and not _kept(r, chosen)]
        else:
            members = [req]
        d = duration_s(workloads[req.workload], inp.policy) or math.inf
        need = min(s.gpu_milli_total for s in req.shapes) * len(members)
        fresh = all(m.running is None for m in members)
        suggested = fresh and all(m.key in chosen for m in members)
        honoured = fresh and all(m.key in previous for m in members)
        processed.update(m.key for m in members)
        promoted = False
        yielded = False
        # Start times: the expected ends so far, and those of the solver's starts not reached yet (a
        # replica ahead of them in the queue may start when they end).
        times = sorted({0.0, *roll.ends, *(e for k, e in start_ends.items() if k not in processed)})
        for t in times:
            ivs = roll.overlapping(t, d)
            found = None
            if t == 0 and not suggested and not honoured:
                # Now, only idle room the solver leaves is taken, never room of the solver's own starts
                # (a replica the solver stops, preempted or moved away, never takes back the room it
                # was stopped for); a fresh replica that finds such room starts now.
                pending = [iv for k, iv in solver_starts.items() if k not in processed]
                found = roll.probe(t, members, ivs + pending, [], kept)
                if found is None:
                    # Room now that the solver gave to replicas behind it: leaving this one waiting was
                    # the objective's choice, so its reservation later keeps off the solver's starts.
                    yielded = fresh and roll.probe(t, members, ivs, [], kept) is not None
                    continue
                promoted = fresh
            elif not need or roll.free_milli(ivs) >= need:
                tries = [[previous[m.key].hold for m in members]] if honoured else []
                if t == 0 and suggested:
                    tries.append([holding(chosen[m.key]) for m in members])
                elif t > 0 and not honoured:
                    # A later reservation takes GPUs the solver's starts behind it leave free by then
                    # first (so that it holds back no start it need not delay), and only those when
                    # the replica could have started now in their place (see above).
                    behind = [iv for k, iv in solver_runs.items() if k not in processed and iv.end > t]
                    if behind:
                        found = roll.probe(t, members, ivs + behind, tries, kept)
                    if found is None and yielded:
                        continue
                found = found or roll.probe(t, members, ivs, tries, kept)
            if found is None:
                continue
            # Now, a fresh replica starts if the solver or the previous plan starts it, or it fills idle room.
            start = t == 0 and (suggested or honoured or promoted)
            for m, hold in zip(members, found, strict=True):
                roll.add(_Interval(m.key, t, t + d, hold))
                if start:
                    starts[m.key] = hold
                else:
                    reservations[m.key] = Reservation(m.key, t, hold)
            break
        for m in members:
            if m.key in chosen and m.running is None and m.key not in starts:
                demoted.add(m.key)
    return Timeline(starts, reservations, frozenset(demoted))


def _layouts(
    inp: PlanningInput, result: SolveResult, assignments: Sequence[Assignment]
) -> tuple[MigLayout, ...]:
    """Target layouts keeping existing instances and only the new ones a placed replica uses."""
    used: dict[tuple[str, int], set[tuple[str, int]]] = {}
    for a in assignments:
        for g in a.gpus:
            if g.mig_profile is not None:
                used.setdefault((a.node, g.index), set()).add((g.mig_profile, g.mig_start or 0))
    planned = {(lay.node, lay.gpu): lay for lay in result.mig_layouts}
    out: list[MigLayout] = []
    for n in inp.cluster.nodes:
        for gpu in n.gpus:
            key = (n.name, gpu.index)
            current = {(i.profile, i.start) for i in gpu.mig.instances} if gpu.mig is not None else None
            lay = planned.get(key)
            if lay is None and current is None:
                continue
            target = {(i.profile, i.start) for i in lay.instances} if lay is not None else set(current or ())
            keep = {i for i in target if current is not None and i in current} | used.get(key, set())
            instances = sorted(keep, key=lambda i: i[1])
            out.append(
                MigLayout.model_validate(
                    {
                        "node": n.name,
                        "gpu": gpu.index,
                        "instances": [{"profile": p, "start": s} for p, s in instances],
                    }
                )
            )
    return tuple(out)


def with_reservations(
    inp: PlanningInput,
    problem: PlacementProblem,
    result: SolveResult,
    catalog: HardwareCatalog,
    now: datetime,
    previous: Mapping[Key, Reservation] | None = None,
    deadline: Deadline | None = None,
) -> SolveResult:
    """The solver result with the timeline applied: starts that would delay a reservation ahead of them
    wait, waiting replicas that fit now start, and every waiting replica carries its predicted start and
    reserved GPUs. When ``deadline`` stops the roll first, the solver's plan is kept as it is and only
    the replicas reached get a predicted start (:data:`TIMELINE_CUT` in the terms)."""
    requests = {r.key: r for r in problem.requests}
    waiting = sum(1 for r in problem.requests if r.running is None)
    if waiting * len(problem.nodes) > MAX_PROBE_SIZE:
        log.info("timeline skipped: %d waiting replicas on %d nodes", waiting, len(problem.nodes))
        return result
    tl = roll_forward(inp, problem, result, catalog, now, previous or {}, deadline)
    if tl.cut:
        log.info("predicted starts cut by the time limit after %d replicas", len(tl.reservations))
        cut = _predictions_only(result, tl, now)
        return replace(cut, terms={**cut.terms, TIMELINE_CUT: 1.0})
    kept = [a for a in result.assignments if requests[(a.workload, a.replica)].running is not None]
    started = []
    for key, hold in tl.starts.items():
        started.append(
            Assignment(
                workload=key[0],
                replica=key[1],
                node=hold.node,
                gpus=hold.gpus,
                cpu_milli=hold.cpu_milli,
                memory_mib=hold.memory_mib,
                gpu_memory_mib=hold.gpu_memory_mib,
                alternative=hold.alternative,
            )
        )
    assignments = tuple(kept + started)
    placed = {(a.workload, a.replica) for a in assignments}
    reasons = {(u.workload, u.replica): u for u in result.unplaced}
    unplaced: list[Unplaced] = []
    for req in problem.requests:
        if req.key in placed:
            continue
        u = reasons.get(req.key)
        if u is None or req.key in tl.demoted:
            u = Unplaced(
                workload=req.workload,
                replica=req.replica,
                code=RESERVED,
                reason="starting it now would delay the reserved start of a replica ahead of it in the queue",
            )
        unplaced.append(_predicted(u, tl.reservations.get(req.key), now))
    before = {(a.workload, a.replica): a for a in result.assignments}
    changed = len(tl.demoted) + sum(1 for a in started if before.get((a.workload, a.replica)) != a)
    layouts = _layouts(inp, result, assignments)
    if changed:
        trial = replace(result, assignments=assignments, unplaced=tuple(unplaced), mig_layouts=layouts)
        violations = result_violations(trial, inp, catalog)
        if violations:
            # Reservations skip some rules (later quotas, isolation over time): keep the solver's starts.
            log.info("timeline starts rejected (%s); keeping the solver's", violations[0].message)
            return _predictions_only(result, tl, now)
    status = result.status
    if changed and status is PlanStatus.OPTIMAL:
        status = PlanStatus.FEASIBLE  # no longer the solver's proven optimum
    return replace(
        result,
        status=status,
        assignments=assignments,
        unplaced=tuple(unplaced),
        mig_layouts=layouts,
        terms={**result.terms, "timeline_changed": float(changed)},
    )


def _predicted(u: Unplaced, r: Reservation | None, now: datetime) -> Unplaced:
    """``u`` with the reservation's predicted start and GPUs."""
    if r is None:
        return u
    return u.model_copy(
        update={
            "predicted_start": (now + timedelta(seconds=r.start_s)).isoformat(),
            "reserved_node": r.hold.node,
            "reserved_gpus": r.hold.gpus,
        }
    )


def _predictions_only(result: SolveResult, tl: Timeline, now: datetime) -> SolveResult:
    """The solver's result unchanged except for the predicted starts of what waits."""
    unplaced = tuple(
        _predicted(u, tl.reservations.get((u.workload, u.replica)), now) for u in result.unplaced
    )
    return replace(result, unplaced=unplaced)


def previous_reservations(plan: Plan, inp: PlanningInput) -> dict[Key, Reservation]:
    """The reservations a stored plan made (start times are not needed, only where)."""
    out: dict[Key, Reservation] = {}
    for u in plan.unplaced:
        w = inp.workload_by_id.get(u.workload)
        if u.reserved_node is None or w is None:
            continue
        alt = fitting_alternative(w.shapes, u.reserved_gpus)
        shape = w.shapes[alt]
        hold = Holding(
            u.reserved_node, u.reserved_gpus, shape.cpu_milli, shape.memory_mib, alt, shape.gpu_memory_mib
        )
        out[(u.workload, u.replica)] = Reservation((u.workload, u.replica), 0.0, hold)
    return out


def predicted_waits(plan: Plan, now: datetime) -> dict[Key, float | None]:
    """Seconds until each waiting replica's predicted start (``None`` when unknown)."""
    return {
        (u.workload, u.replica): (
            None
            if u.predicted_start is None
            else max(0.0, (datetime.fromisoformat(u.predicted_start) - now).total_seconds())
        )
        for u in plan.unplaced
    }

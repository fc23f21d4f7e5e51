"""The steps from the current state to a plan, ordered and grouped into rounds under the disruption budget.

Kinds: ``preempt`` (stop), ``migrate`` (stop here, start there; ``from`` equal to ``to`` is a restart
that drains a MIG instance being re-partitioned), ``destroy-mig`` (no replica may run on the instance;
the GPU's other instances keep running), ``create-mig``, ``set-sharing`` (a node's sharing mode; its
non-MIG GPUs must be drained when the round starts), ``set-mig-mode`` (a GPU's MIG mode, ``from`` and
``to`` ``on`` or ``off``; the GPU must be drained when the round starts) and ``start`` (the kind
constants live beside ``Action`` in ``models.plan`` and are re-exported here, where the executor imports
them). Inside a round the phases run in that order: stops, MIG destroys, MIG mode and sharing changes,
MIG creates, starts (including the second half of each migration).
:func:`schedule_rounds` replays every round on an :class:`~planner.validation.occupancy.Occupancy`, so no
intermediate state over-commits a GPU, a MIG instance or a node, and each round stays within the moves
and preemptions the policy allows.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from math import inf

from gpuplan.models.cluster import Cluster, parse_sharing_text, sharing_text
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import CREATE as CREATE
from gpuplan.models.plan import DESTROY as DESTROY
from gpuplan.models.plan import DRAIN as DRAIN
from gpuplan.models.plan import MIGRATE as MIGRATE
from gpuplan.models.plan import PREEMPT as PREEMPT
from gpuplan.models.plan import SET_MIG_MODE as SET_MIG_MODE
from gpuplan.models.plan import SET_SHARING as SET_SHARING
from gpuplan.models.plan import START as START
from gpuplan.models.plan import Action, Assignment, MigLayout, MigMode, NodeSharing
from gpuplan.models.policy import Policy
from gpuplan.models.rules import runtime
from gpuplan.models.rules.disruption import (
    moves_allowed,
    preemptions_allowed,
    team_moves_allowed,
    tier_may_be_preempted,
)
from gpuplan.models.rules.runtime import ran_long_enough
from gpuplan.models.workload import Placement, Workload, where
from gpuplan.planner.pipeline.layouts import cluster_with_mig_modes
from gpuplan.planner.validation.occupancy import Key, Occupancy, OverCommitError, holding

log = logging.getLogger(__name__)

#: Phase of each kind inside a round (a migration also starts in the last phase).
PHASE = {PREEMPT: 0, MIGRATE: 0, DESTROY: 1, SET_MIG_MODE: 1, SET_SHARING: 1, CREATE: 2, START: 3}
#: The ``from``/``to`` of a ``set-mig-mode`` action.
MIG_ON, MIG_OFF = "on", "off"


def instance(action: Action) -> tuple[str, int]:
    """The ``(profile, start)`` a MIG action names in its ``detail`` (``profile@start``)."""
    prof, _, start = (action.detail or "").partition("@")
    return prof, int(start)


def mig_actions(cluster: Cluster, layouts: tuple[MigLayout, ...]) -> list[Action]:
    """Destroy then create MIG instances so that each GPU reaches its target layout."""
    destroy: list[Action] = []
    create: list[Action] = []
    for lay in layouts:
        gpu = cluster.node_by_name[lay.node].gpu_by_index[lay.gpu]
        current = {(i.profile, i.start) for i in (gpu.mig.instances if gpu.mig else ())}
        target = {(i.profile, i.start) for i in lay.instances}
        for prof, start in sorted(current - target, key=lambda x: x[1]):
            destroy.append(Action(kind=DESTROY, node=lay.node, gpu=lay.gpu, detail=f"{prof}@{start}"))
        for prof, start in sorted(target - current, key=lambda x: x[1]):
            create.append(Action(kind=CREATE, node=lay.node, gpu=lay.gpu, detail=f"{prof}@{start}"))
    return destroy + create


def sharing_actions(cluster: Cluster, modes: Sequence[NodeSharing]) -> list[Action]:
    """One ``set-sharing`` per node whose mode ``modes`` changes."""
    out = []
    for m in modes:
        now = cluster.node_by_name[m.node].sharing
        if now != m.sharing:
            out.append(
                Action(kind=SET_SHARING, node=m.node, from_=sharing_text(now), to=sharing_text(m.sharing))
            )
    return out


def mig_mode_actions(cluster: Cluster, modes: Sequence[MigMode]) -> list[Action]:
    """One ``set-mig-mode`` per GPU whose MIG mode ``modes`` changes."""
    out = []
    for m in modes:
        was = cluster.node_by_name[m.node].gpu_by_index[m.gpu].mig is not None
        if was != m.enabled:
            out.append(
                Action(
                    kind=SET_MIG_MODE,
                    node=m.node,
                    gpu=m.gpu,
                    from_=MIG_ON if was else MIG_OFF,
                    to=MIG_ON if m.enabled else MIG_OFF,
                )
            )
    return out


def target_mig_mode(action: Action) -> MigMode:
    """The GPU and MIG mode a ``set-mig-mode`` action gives it."""
    assert action.node is not None and action.gpu is not None
    return MigMode(node=action.node, gpu=action.gpu, enabled=action.to == MIG_ON)


def target_sharing(action: Action) -> NodeSharing:
    """The node and mode a ``set-sharing`` action gives it."""
    assert action.node is not None and action.to is not None
    mode = parse_sharing_text(action.to)
    assert mode is not None
    return NodeSharing(node=action.node, sharing=mode)


def ordered_actions(
    inp: PlanningInput,
    assignments: tuple[Assignment, ...],
    layouts: tuple[MigLayout, ...],
    sharing: Sequence[NodeSharing] = (),
    mig_modes: Sequence[MigMode] = (),
) -> list[Action]:
    """Preemptions, migrations and drains, then sharing changes, MIG mode changes, MIG destroys and
    creates, then starts (all round 1). A replica the plan keeps where it runs up to GPU indices that
    are a guess (:meth:`~models.workload.Workload.stays`) does not move."""
    target = {(a.workload, a.replica): a for a in assignments}
    destroyed = {(a.node, a.gpu, instance(a)) for a in mig_actions(inp.cluster, layouts) if a.kind == DESTROY}
    stops: list[Action] = []
    starts: list[Action] = []
    for w in inp.workloads:
        for r, place in enumerate(w.running_on):
            a = target.get((w.id, r))
            if a is None:
                stops.append(Action(kind=PREEMPT, workload=w.id, replica=r, from_=_text(place)))
            elif not w.stays(r, a.node, a.gpus):
                to = where(a.node, a.gpus)
                stops.append(Action(kind=MIGRATE, workload=w.id, replica=r, from_=_text(place), to=to))
            elif destroyed and any(
                (a.node, g.index, (g.mig_profile, g.mig_start)) in destroyed for g in a.gpus
            ):
                # In place: a guessed placement is taken to be the plan's (see :func:`settled`).
                here = where(a.node, a.gpus)
                drain = Action(kind=MIGRATE, workload=w.id, replica=r, from_=here, to=here, detail=DRAIN)
                stops.append(drain)
    running = {(w.id, r) for w in inp.workloads for r in range(len(w.running_on))}
    for a in assignments:
        if (a.workload, a.replica) not in running:
            starts.append(
                Action(kind=START, workload=a.workload, replica=a.replica, to=where(a.node, a.gpus))
            )
    modes = mig_mode_actions(inp.cluster, mig_modes)
    # A GPU's layout after a mode change starts from the mode's (no instance): creates only.
    from_mode = cluster_with_mig_modes(inp.cluster, mig_modes) if modes else inp.cluster
    migs = mig_actions(from_mode, layouts)
    return stops + sharing_actions(inp.cluster, sharing) + modes + migs + starts


def settled(inp: PlanningInput, assignments: Sequence[Assignment]) -> PlanningInput:
    """The input with each guessed running placement (``gpus_guessed``) the plan keeps in place taken at
    the plan's GPU indices: the guess is arbitrary, and this one makes the plan's no-move the truth, so
    that rounds replay without phantom conflicts on those indices."""
    target = {(a.workload, a.replica): a for a in assignments}
    changed: dict[str, Workload] = {}
    for w in inp.workloads:
        if not w.gpus_guessed:
            continue
        places = list(w.running_on)
        for r, place in enumerate(places):
            a = target.get((w.id, r))
            if a is not None and w.stays(r, a.node, a.gpus) and where(a.node, a.gpus) != _text(place):
                places[r] = Placement.parse(where(a.node, a.gpus))
        if places != list(w.running_on):
            changed[w.id] = w.model_copy(update={"running_on": tuple(places)})
    if not changed:
        return inp
    return inp.model_copy(update={"workloads": tuple(changed.get(w.id, w) for w in inp.workloads)})


def current_occupancy(
    inp: PlanningInput, assignments: Sequence[Assignment], catalog: HardwareCatalog
) -> Occupancy:
    """What runs now, guessed indices :func:`settled` to the plan's when that over-commits nothing (else
    as guessed); raises :class:`OverCommitError` when the running work itself over-commits."""
    now_state = settled(inp, assignments)
    if now_state is not inp:
        try:
            return Occupancy.of(now_state.cluster, now_state.workloads, catalog)
        except OverCommitError:
            log.info("guessed GPU indices kept as imported: the plan's clash with work that leaves")
    return Occupancy.of(inp.cluster, inp.workloads, catalog)


def _text(place: Placement) -> str:
    """A running placement in the ``running_on`` syntax."""
    return where(place.node, place.gpus)


@dataclass(frozen=True)
class Schedule:
    """Actions numbered by round, and those no round could take (with the reason)."""

    actions: tuple[Action, ...]
    deferred: tuple[tuple[Action, str], ...] = ()

    @property
    def rounds(self) -> int:
        """Number of rounds used."""
        return max((a.round for a in self.actions), default=0)


def _key(a: Action) -> Key:
    assert a.workload is not None and a.replica is not None
    return (a.workload, a.replica)


def _refusal(a: Action, workloads: Mapping[str, Workload], policy: Policy) -> str | None:
    """Why the policy never allows this stop (a preemption of protected work)."""
    if a.kind != PREEMPT:
        return None
    w = workloads.get(a.workload or "")
    if w is None:
        return None
    tier = policy.tier(w.tier)
    if not w.preemptible:
        return f"workload '{w.id}' is not preemptible"
    if not tier_may_be_preempted(tier, policy.disruption):
        return f"tier '{w.tier}' of workload '{w.id}' may not be preempted"
    return None


def _budgeted(
    stops: Sequence[Action],
    workloads: Mapping[str, Workload],
    policy: Policy,
    runtime_s: Mapping[Key, float],
    elapsed_s: float,
) -> list[Action]:
    """The stops one round may take, in order, within moves/preemptions per round and per team and the
    minimum runtime."""
    budget = policy.disruption
    moves = preempts = 0
    team: Counter[str] = Counter()
    chosen: list[Action] = []
    for a in stops:
        if not ran_long_enough(runtime_s.get(_key(a), inf) + elapsed_s, budget.min_runtime_s):
            continue
        w = workloads.get(a.workload or "")
        name = w.team if w is not None else ""
        if a.kind == PREEMPT:
            if preempts >= preemptions_allowed(budget):
                continue
            preempts += 1
        else:
            if moves >= moves_allowed(budget):
                continue
            per_team = team_moves_allowed(budget)
            if per_team is not None and team[name] >= per_team:
                continue
            moves += 1
            team[name] += 1
        chosen.append(a)
    return chosen


def apply_round(occ: Occupancy, actions: Sequence[Action], targets: Mapping[Key, Assignment]) -> None:
    """Apply one round's actions phase by phase (raises :class:`OverCommitError` on a bad step)."""
    for a in sorted(actions, key=lambda a: PHASE[a.kind]):
        if a.kind in (PREEMPT, MIGRATE):
            occ.stop(_key(a))
        elif a.kind == DESTROY:
            assert a.node is not None and a.gpu is not None
            occ.destroy(a.node, a.gpu, instance(a))
        elif a.kind == CREATE:
            assert a.node is not None and a.gpu is not None
            occ.create(a.node, a.gpu, instance(a))
        elif a.kind == SET_SHARING:
            occ.set_sharing(target_sharing(a))
        elif a.kind == SET_MIG_MODE:
            mode = target_mig_mode(a)
            occ.set_mig_mode(mode.node, mode.gpu, mode.enabled)
    for a in actions:
        if a.kind in (MIGRATE, START):
            occ.start(_key(a), holding(targets[_key(a)]))


def _one_round(
    occ: Occupancy,
    stops: list[Action],
    migs: list[Action],
    starts: list[Action],
    targets: Mapping[Key, Assignment],
) -> tuple[Occupancy, list[Action]]:
    """The largest round (stops given) whose steps all apply; the state after it and its actions. A
    sharing change is taken when its node is drained at the start of the round (so that a round's
    sharing changes may be applied before its evictions)."""
    while True:
        sim = occ.copy()
        for a in stops:
            sim.stop(_key(a))
        taken: list[Action] = []
        for a in migs:
            if a.kind == SET_SHARING:
                change = target_sharing(a)
                if occ.set_sharing_problem(change.node) is None:
                    sim.set_sharing(change)
                    taken.append(a)
                continue
            assert a.node is not None and a.gpu is not None
            if a.kind == SET_MIG_MODE:
                # Like a sharing change: on a GPU drained when the round starts.
                if occ.set_mig_mode_problem(a.node, a.gpu) is None:
                    sim.set_mig_mode(a.node, a.gpu, target_mig_mode(a).enabled)
                    taken.append(a)
                continue
            if a.kind == DESTROY and sim.destroy_problem(a.node, a.gpu, instance(a)) is None:
                sim.destroy(a.node, a.gpu, instance(a))
                taken.append(a)
            elif a.kind == CREATE and sim.create_problem(a.node, a.gpu, instance(a)) is None:
                sim.create(a.node, a.gpu, instance(a))
                taken.append(a)
        blocked = None
        for a in stops:
            if a.kind == MIGRATE:
                try:
                    sim.start(_key(a), holding(targets[_key(a)]))
                except OverCommitError:
                    blocked = a
                    break
        if blocked is None:
            break
        stops = [s for s in stops if s is not blocked]
    for a in starts:
        hold = holding(targets[_key(a)])
        if sim.problem(_key(a), hold) is None:
            sim.start(_key(a), hold)
            taken.append(a)
    return sim, stops + taken


def schedule_rounds(
    occ: Occupancy,
    actions: Sequence[Action],
    targets: Mapping[Key, Assignment],
    workloads: Mapping[str, Workload],
    policy: Policy,
    *,
    runtime_s: Mapping[Key, float] | None = None,
    interval_s: float = 0.0,
) -> Schedule:
    """Number ``actions`` by round so that every round fits the budget and no step over-commits.

    ``occ`` is the current state (not modified); ``targets`` the plan's assignment of every replica a
    migration or start places; ``runtime_s`` how long each running replica has run, and ``interval_s``
    the time between rounds (for the minimum runtime before a move).
    """
    runtime_s = runtime_s or {}
    deferred: list[tuple[Action, str]] = []
    stops: list[Action] = []
    for a in actions:
        if a.kind in (PREEMPT, MIGRATE):
            why = _refusal(a, workloads, policy)
            if why is None:
                stops.append(a)
            else:
                deferred.append((a, why))
    migs = [a for a in actions if a.kind in (DESTROY, CREATE, SET_SHARING, SET_MIG_MODE)]
    starts = [a for a in actions if a.kind == START]
    out: list[Action] = []
    min_run = policy.disruption.min_runtime_s
    state = occ.copy()
    rnd = 1
    while stops or migs or starts:
        chosen = _budgeted(stops, workloads, policy, runtime_s, (rnd - 1) * interval_s)
        state, taken = _one_round(state, chosen, migs, starts, targets)
        if not taken:
            elapsed = (rnd - 1) * interval_s
            young = [a for a in stops if not ran_long_enough(runtime_s.get(_key(a), inf) + elapsed, min_run)]
            if interval_s > 0 and young:
                rnd += 1  # an empty round: the next one may move replicas that ran long enough by then
                continue
            break
        done = {id(a) for a in taken}
        out.extend(a.model_copy(update={"round": rnd}) for a in sorted(taken, key=lambda a: PHASE[a.kind]))
        stops = [a for a in stops if id(a) not in done]
        migs = [a for a in migs if id(a) not in done]
        starts = [a for a in starts if id(a) not in done]
        rnd += 1
    for a in (*stops, *migs, *starts):
        deferred.append((a, "no round within the disruption budget can take it"))
    if deferred:
        log.info("%d action(s) deferred to a later plan: %s", len(deferred), deferred[0][1])
    return Schedule(tuple(out), tuple(deferred))


def runtimes(workloads: Sequence[Workload], now: datetime) -> dict[Key, float]:
    """Seconds each running replica has run at ``now`` (replicas without ``started_at`` are left out)."""
    out: dict[Key, float] = {}
    for w in workloads:
        ran = runtime.runtime_s(w.started_at, now)
        if ran is None:
            continue
        for r in range(len(w.running_on)):
            out[(w.id, r)] = ran
    return out


def plan_actions(
    inp: PlanningInput,
    assignments: tuple[Assignment, ...],
    layouts: tuple[MigLayout, ...],
    catalog: HardwareCatalog,
    now: datetime | None = None,
    interval_s: float = 0.0,
    *,
    sharing: Sequence[NodeSharing] = (),
    mig_modes: Sequence[MigMode] = (),
) -> tuple[Action, ...]:
    """The plan's actions, ordered and numbered by round (in one round, in order, if the current state
    itself over-commits and cannot be replayed)."""
    actions = ordered_actions(inp, assignments, layouts, sharing, mig_modes)
    try:
        occ = current_occupancy(inp, assignments, catalog)
    except OverCommitError as exc:
        log.warning("current state over-commits (%s); actions left unscheduled in one round", exc)
        return tuple(actions)
    sched = schedule_rounds(
        occ,
        actions,
        {(a.workload, a.replica): a for a in assignments},
        inp.workload_by_id,
        inp.policy,
        runtime_s=runtimes(inp.workloads, now) if now is not None else None,
        interval_s=interval_s,
    )
    return sched.actions

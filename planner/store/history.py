"""Plan history for ``gpuplan replan``: the plans in the plan tables (``plans``), diffs, and the usage the
stored plans record for fair share.

A plan replan stores is a ``done`` job of source ``replan`` with its inputs and provenance, written in
one transaction, so a run killed at any point either stored its whole plan or nothing, and the previous
plan stays the latest complete one. The latest plan of any source, an API job's too, is what replan
starts from when it is given no files.
"""

from __future__ import annotations

import itertools
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine

from gpuplan.models.base import InputError
from gpuplan.models.cluster import Cluster, MigInstance, sharing_text
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import GpuUse, Plan
from gpuplan.models.policy import FairShare
from gpuplan.models.rules.fairness import decayed_gpu_hours
from gpuplan.models.workload import where
from gpuplan.planner.pipeline.metrics import gpu_equivalents
from gpuplan.planner.pipeline.timeline import predicted_waits
from gpuplan.planner.store.db import make_engine
from gpuplan.planner.store.plans import PlanStore, StoredJob
from gpuplan.planner.store.records import (
    CLI_SUBMITTER,
    PLAN_KIND,
    JobInput,
    JobRecord,
    JobSource,
    JobStatus,
    now,
)

#: Most stored plans read for fair-share usage, newest first; and how many half-lives back they are read
#: (a GPU-hour that old weighs less than a millionth of one now).
USAGE_PLANS = 500
USAGE_HALF_LIVES = 20


def planned_at(stored: StoredPlan) -> datetime:
    """When a stored plan was made: its planning time (provenance ``now``), else when it was stored."""
    stamp = stored.plan.provenance.get("now")
    return datetime.fromisoformat(stamp) if isinstance(stamp, str) else stored.created_at


def stored_usage(
    plans: Sequence[StoredPlan], now: datetime, fair: FairShare, catalog: HardwareCatalog
) -> dict[str, float]:
    """Decayed GPU-hours per team that stored ``plans`` record: each plan's assignments held from its
    planning time to the next plan's (the latest plan's time onwards is what runs now, counted from the
    workloads), decayed to ``now`` with the policy's half-life."""
    ordered = sorted(plans, key=planned_at)
    usage: dict[str, float] = defaultdict(float)
    for stored, following in itertools.pairwise(ordered):
        start, end = planned_at(stored), planned_at(following)
        workloads = stored.inputs.workload_by_id
        nodes = stored.inputs.cluster.node_by_name
        for a in stored.plan.assignments:
            node = nodes[a.node]
            gpus = sum(gpu_equivalents(g, node.gpu_by_index[g.index].model, catalog) for g in a.gpus)
            usage[workloads[a.workload].team] += decayed_gpu_hours(gpus, start, end, now, fair.half_life_h)
    return dict(usage)


@dataclass(frozen=True)
class StoredPlan:
    """A plan read back from the store, with the input it was made from."""

    id: int
    job_id: str
    created_at: datetime
    plan: Plan
    inputs: PlanningInput
    job: JobRecord


def _stored(found: StoredJob) -> StoredPlan:
    return StoredPlan(
        id=found.number,
        job_id=found.job.id,
        created_at=found.job.created_at,
        plan=Plan.model_validate_json(found.result_json),
        inputs=PlanningInput.model_validate_json(found.input.input_json),
        job=found.job,
    )


def _team(inputs: PlanningInput) -> str | None:
    """The workloads' team when they share one (as the API names a job's team)."""
    teams = {w.team for w in inputs.workloads}
    return teams.pop() if len(teams) == 1 else None


class PlanHistory:
    """The plans in a SQLite file (default ``gpuplan.db``) or a PostgreSQL database."""

    def __init__(self, target: str | None = None, engine: Engine | None = None) -> None:
        self.store = PlanStore(engine or make_engine(target))

    def save(self, plan: Plan, inputs: PlanningInput) -> int:
        """Store a plan with its inputs and provenance as one done job, in one transaction; return its
        number (the plan number replan prints). The audit trail is the API's: what was done through it
        (a plan of replan has none; its job says ``submitted_by`` cli)."""
        provenance = plan.provenance
        solver = str(provenance.get("solver", plan.solver.name))
        time_limit = float(provenance.get("replan_time_limit_s", provenance.get("time_limit_s", 0.0)))
        stamp = now()
        job = JobRecord(
            id=uuid.uuid4().hex,
            source=JobSource.REPLAN,
            kind=PLAN_KIND,
            status=JobStatus.DONE,
            team=_team(inputs),
            solver=solver,
            time_limit_s=time_limit,
            nodes=len(inputs.cluster.nodes),
            workloads=len(inputs.workloads),
            submitted_by=CLI_SUBMITTER,
            created_at=stamp,
            started_at=stamp,
            finished_at=stamp,
            attempts=1,
            plan_status=plan.status.value,
            outcome=None,
            error=None,
        )
        options = {
            "kind": PLAN_KIND,
            "solver": solver,
            "time_limit_s": time_limit,
            "seed": int(provenance.get("seed", 0)),
            "now": provenance.get("now"),
            "deterministic": bool(provenance.get("deterministic", True)),
            "rounds": int(provenance.get("replan_rounds", 1)),
        }
        digest = str(provenance.get("inputs_sha256", ""))
        data = JobInput(digest, inputs.model_dump_json(), options)
        return self.store.save(job, data, plan.model_dump_json(by_alias=True))

    def latest(self) -> StoredPlan | None:
        """The plan that was stored last, by replan or by the API, if any."""
        found = self.store.latest_done(PLAN_KIND)
        return None if found is None else _stored(found)

    def plan(self, number: int) -> StoredPlan:
        """Plan ``number``; an input error when the store holds no plan of that number."""
        found = self.store.done_job(PLAN_KIND, number)
        if found is None:
            raise InputError(f"no plan {number} in the plan history (gpuplan history list shows them)")
        return _stored(found)

    def recent(self, limit: int) -> list[tuple[int, JobRecord, Plan]]:
        """The last ``limit`` plans, newest first: number, job and plan."""
        return [
            (number, job, Plan.model_validate_json(text))
            for number, job, text in self.store.done_results(PLAN_KIND, limit)
        ]

    def count(self) -> int:
        """Number of stored plans."""
        return self.store.count_done(PLAN_KIND)

    def with_usage(self, inp: PlanningInput, now: datetime, catalog: HardwareCatalog) -> PlanningInput:
        """``inp`` with its fair-share policy's ``history_usage`` (replaced, never added to) and
        ``history_until`` read from the stored plans (:func:`stored_usage`) of the last
        :data:`USAGE_HALF_LIVES` half-lives before ``now``; ``inp`` itself without a fair-share policy."""
        fair = inp.policy.fair_share
        if fair is None:
            return inp
        plans: list[StoredPlan] = []
        for number, _, _ in self.store.done_results(PLAN_KIND, USAGE_PLANS):
            stored = self.plan(number)
            if planned_at(stored) > now:
                continue
            plans.append(stored)
            if (now - planned_at(stored)).total_seconds() > USAGE_HALF_LIVES * fair.half_life_h * 3600:
                break
        until = max((planned_at(p) for p in plans), default=None)
        update = {"history_usage": stored_usage(plans, now, fair, catalog), "history_until": until}
        policy = inp.policy.model_copy(update={"fair_share": fair.model_copy(update=update)})
        return inp.model_copy(update={"policy": policy})


@dataclass(frozen=True)
class PlanDiff:
    """What changed from one plan to the next. ``stops`` are replicas the plan stops while their work is
    still asked for; ``finished`` those whose work is gone (ended, or no longer in the cluster). ``moves``
    are replicas that run and are placed elsewhere; a replica that never started (an earlier plan placed
    it, but it still waits) is a new start wherever it is placed now. ``layouts`` and ``sharing`` are the
    GPUs whose MIG layout (or mode) and the nodes whose sharing mode differ, each taken as its plan leaves
    it (what the plan changes, else what its inputs hold): so a plan whose actions change no layout shows
    no layout change."""

    moves: tuple[str, ...]
    new_starts: tuple[str, ...]
    stops: tuple[str, ...]
    wait_changes: tuple[str, ...]
    layouts: tuple[str, ...] = ()
    waits_started: tuple[str, ...] = ()
    waits_ended: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()
    sharing: tuple[str, ...] = ()

    def render(self) -> str:
        """Human-readable lines (one section per kind of change)."""
        out = [
            f"{len(self.moves)} move(s), {len(self.new_starts)} new start(s), {len(self.stops)} stop(s), "
            f"{len(self.finished)} finished, "
            f"{len(self.layouts)} MIG layout(s) changed, {len(self.sharing)} sharing mode(s) changed, "
            f"{len(self.waits_started)} wait(s) started, "
            f"{len(self.waits_ended)} wait(s) ended, {len(self.wait_changes)} predicted wait(s) changed"
        ]
        for title, lines in (
            ("moves", self.moves),
            ("new starts", self.new_starts),
            ("stops", self.stops),
            ("finished", self.finished),
            ("MIG layouts", self.layouts),
            ("sharing modes", self.sharing),
            ("waits started", self.waits_started),
            ("waits ended", self.waits_ended),
            ("predicted waits", self.wait_changes),
        ):
            if lines:
                out.append(f"{title}:")
                out.extend(f"  {line}" for line in lines)
        return "\n".join(out)


@dataclass(frozen=True)
class _Place:
    """Where a replica is, and whether its GPU indices are a guess (``gpus_guessed``, kept in place):
    then only its node and the GPUs it holds say where it is."""

    text: str
    node: str
    held: tuple[tuple[int, str], ...]
    guessed: bool

    def same(self, other: _Place) -> bool:
        """The same place, up to indices either side only guessed."""
        if self.text == other.text:
            return True
        loose = self.guessed or other.guessed
        return loose and self.node == other.node and self.held == other.held


def _place(node: str, gpus: tuple[GpuUse, ...], guessed: bool) -> _Place:
    held = tuple(sorted((g.milli or 0, g.mig_profile or "") for g in gpus))
    return _Place(where(node, gpus), node, held, guessed)


def _where(plan: Plan, inputs: PlanningInput | None = None) -> dict[tuple[str, int], _Place]:
    workloads = inputs.workload_by_id if inputs is not None else {}
    out = {}
    for a in plan.assignments:
        w = workloads.get(a.workload)
        guessed = w is not None and w.gpus_guessed and w.stays(a.replica, a.node, a.gpus)
        out[(a.workload, a.replica)] = _place(a.node, a.gpus, guessed)
    return out


def _running(inputs: PlanningInput) -> dict[tuple[str, int], _Place]:
    return {
        (w.id, r): _place(p.node, tuple(GpuUse(**g.model_dump()) for g in p.gpus), w.gpus_guessed)
        for w in inputs.workloads
        for r, p in enumerate(w.running_on)
    }


def _wait(seconds: float | None) -> str:
    return "unknown" if seconds is None else f"{seconds / 60:.0f} min"


def _layout_text(instances: tuple[MigInstance, ...] | None) -> str:
    """A GPU's MIG state in words: ``MIG off``, ``no instances`` or its instances (``3g.40gb@0 ...``)."""
    if instances is None:
        return "MIG off"
    return (
        " ".join(f"{i.profile}@{i.start}" for i in sorted(instances, key=lambda i: i.start)) or "no instances"
    )


def _layouts(plan: Plan | None, cluster: Cluster | None = None) -> dict[tuple[str, int], str]:
    """Each GPU's MIG state as ``plan`` leaves it, in words: the plan's MIG modes and layouts over what
    ``cluster`` (its inputs) holds; without a cluster, only the GPUs the plan names."""
    state: dict[tuple[str, int], tuple[MigInstance, ...] | None] = {}
    if cluster is not None:
        state = {
            (n.name, g.index): None if g.mig is None else g.mig.instances
            for n in cluster.nodes
            for g in n.gpus
        }
    for m in plan.mig_modes if plan is not None else ():
        state[(m.node, m.gpu)] = () if m.enabled else None
    for lay in plan.mig_layouts if plan is not None else ():
        state[(lay.node, lay.gpu)] = lay.instances
    return {k: _layout_text(v) for k, v in state.items()}


def _layout_changes(
    previous: Plan | None, current: Plan, before: Cluster | None, after: Cluster | None
) -> list[str]:
    """GPUs whose MIG state differs between the previous plan (or, without one, the cluster ``before``
    as it runs) and the current one, each as its plan leaves it (``none``: not known on that side)."""
    old, new = _layouts(previous, before), _layouts(current, after)
    return [
        f"{node}:{gpu}: {old.get((node, gpu), 'none')} -> {new.get((node, gpu), 'none')}"
        for node, gpu in sorted(old.keys() | new.keys())
        if old.get((node, gpu)) != new.get((node, gpu))
    ]


def _modes(plan: Plan | None, cluster: Cluster | None) -> dict[str, str]:
    """Each node's sharing mode as ``plan`` leaves it (its changes over what ``cluster`` holds)."""
    out = {} if cluster is None else {n.name: sharing_text(n.sharing) for n in cluster.nodes if n.sharing}
    for change in plan.sharing if plan is not None else ():
        out[change.node] = sharing_text(change.sharing)
    return out


def _sharing_changes(
    previous: Plan | None, current: Plan, before: Cluster | None, after: Cluster | None
) -> list[str]:
    """Nodes whose sharing mode differs between the previous plan (or the cluster as it runs) and the
    current one, each as its plan leaves it."""
    old, new = _modes(previous, before), _modes(current, after)
    return [
        f"{node}: {old.get(node, 'none')} -> {new.get(node, 'none')}"
        for node in sorted(old.keys() | new.keys())
        if old.get(node) != new.get(node)
    ]


def _waits(plan: Plan) -> dict[tuple[str, int], str]:
    return {(u.workload, u.replica): u.code for u in plan.unplaced}


def plan_diff(
    previous: Plan | None,
    current: Plan,
    running: PlanningInput | None = None,
    previous_inputs: PlanningInput | None = None,
) -> PlanDiff:
    """Moves, new starts, stops, finished work, changed MIG layouts, waits started and ended, and changed
    predicted waits from ``previous`` to ``current``; without a previous plan, only the placements, from
    what ``running`` (the current plan's inputs) says runs now. A placement whose GPU indices are a guess
    on either side (``gpus_guessed``) moves only when its node or the GPUs it holds change. A replica the
    current plan no longer places is a stop when ``running`` still asks for it, else finished."""
    if previous is not None:
        before = _where(previous, previous_inputs)
    elif running is not None:
        before = _running(running)
    else:
        before = {}
    after = _where(current, running)
    # Replicas that run now (what ``running`` says; all of them without it): only these can move.
    runs = (
        None if running is None else {(w.id, r) for w in running.workloads for r in range(len(w.running_on))}
    )
    changed = [k for k, v in sorted(after.items()) if k in before and not before[k].same(v)]
    moves = [
        f"{k[0]}#{k[1]}: {before[k].text} -> {after[k].text}" for k in changed if runs is None or k in runs
    ]
    starts = [f"{k[0]}#{k[1]}: {v.text}" for k, v in sorted(after.items()) if k not in before]
    starts += [
        f"{k[0]}#{k[1]}: {after[k].text} (planned on {before[k].text} before, never started)"
        for k in changed
        if runs is not None and k not in runs
    ]
    asked = {} if running is None else {w.id: w.replicas for w in running.workloads}
    gone = [k for k in sorted(before) if k not in after]
    stops = [
        f"{k[0]}#{k[1]}: was {before[k].text}" for k in gone if running is None or k[1] < asked.get(k[0], 0)
    ]
    finished = [
        f"{k[0]}#{k[1]}: was {before[k].text}"
        for k in gone
        if running is not None and k[1] >= asked.get(k[0], 0)
    ]
    changes: list[str] = []
    layouts: list[str] = []
    sharing: list[str] = []
    started: list[str] = []
    ended: list[str] = []
    base_after = None if running is None else running.cluster
    base_before = previous_inputs.cluster if previous_inputs is not None else base_after
    if previous is not None or base_after is not None:
        layouts = _layout_changes(previous, current, base_before, base_after)
        sharing = _sharing_changes(previous, current, base_before, base_after)
    if previous is not None:
        old_waits, new_waits = _waits(previous), _waits(current)
        started = [f"{k[0]}#{k[1]}: {code}" for k, code in sorted(new_waits.items()) if k not in old_waits]
        ended = [
            f"{k[0]}#{k[1]}: {f'runs on {after[k].text}' if k in after else 'no longer asked for'}"
            for k in sorted(old_waits)
            if k not in new_waits
        ]
        old_now = datetime.fromisoformat(str(previous.provenance.get("now")))
        new_now = datetime.fromisoformat(str(current.provenance.get("now")))
        old = predicted_waits(previous, old_now)
        new = predicted_waits(current, new_now)
        for k in sorted(new):
            if k not in old:
                continue
            # Compare predicted start times, not waits: time passing alone changes no prediction.
            a = None if old[k] is None else old_now.timestamp() + (old[k] or 0.0)
            b = None if new[k] is None else new_now.timestamp() + (new[k] or 0.0)
            if a != b:
                changes.append(f"{k[0]}#{k[1]}: {_wait(old[k])} -> {_wait(new[k])} from now")
    return PlanDiff(
        tuple(moves), tuple(starts), tuple(stops), tuple(changes),
        layouts=tuple(layouts), waits_started=tuple(started), waits_ended=tuple(ended),
        finished=tuple(finished), sharing=tuple(sharing),
    )  # fmt: skip

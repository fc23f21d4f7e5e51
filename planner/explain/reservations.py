"""Findings from the capacity a plan reserves for waiting replicas: why a replica that fits now still
waits (``RESERVED_FOR_EARLIER``, ``PLANNED_LATER``) and the clause naming a blocked replica's own
reservation. The plan's timeline, read back for the explanations.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuplan.models.plan import CREATE, Counterfactual
from gpuplan.planner.explain import counterfactual as cfs
from gpuplan.planner.explain.findings import PLANNED_LATER, Finding, listed
from gpuplan.planner.explain.state import Key, PlanState
from gpuplan.planner.pipeline.timeline import RESERVED, duration_s
from gpuplan.solvers.problem import Request


@dataclass(frozen=True)
class _Held:
    """Capacity the plan reserves for a waiting replica: its node, readable GPUs, predicted start."""

    node: str
    where: str
    start: datetime
    gpus: frozenset[int]

    @property
    def stamp(self) -> str:
        """The predicted start as ``YYYY-MM-DD HH:MM``."""
        return self.start.strftime("%Y-%m-%d %H:%M")


def _held(st: PlanState, key: Key) -> _Held | None:
    """What the plan reserves for the waiting ``key`` (``None``: no reservation)."""
    u = st.reservations.get(key)
    if u is None or u.reserved_node is None or u.predicted_start is None:
        return None
    gpus = ", ".join(
        f"GPU {g.index}" + (f" ({g.mig_profile} at {g.mig_start})" if g.mig_profile is not None else "")
        for g in u.reserved_gpus
    )
    where = f"{u.reserved_node} {gpus}" if gpus else u.reserved_node
    start = datetime.fromisoformat(u.predicted_start)
    return _Held(u.reserved_node, where, start, frozenset(g.index for g in u.reserved_gpus))


def reserved_note(st: PlanState, key: Key) -> str:
    """``; the plan reserves ... for it from ...`` for a blocked replica the plan reserves capacity for."""
    own = _held(st, key)
    return "" if own is None else f"; the plan reserves {own.where} for it from {own.stamp} (predicted start)"


def fits_but_waits(st: PlanState, key: Key, req: Request) -> Finding | None:
    """Why a replica that fits on the state the plan leaves is not started now: RESERVED_FOR_EARLIER
    when starting it would delay the reserved start of replicas ahead of it in the queue (on GPUs it
    could take now or that are reserved for it), PLANNED_LATER when the plan reserves capacity for it
    later for another reason (its MIG instance is created by a later round, or the plan's order);
    ``None`` when neither holds (a solver limit)."""
    held = {k: h for k in st.reservations if (h := _held(st, k)) is not None}
    own = held.get(key)
    demand = st.demand(req)
    fits = [(st.infos[f.node], f) for shape in req.shapes for f in st.fits_now(shape, demand)]
    if not fits and own is None:
        return None
    room = {(info.name, info.index(p)) for info, f in fits for p in f.option.gpus}
    room |= {(own.node, g) for g in own.gpus} if own is not None else set()
    run_s = duration_s(st.inp.workload_by_id[key[0]], st.inp.policy)
    ends = None if run_s is None else st.now + timedelta(seconds=run_s)
    ahead = sorted(
        (k for k, h in held.items()
         if st.queue_pos[k] < st.queue_pos[key] and (ends is None or h.start < ends)
         and any((h.node, g) in room for g in h.gpus)),
        key=lambda k: st.queue_pos[k],
    )  # fmt: skip
    node = own.node if own is not None else fits[0][0].name
    mine = "" if own is None else f"; {own.where} is reserved for it from {own.stamp} (predicted start)"
    if ahead:
        names = [cfs.replica_name(k, st) for k in ahead]
        starts = sorted({held[k].stamp for k in ahead})
        return Finding(
            RESERVED,
            f"{node} has room for it now, but starting it now would delay the reserved start of "
            f"{listed(names)} ahead of it in the queue (from {listed(starts)}){mine}",
            [node, *names],
        )
    if own is None:
        return None
    created = [
        a for a in st.plan.actions
        if a.kind == CREATE and a.node == own.node and a.gpu in own.gpus and a.round > 1
    ]  # fmt: skip
    why = (
        f"it waits for the MIG re-partition of {own.node} GPU {created[0].gpu} in round "
        f"{created[0].round} of this plan"
        if created
        else "no reservation ahead of it needs that room now: the plan's order starts it then, a re-plan "
        "may start it sooner"
    )
    again = Counterfactual(summary=f"re-plan: {own.node} has room now", kind="replan", changes=())
    return Finding(
        PLANNED_LATER,
        f"{own.where} is reserved for it from {own.stamp} (predicted start); {why}",
        [own.node],
        [],
        [cfs.Candidate(again, frozenset({own.node}))],
    )

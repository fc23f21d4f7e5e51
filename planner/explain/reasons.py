"""Why-not explanations: a reason code and a sentence naming the resources for every waiting replica
and every replica placed on a worse alternative than its first, with verified counterfactuals.

One function, :meth:`Explainer.explain`, computes every reason: the plan (``make_plan`` attaches one to
each waiting replica) and ``gpuplan explain`` / ``GET .../explain/{workload}`` call it on the same state
(:class:`~gpuplan.planner.explain.state.PlanState`, the state the plan leaves, nodes in name order), so
both give the same code, sentence and node.

Codes: ``NO_CAPACITY``, ``NO_NVLINK_CLIQUE`` (no node has, or has free, an all-to-all NVLink group of
the size asked), ``NUMA``, ``GPU_MODEL``, ``MIG_LAYOUT``, ``MIG_MODE`` (no node could host it with its
GPUs' MIG modes as the plan leaves them, but one could with MIG turned off, or on: never
``NEVER_FITS``), ``QUOTA``, ``ISOLATION``, ``OUTRANKED``,
``GANG``, ``GANG_DOMAIN`` (the gang fits only across several values of its domain label),
``DISRUPTION_BUDGET``, ``NEVER_FITS``; for a replica that fits on the state the plan leaves,
``RESERVED_FOR_EARLIER`` (the plan reserves room for it later; starting it now would delay a reservation
ahead of it), ``PLANNED_LATER`` (reserved later for another reason, e.g. its MIG instance is created
by a later round), ``SOLVER_LIMIT`` (no reservation: the solver ran out of time) and ``TRADE_OFF`` (a
better alternative fits but the objective preferred the chosen one). Each alternative shape is
diagnosed on the exact state the plan leaves by relaxing one rule at a time (quota, sharing isolation,
reserved nodes, topology, MIG layout, GPU model, then capacity); the first alternative that could ever
fit gives the code, the others are listed in ``details``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import takewhile

from gpuplan.models.catalog import default_catalog
from gpuplan.models.cluster import Node
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import CREATE, Counterfactual, Explanation, Plan, ReasonDetail
from gpuplan.models.workload import Shape, TopologyNeed
from gpuplan.planner.explain import counterfactual as cfs
from gpuplan.planner.explain.counterfactual import Candidate, Target
from gpuplan.planner.explain.state import Checks, Key, PlanState
from gpuplan.planner.pipeline.deadline import Deadline
from gpuplan.planner.pipeline.migmode import may_switch
from gpuplan.planner.pipeline.sharing import mode_notes
from gpuplan.planner.pipeline.timeline import RESERVED, duration_s
from gpuplan.solvers.placement.options import describe, whole_groups
from gpuplan.solvers.placement.state import NodeInfo
from gpuplan.solvers.problem import Request, ShapeSpec, any_model

log = logging.getLogger(__name__)

NO_CAPACITY = "NO_CAPACITY"
NO_NVLINK_CLIQUE = "NO_NVLINK_CLIQUE"
NUMA = "NUMA"
GPU_MODEL = "GPU_MODEL"
MIG_LAYOUT = "MIG_LAYOUT"
QUOTA = "QUOTA"
ISOLATION = "ISOLATION"
OUTRANKED = "OUTRANKED"
GANG = "GANG"
GANG_DOMAIN = "GANG_DOMAIN"
DISRUPTION_BUDGET = "DISRUPTION_BUDGET"
NEVER_FITS = "NEVER_FITS"
MIG_MODE = "MIG_MODE"
SOLVER_LIMIT = "SOLVER_LIMIT"
TRADE_OFF = "TRADE_OFF"
PLANNED_LATER = "PLANNED_LATER"
#: Codes of a waiting replica that fits on the state the plan leaves.
FITS_NOW = frozenset({SOLVER_LIMIT, RESERVED, PLANNED_LATER})

#: Codes that say the replica could not be placed on the state the plan leaves.
BLOCKED = frozenset(
    {
        NO_CAPACITY, NO_NVLINK_CLIQUE, NUMA, GPU_MODEL, MIG_LAYOUT, MIG_MODE, QUOTA, ISOLATION, OUTRANKED,
        GANG, GANG_DOMAIN, DISRUPTION_BUDGET, NEVER_FITS,
    }
)  # fmt: skip

#: Codes a node's sharing mode may be behind (room of the shape absent or taken, or never there); not a
#: replica over its team's quota, or one that fits after moves or fits now.
MODE_MAY_BLOCK = BLOCKED - {QUOTA, DISRUPTION_BUDGET}

Search = Callable[[PlanState, Target, Request, int], list[Candidate]]


@dataclass
class Finding:
    """The diagnosis of one alternative: code, sentence, named resources and counterfactual searches."""

    code: str
    reason: str
    resources: list[str] = field(default_factory=list)
    searches: list[Search] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)


def _list(items: Sequence[str], limit: int = 4) -> str:
    shown = list(items[:limit])
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(shown) + more


def _ahead(st: PlanState, key: Key, req: Request) -> bool:
    """Whether ``key`` comes before ``req`` in the queue (higher tier or priority, longer wait, or the
    smaller workload id and replica among equals: never the input's row order)."""
    return st.queue_pos[key] < st.queue_pos[req.key]


def _capacity(st: PlanState, target: Target, req: Request, k: int) -> Finding:
    """NO_CAPACITY, or who took the capacity (OUTRANKED), or what moves would free it (DISRUPTION_BUDGET)."""
    shape = req.shapes[k]
    what = describe(shape)
    nodes = cfs.candidate_nodes(st, req, shape)
    for n in nodes:
        ahead = [
            key
            for key in st.occupants[n]
            if key not in st.was_running and key not in target.members and _ahead(st, key, req)
        ]
        ahead.sort(key=lambda key: (st.requests[key].tier_rank, -st.gpu_milli(key), key))
        removed = cfs.clearance(st, req, shape, n, ahead)
        if removed:
            node = st.infos[n].name
            names = [cfs.replica_name(key, st) for key in removed]
            return Finding(
                OUTRANKED,
                f"the capacity on {node} that could hold {what} went to higher-tier or older work "
                f"placed in this plan: {_list(names)}",
                [node, *names],
                [cfs.migrations, cfs.waits],
            )
    migrations = cfs.migrations(st, target, req, k)
    moves = [c for c in migrations if c.counterfactual.kind == "migrate" and c.counterfactual.disruption]
    if moves:
        budget = st.inp.policy.disruption
        used = sum(1 for a in st.plan.actions if a.kind in ("migrate", "preempt"))
        first = moves[0].counterfactual
        names = [cfs.replica_name((c.workload or "", c.replica or 0), st) for c in first.changes]
        node = first.changes[0].node or ""
        return Finding(
            DISRUPTION_BUDGET,
            f"{what} would fit on {node} after moving running {_list(names)}, which the disruption "
            f"budget did not allow this round ({budget.max_moves_per_round} moves per round, {used} used "
            "by this plan)",
            [node, *names],
            [cfs.waits],
            migrations,
        )
    pools = sorted({st.infos[n].spec.pool or st.infos[n].name for n in nodes})
    free = []
    for n in nodes[:4]:
        info, state = st.infos[n], st.state(n)
        gpus = st.free_milli(n, shape.models)
        free.append(f"{info.name} {gpus / 1000:g} GPU, {state.cpu} mCPU, {state.mem} MiB")
    where = f" in {_list(pools)}" if pools else ""
    return Finding(
        NO_CAPACITY,
        f"no free capacity of this shape ({what}){where}; most free: {_list(free)}",
        [st.infos[n].name for n in nodes[:4]],
        [cfs.waits],
        migrations,
    )


def _quota_sentence(st: PlanState, req: Request, k: int) -> tuple[str, list[str]]:
    shape = req.shapes[k]
    demand = st.demand(req)
    rules = st.placer.rules
    fit = next(st.fits_now(shape, demand, Checks(quota=False)))
    info = st.infos[fit.node]
    parts, names = [], []
    for i, c in zip(demand.quotas, rules.charges(info, shape, fit.option.gpus, demand), strict=True):
        short = rules.used[i] + c - rules.limits[i]
        if short <= 0:
            continue
        q = st.inp.policy.quotas[i]
        where = q.gpu_model or (f"pool {q.pool}" if q.pool else "GPUs")
        u = rules.unit
        parts.append(
            f"team {q.team} would exceed its quota on {where} by {short / u:.3g} GPU-equivalents "
            f"(uses {rules.used[i] / u:.3g} of {q.gpus:g}, needs {c / u:.3g})"
        )
        names.append(f"quota {i} ({q.team}, {where})")
    return "; ".join(parts) + f"; {info.name} has room", [*names, info.name]


def _mig_layout(st: PlanState, target: Target, req: Request, k: int) -> Finding:
    """MIG_LAYOUT: GPUs that would hold the profile after a re-partition the policy did not make."""
    shape = req.shapes[k]
    reparts = cfs.repartitions(st, target, req, k)
    why = (
        "re-partitioning is not allowed (policy mig.allow_repartition is false)"
        if not st.inp.policy.mig.allow_repartition
        else "re-partitioning was not worth its cost this round"
    )
    gpus = [f"{c.counterfactual.changes[0].node} GPU {c.counterfactual.changes[0].gpu}" for c in reparts]
    return Finding(
        MIG_LAYOUT,
        f"no free {shape.mig_profile} instance on an allowed GPU and no valid place to create one; "
        f"{_list(gpus)} could hold it after a re-partition, but {why}",
        gpus,
        [cfs.migrations],
        reparts,
    )


def _switch_why(st: PlanState, node: str, flips: Sequence[int], enabled: bool) -> str:
    """Why the plan did not switch the MIG mode of ``flips`` on ``node``: the policy's switch that
    forbids it, GPUs not drained, or switching not placing more of the queue."""
    mig = st.inp.policy.mig
    if not may_switch(st.inp.policy, enabled):
        switch = "mig.allow_repartition" if not mig.allow_repartition else "mig.allow_create"
        return f"the policy does not allow it ({switch} is false)"
    running = {(p.node, g.index) for w in st.inp.workloads for p in w.running_on for g in p.gpus}
    busy = [f"{node} GPU {i}" for i in flips if (node, i) in running]
    if busy:
        return f"{_list(busy)} {'is' if len(busy) == 1 else 'are'} not drained"
    return "switching them did not place more of the queue"


def _mig_mode(st: PlanState, req: Request, shape: ShapeSpec) -> Finding | None:
    """MIG_MODE when no node could host ``shape`` even empty with its GPUs' MIG modes as the plan leaves
    them, but some node could with its MIG-capable GPUs turned off (whole GPUs, fractions) or on (a MIG
    profile): the work fits the fleet as the policy may let it become, so it is never ``NEVER_FITS``."""
    hosts = st.switched_hosts(shape, req.team)
    if not hosts:
        return None
    node, flips = hosts[0]
    enabled = shape.kind == "mig"
    gpus = [f"{node} GPU {i}" for i in flips]
    return Finding(
        MIG_MODE,
        f"no node could host {describe(shape)} with its GPUs' MIG modes as they are; turning MIG "
        f"{'on' if enabled else 'off'} on {_list(gpus)} would serve it, but "
        f"{_switch_why(st, node, flips, enabled)}",
        gpus,
        [cfs.new_nodes],
    )


def _mig_mode_note(st: PlanState, req: Request) -> str:
    """``; turning MIG off on ... would give it room now, but ...`` when some alternative of a replica
    blocked on the state the plan leaves would fit once MIG-capable GPUs that nothing uses there
    switched MIG mode (empty if none)."""
    demand = st.demand(req)
    for shape in req.shapes:
        hosts = st.switched_now(shape, demand)
        if hosts:
            node, flips = hosts[0]
            enabled = shape.kind == "mig"
            gpus = _list([f"{node} GPU {i}" for i in flips])
            why = _switch_why(st, node, flips, enabled)
            return f"; turning MIG {'on' if enabled else 'off'} on {gpus} would give it room now, but {why}"
    return ""


def _missing_clique(st: PlanState, req: Request, shape: ShapeSpec) -> Finding | None:
    """NO_NVLINK_CLIQUE when no node, even empty, has ``shape.gpus`` GPUs joined all-to-all by NVLink
    but some node would hold the GPUs over PCIe (e.g. 8 GPUs on a DGX-1 cube-mesh, whose largest
    NVLink clique has 4)."""
    if shape.kind != "whole" or shape.gpus < 2 or shape.topology is not TopologyNeed.NVLINK:
        return None
    hosts = [st.infos[n] for n in st.fits_empty(replace(shape, topology=TopologyNeed.ANY), req.team)]
    if not hosts:
        return None

    def clique(info: NodeInfo) -> int:
        allowed = {
            info.index(p) for p, m in enumerate(info.models) if not shape.models or m.name in shape.models
        }
        return max((len(c & allowed) for c in info.spec.nvlink_cliques), default=1)

    best = min(hosts, key=lambda i: (-clique(i), i.name))
    return Finding(
        NO_NVLINK_CLIQUE,
        f"no node has {shape.gpus} GPUs joined all-to-all by NVLink: {best.name} has {len(best.spec.gpus)} "
        f"GPUs but its largest NVLink clique has {clique(best)}",
        [best.name],
        [cfs.relaxations, cfs.new_nodes],
    )


def diagnose(st: PlanState, target: Target, req: Request, k: int) -> Finding:
    """Why alternative ``k`` of ``req`` cannot be placed on the current state."""
    shape = req.shapes[k]
    demand = st.demand(req)
    what = describe(shape)
    fit = st.first_fit(shape, demand)
    if fit is not None:
        node = st.infos[fit.node].name
        again = Counterfactual(summary=f"re-plan: {node} has room now", kind="replan", changes=())
        replan = cfs.Candidate(again, frozenset({node}))
        return Finding(
            SOLVER_LIMIT, f"{node} has room for {what} on the state this plan leaves", [node], [], [replan]
        )
    if not any(True for _ in st.fits_empty(shape, req.team)):
        if shape.kind == "mig" and cfs.repartitions(st, target, req, k):
            return _mig_layout(st, target, req, k)
        hosts = [st.infos[n].name for n in st.fits_empty(shape, None)]
        if hosts:
            return Finding(
                ISOLATION,
                f"{what} fits only on nodes reserved for other teams by team-exclusive rules: {_list(hosts)}",
                hosts[:4],
                [cfs.team_admissions],
            )
        clique = _missing_clique(st, req, shape)
        if clique is not None:
            return clique
        switch = _mig_mode(st, req, shape)
        if switch is not None:
            return switch
        present = {m.name for i in st.infos for m in i.models}
        if shape.models and not shape.models & present:
            return Finding(
                GPU_MODEL,
                f"none of the allowed GPU models ({_list(sorted(shape.models))}) exists in the cluster",
                sorted(shape.models),
                [cfs.relaxations, cfs.new_nodes],
            )
        big = st.largest(shape.models)
        largest = (
            ""
            if big is None
            else f"; the largest eligible node, {big.name}, has {len(big.spec.gpus)} GPUs, "
            f"{big.spec.cpu_milli} mCPU and {big.spec.memory_mib} MiB"
        )
        return Finding(
            NEVER_FITS,
            f"no node of the cluster could host {what}, even if empty{largest}",
            [] if big is None else [big.name],
            [cfs.new_nodes],
        )
    if st.first_fit(shape, demand, Checks(quota=False)) is not None:
        sentence, names = _quota_sentence(st, req, k)
        return Finding(QUOTA, sentence, names, [cfs.quota_raises])
    fit = st.first_fit(shape, demand, Checks(tags=False))
    if fit is not None:
        info = st.infos[fit.node]
        gpus = [f"{info.name} GPU {info.index(p)}" for p in fit.option.gpus]
        return Finding(
            ISOLATION,
            f"{_list(gpus)} has room for {what} but serves a team or tier that isolation rules keep apart "
            f"from team {req.team} ({req.tier})",
            gpus,
            [cfs.migrations],
        )
    fit = st.first_fit(shape, demand, Checks(reserved=False))
    if fit is not None:
        node = st.infos[fit.node].name
        return Finding(
            ISOLATION,
            f"{node} has room for {what} but a team-exclusive rule reserves it for another team",
            [node],
            [cfs.team_admissions, cfs.migrations],
        )
    if shape.kind == "whole" and shape.gpus > 1 and shape.topology is not TopologyNeed.ANY:
        fit = st.first_fit(replace(shape, topology=TopologyNeed.ANY), demand)
        if fit is not None:
            info, state = st.infos[fit.node], st.state(fit.node)
            loose = replace(shape, topology=TopologyNeed.ANY, gpus=1)
            free = len(whole_groups(info, state, loose)[0]) if whole_groups(info, state, loose) else 0
            tight = replace(shape, gpus=1)
            best = max((len(g) for g in whole_groups(info, state, tight)), default=0)
            if shape.topology is TopologyNeed.NVLINK:
                best = max(
                    (
                        sum(1 for p, f in enumerate(state.free) if f == 1000 and info.index(p) in c)
                        for c in info.spec.nvlink_cliques
                    ),
                    default=0,
                )
                return Finding(
                    NO_NVLINK_CLIQUE,
                    f"no {shape.gpus} free GPUs forming an NVLink clique: {info.name} has {free} free GPUs "
                    f"but at most {best} in one clique",
                    [info.name],
                    [cfs.relaxations, cfs.migrations],
                )
            return Finding(
                NUMA,
                f"no {shape.gpus} free GPUs on one NUMA node: {info.name} has {free} free GPUs but at most "
                f"{best} on one NUMA node",
                [info.name],
                [cfs.relaxations, cfs.migrations],
            )
    if shape.kind == "mig" and cfs.repartitions(st, target, req, k):
        return _mig_layout(st, target, req, k)
    if shape.models:
        fit = st.first_fit(any_model(shape, st.catalog), demand)
        if fit is not None:
            info = st.infos[fit.node]
            other = info.models[fit.option.gpus[0]].name if fit.option.gpus else info.models[0].name
            return Finding(
                GPU_MODEL,
                f"every GPU of the allowed models ({_list(sorted(shape.models))}) that could hold {what} "
                f"is taken; {info.name} has room on {other}",
                [*sorted(shape.models), info.name],
                [cfs.relaxations, cfs.migrations, cfs.waits],
            )
    return _capacity(st, target, req, k)


def _targets(st: PlanState, plan: Plan) -> list[tuple[Target, Request]]:
    waiting = [(u.workload, u.replica) for u in plan.unplaced]
    gangs: dict[str, list[Key]] = {}
    for key in waiting:
        g = st.requests[key].gang
        if g is not None:
            gangs.setdefault(g, []).append(key)
    out = []
    for key in waiting:
        req = st.requests[key]
        members = tuple(gangs[req.gang]) if req.gang is not None else (key,)
        out.append((Target(key, members), req))
    for a in plan.assignments:
        if a.alternative > 0:
            key = (a.workload, a.replica)
            req = st.requests[key]
            out.append((Target(key, (key,), a.alternative), replace(req, shapes=req.shapes[: a.alternative])))
    return out


def _gang_fits(target: Target, req: Request, nodes: list[str]) -> Finding:
    """SOLVER_LIMIT: every waiting member of the gang fits on ``nodes`` on the state the plan leaves."""
    replan = cfs.Candidate(
        Counterfactual(summary="re-plan: the whole gang fits now", kind="replan", changes=()),
        frozenset(nodes),
    )
    return Finding(
        SOLVER_LIMIT,
        f"all {len(target.members)} waiting replicas of gang '{req.gang}' fit on the state this plan "
        f"leaves ({_list(nodes)})",
        nodes,
        [],
        [replan],
    )


def _gang_in_domain(st: PlanState, target: Target, req: Request) -> Finding | None:
    """For a gang with a domain label: SOLVER_LIMIT if it fits inside one value of the label now,
    GANG_DOMAIN if it fits only across values; ``None`` (no domain, or it does not fit at all)."""
    ordered = sorted(target.members, key=lambda k: (k != target.key, k))
    domain = next((st.requests[k].gang_domain for k in ordered if st.requests[k].gang_domain), None)
    if domain is None:
        return None
    tight = [replace(st.requests[k], running=None, gang_domain=domain) for k in ordered]
    with st.trial():
        placed, failed = st.placer.place_gang(tight)
    if failed is None:
        return _gang_fits(target, req, sorted({a.node for a in placed}))
    with st.trial():
        _, failed = st.placer.place_gang([replace(r, gang_domain=None) for r in tight])
    if failed is not None:
        return None
    asked = sum(min(s.gpu_milli_total for s in r.shapes) for r in tight)
    shape = req.shapes[0]
    members: dict[str, list[str]] = {}
    for n in st.by_name:
        info = st.infos[n]
        value = info.spec.labels.get(domain)
        if value is not None and st.allowed(info, req.team):
            members.setdefault(value, []).append(info.name)

    def room(value: str) -> int:
        """Free GPU milli of the allowed models in ``value`` (MIG gangs: how many members it holds)."""
        if asked:
            return sum(st.free_milli(st.pos[name], shape.models) for name in members[value])

        def inside(info: NodeInfo) -> bool:
            return info.spec.labels.get(domain) == value

        with st.trial():
            return sum(1 for _ in takewhile(lambda r: st.placer.place(r, inside) is not None, tight))

    rooms = {v: room(v) for v in members}
    best = min(rooms, key=lambda v: (-rooms[v], v), default=None)
    wanted = f"{asked / 1000:g} GPUs" if asked else f"{len(tight)} x {describe(shape)}"
    if best is None:
        largest = "no node carries that label"
    else:
        held = f"has {rooms[best] / 1000:g} free GPUs" if asked else f"holds {rooms[best]} of them"
        largest = f"the one with the most room, {domain}={best}, {held} ({_list(members[best])})"
    return Finding(
        GANG_DOMAIN,
        f"gang '{req.gang}' fits only across several values of node label '{domain}': it asks for "
        f"{wanted} inside one; {largest}",
        [] if best is None else [f"{domain}={best}", *members[best]],
    )


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


def _reserved_note(st: PlanState, key: Key) -> str:
    """``; the plan reserves ... for it from ...`` for a blocked replica the plan reserves capacity for."""
    own = _held(st, key)
    return "" if own is None else f"; the plan reserves {own.where} for it from {own.stamp} (predicted start)"


def _fits_but_waits(st: PlanState, key: Key, req: Request) -> Finding | None:
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
            f"{_list(names)} ahead of it in the queue (from {_list(starts)}){mine}",
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


@dataclass
class Explainer:
    """Explains targets on one plan state; counterfactuals are verified by ``solver`` re-solves."""

    state: PlanState
    counterfactuals: int = 3
    solver: str = "cpsat"
    time_limit_s: float = 2.0
    deadline: float | None = None
    verified: dict[str, Counterfactual | None] = field(default_factory=dict)

    def explain(self, target: Target, req: Request) -> Explanation:
        """The explanation of one target (its replica waits, or runs on alternative ``alternatives``):
        the one place a reason (code, sentence, named resources) is computed, for the plan and for
        ``gpuplan explain`` alike; counterfactuals are searched and verified when asked for."""
        st = self.state
        with st.trial():
            st.lift([target.key] if target.alternatives is not None else [])
            extra: set[str] = set()
            gang_note = ""
            blocker = req
            whole_gang: Finding | None = None
            if len(target.members) > 1:
                whole_gang = _gang_in_domain(st, target, req)
            if len(target.members) > 1 and whole_gang is None:
                placed_before = 0
                for key in sorted(target.members, key=lambda k: (k != target.key, k)):
                    other = replace(st.requests[key], running=None, gang=None)
                    a = st.placer.place(other)
                    if a is None:
                        blocker = st.requests[key]
                        break
                    placed_before += 1
                    extra.add(a.node)
                else:
                    whole_gang = _gang_fits(target, req, sorted(extra))
                if placed_before < len(target.members):
                    gang_note = (
                        f"only {placed_before} of {len(target.members)} waiting replicas of gang "
                        f"'{req.gang}' fit now; {cfs.replica_name(blocker.key, st)} does not: "
                    )
            if whole_gang is not None:
                findings = [whole_gang]
            else:
                findings = [diagnose(st, target, blocker, k) for k in range(len(blocker.shapes))]
            for k, f in enumerate(findings):
                if self.counterfactuals and not self.late():
                    for search in f.searches:
                        if target.alternatives is not None and search is cfs.relaxations:
                            continue  # relaxing the better alternative only reproduces the chosen one
                        f.candidates.extend(search(st, target, blocker, k))
                if extra:
                    f.candidates = [replace(c, nodes=c.nodes | extra) for c in f.candidates]
            primary = _primary(findings)
            if target.alternatives is None and primary.code == SOLVER_LIMIT:
                primary = _fits_but_waits(st, target.key, req) or primary
        code, reason = primary.code, primary.reason
        if gang_note:
            code, reason = GANG, gang_note + primary.reason
        elif target.alternatives is not None and code == SOLVER_LIMIT:
            code = TRADE_OFF
            reason = f"{reason}; the objective preferred alternative {target.alternatives}"
        if target.alternatives is None and code in BLOCKED:
            reason += _reserved_note(st, target.key)
        if target.alternatives is None and code in BLOCKED - {MIG_MODE, NEVER_FITS, QUOTA, ISOLATION}:
            reason += _mig_mode_note(st, blocker)
        details = tuple(
            ReasonDetail(alternative=k, code=f.code, reason=f.reason) for k, f in enumerate(findings)
        )
        searched = findings if any(f is primary for f in findings) else [primary, *findings]
        verified = self._verify(target, blocker, [c for f in searched for c in f.candidates])
        return Explanation(
            workload=target.key[0],
            replica=target.key[1],
            alternative=None if target.alternatives is None else target.alternatives,
            code=code,
            reason=reason,
            resources=tuple(dict.fromkeys(primary.resources)),
            details=details,
            counterfactuals=tuple(verified),
        )

    def late(self) -> bool:
        """Whether the time budget is spent."""
        return self.deadline is not None and time.perf_counter() > self.deadline

    def _cache_key(self, target: Target, req: Request, cand: Candidate) -> str | None:
        """Targets with equal requests on the same plan state verify alike (a lone replica of a
        workload with nothing else placed): the re-solve is keyed by the request and the change."""
        st = self.state
        w = st.inp.workload_by_id[target.key[0]]
        if len(target.members) > 1 or any((w.id, r) in st.assigned for r in range(w.replicas)):
            return None
        changes = [c.model_dump_json(exclude={"workload"}) if c.workload == w.id else c.model_dump_json()
                   for c in cand.counterfactual.changes]  # fmt: skip
        return repr((req.shapes, req.team, req.tier, req.preemptible, target.alternatives, w.alternatives,
                     sorted(cand.nodes), changes))  # fmt: skip

    def _verify(self, target: Target, req: Request, candidates: list[Candidate]) -> list[Counterfactual]:
        ranked = sorted(
            {c.counterfactual.summary: c for c in candidates}.values(),
            key=lambda c: (c.counterfactual.disruption, c.counterfactual.cost, c.counterfactual.summary),
        )
        out: list[Counterfactual] = []
        for cand in ranked[: 2 * self.counterfactuals]:
            if len(out) >= self.counterfactuals or self.late():
                break
            key = self._cache_key(target, req, cand)
            if key is not None and key in self.verified:
                seen = self.verified[key]
                done = None
                if seen is not None:
                    where = {"workload": target.key[0], "replica": target.key[1]}
                    placed = None if seen.placement is None else seen.placement.model_copy(update=where)
                    done = cand.counterfactual.model_copy(
                        update={"verified": True, "verified_by": seen.verified_by, "placement": placed}
                    )
            else:
                done = cfs.verify(
                    self.state.inp,
                    self.state.plan,
                    target,
                    cand,
                    self.state.catalog,
                    self.state.now,
                    solver=self.solver,
                    time_limit_s=self.time_limit_s,
                )
                if key is not None:
                    self.verified[key] = done
            if done is None:
                log.info("counterfactual '%s' for %s did not verify", cand.counterfactual.summary, target.key)
                continue
            out.append(done)
        return cfs.rank(out)


def _primary(findings: list[Finding]) -> Finding:
    """SOLVER_LIMIT if any alternative fits now; else the first alternative that could ever fit."""
    for f in findings:
        if f.code == SOLVER_LIMIT:
            return f
    return next((f for f in findings if f.code != NEVER_FITS), findings[0])


def plan_time(plan: Plan) -> datetime:
    """The planning time recorded in the plan's provenance (now if absent)."""
    text = plan.provenance.get("now")
    return datetime.fromisoformat(text) if isinstance(text, str) else datetime.now(UTC)


def explain_all(
    inp: PlanningInput,
    plan: Plan,
    *,
    catalog: HardwareCatalog | None = None,
    now: datetime | None = None,
    counterfactuals: int = 3,
    solver: str = "cpsat",
    time_limit_s: float = 2.0,
    budget_s: float | None = None,
    only: Collection[str] | None = None,
    reasons_by: Deadline | None = None,
) -> list[Explanation]:
    """Explanations of every waiting replica and every replica on a worse alternative (of the
    workloads ``only`` names, when given). With ``budget_s``, every replica still gets its reason (code,
    sentence, resources: they must match what ``gpuplan explain`` says), but no new counterfactual search
    starts once that many seconds have passed. With ``reasons_by``, no replica's reason is derived once
    that deadline has passed: the replicas not reached get no explanation (they keep what the plan says;
    the caller counts them)."""
    if reasons_by is not None and reasons_by.expired():
        log.info("reasons cut by the time limit before the plan state was built")
        return []
    catalog = catalog or default_catalog()
    start = time.perf_counter()
    st = PlanState(inp, plan, catalog, now or plan_time(plan))
    explainer = Explainer(
        st, counterfactuals, solver, time_limit_s, None if budget_s is None else start + budget_s
    )
    targets = [(t, r) for t, r in _targets(st, plan) if only is None or t.key[0] in only]
    # Within a budget, reasons for every replica first, then counterfactuals while time is left.
    first = explainer if budget_s is None or not counterfactuals else replace(explainer, counterfactuals=0)
    out: list[Explanation] = []
    for t, r in targets:
        if reasons_by is not None and reasons_by.expired():
            log.info("reasons cut by the time limit: %d of %d replicas reached", len(out), len(targets))
            break
        out.append(first.explain(t, r))
    if first is not explainer:
        for i, (t, r) in enumerate(targets[: len(out)]):
            if explainer.late():
                log.info("budget spent: %d replicas without counterfactuals", len(out) - i)
                break
            out[i] = explainer.explain(t, r)
    # The sentence on sharing modes is added only where a mode may be why the replica waits.
    moded = {e.workload for e in out if e.alternative is None and _mode_may_block(st.after, catalog, e)}
    notes = mode_notes(st.after, catalog, moded)
    out = [
        e.model_copy(update={"reason": f"{e.reason}; {notes[e.workload]}"})
        if e.alternative is None and e.workload in moded and e.workload in notes
        else e
        for e in out
    ]
    log.info("explained %d replicas in %.2f s", len(out), time.perf_counter() - start)
    return out


def _fits_empty(node: Node, shape: Shape, catalog: HardwareCatalog) -> bool:
    """Whether one replica of ``shape`` (whole GPUs or a fraction) fits ``node`` empty, whatever its mode."""
    allowed = {catalog.canonical(m) for m in shape.gpu_models}
    gpus = sum(
        1 for g in node.gpus if g.mig is None and (not allowed or catalog.canonical(g.model) in allowed)
    )
    return (
        gpus >= max(shape.gpus, 1)
        and node.cpu_milli >= shape.cpu_milli
        and node.memory_mib >= shape.memory_mib
    )


def _mode_may_block(inp: PlanningInput, catalog: HardwareCatalog, e: Explanation) -> bool:
    """Whether a node's sharing mode may be why the waiting replica of ``e`` waits: its code is one a mode
    can be behind, and a replica no node could ever host fits some node of a sharing mode when empty (a
    16-GPU ask on 8-GPU nodes waits whatever the modes)."""
    if e.code not in MODE_MAY_BLOCK:
        return False
    if e.code != NEVER_FITS:
        return True
    w = inp.workload_by_id.get(e.workload)
    moded = [n for n in inp.cluster.nodes if n.sharing is not None]
    return w is not None and any(
        _fits_empty(n, s, catalog) for n in moded for s in w.shapes if s.kind in ("whole", "fraction")
    )


def explain_workload(
    inp: PlanningInput,
    plan: Plan,
    workload_id: str,
    *,
    catalog: HardwareCatalog | None = None,
    counterfactuals: int = 3,
    solver: str = "cpsat",
    time_limit_s: float = 2.0,
) -> list[Explanation]:
    """Why the replicas of ``workload_id`` wait or run on a worse alternative (empty if all run on
    their first choice). Raises ``KeyError`` for an unknown workload."""
    if workload_id not in inp.workload_by_id:
        raise KeyError(f"unknown workload '{workload_id}'")
    return explain_all(
        inp,
        plan,
        catalog=catalog,
        counterfactuals=counterfactuals,
        solver=solver,
        time_limit_s=time_limit_s,
        only={workload_id},
    )


def with_explanations(plan: Plan, explanations: Sequence[Explanation]) -> Plan:
    """The plan with each waiting replica's code, sentence and counterfactuals replaced by the
    explanation's, and the explanations of replicas on worse alternatives added."""
    by_key = {(e.workload, e.replica): e for e in explanations if e.alternative is None}
    unplaced = []
    for u in plan.unplaced:
        e = by_key.get((u.workload, u.replica))
        if e is None:
            unplaced.append(u)
            continue
        unplaced.append(
            u.model_copy(
                update={
                    "code": e.code,
                    "reason": e.reason,
                    "resources": e.resources,
                    "details": e.details,
                    "counterfactuals": e.counterfactuals,
                }
            )
        )
    degraded = tuple(e for e in explanations if e.alternative is not None)
    return plan.model_copy(update={"unplaced": tuple(unplaced), "explanations": degraded})


def target_of(inp: PlanningInput, plan: Plan, e: Explanation) -> Target:
    """The replicas a counterfactual of ``e`` must place: the waiting members of its gang (or itself),
    limited to the alternatives before the chosen one for a replica on a worse alternative."""
    key = (e.workload, e.replica)
    if e.alternative is not None:
        return Target(key, (key,), e.alternative)
    gang = inp.workload_by_id[e.workload].gang_id
    if gang is None:
        return Target(key, (key,))
    members = tuple(
        (u.workload, u.replica) for u in plan.unplaced if inp.workload_by_id[u.workload].gang_id == gang
    )
    return Target(key, members)

"""Findings for a gang as a whole: it can never be placed whole, even on the empty cluster
(``NEVER_FITS``), all its waiting members fit on the state the plan leaves (``SOLVER_LIMIT``), or it
fits only across several values of its domain label (``GANG_DOMAIN``; for a gang that runs in part and
that the plan keeps so, only outside the value its running members hold). A gang is placed together, so
it is diagnosed together before its members one by one.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import takewhile

from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.plan import Counterfactual
from gpuplan.planner.explain import counterfactual as cfs
from gpuplan.planner.explain.counterfactual import Target
from gpuplan.planner.explain.diagnose import mode_may_serve
from gpuplan.planner.explain.findings import GANG_DOMAIN, NEVER_FITS, SOLVER_LIMIT, Finding, Search, listed
from gpuplan.planner.explain.state import PlanState
from gpuplan.solvers.placement import never
from gpuplan.solvers.placement.options import describe
from gpuplan.solvers.placement.state import NodeInfo
from gpuplan.solvers.problem import Request


def gang_never_fits(st: PlanState, req: Request) -> Finding | None:
    """NEVER_FITS for the gang of ``req`` when it can never be placed whole, even on the empty cluster
    (the solvers' rule, :func:`gpuplan.solvers.placement.never.gang_never_fits`), unless a MIG or
    sharing mode change could give one of its replicas a node (the member's own diagnosis names it)."""
    members = st.gang_members(req.gang) if req.gang is not None else []
    if len(members) < 2:
        return None
    short = never.gang_never_fits(st.problem.policy, st.placer, members)
    kinds = {(m.shapes, m.team): m for m in members}.values()
    if short is None or any(mode_may_serve(st, m) for m in kinds):
        return None
    search = _new_node_beside(frozenset(short.nodes))
    return Finding(NEVER_FITS, short.reason, list(short.nodes[:4]), [search])


def _new_node_beside(hosts: frozenset[str]) -> Search:
    """:func:`~gpuplan.planner.explain.counterfactual.new_nodes`, re-solved together with ``hosts``
    (the nodes that could already host a replica: the gang needs them too)."""

    def search(st: PlanState, target: Target, req: Request, k: int) -> list[cfs.Candidate]:
        return [replace(c, nodes=c.nodes | hosts) for c in cfs.new_nodes(st, target, req, k)]

    return search


def gang_fits(target: Target, req: Request, nodes: list[str]) -> Finding:
    """SOLVER_LIMIT: every waiting member of the gang fits on ``nodes`` on the state the plan leaves."""
    replan = cfs.Candidate(
        Counterfactual(summary="re-plan: the whole gang fits now", kind="replan", changes=()),
        frozenset(nodes),
    )
    return Finding(
        SOLVER_LIMIT,
        f"all {len(target.members)} waiting replicas of gang '{req.gang}' fit on the state this plan "
        f"leaves ({listed(nodes)})",
        nodes,
        [],
        [replan],
    )


def gang_in_domain(st: PlanState, target: Target, req: Request) -> Finding | None:
    """For a gang with a domain label: SOLVER_LIMIT if it fits inside one value of the label now (the
    value of its members the plan places, for a gang kept as it runs in part), GANG_DOMAIN if it fits
    only across values (or outside that value); ``None`` (no domain, or it does not fit at all)."""
    ordered = sorted(target.members, key=lambda k: (k != target.key, k))
    beside = st.gang_placed(req.gang) if req.gang is not None else []
    asking = [st.requests[k] for k in ordered] + [q for q, _ in beside]
    domain = next((q.gang_domain for q in asking if q.gang_domain), None)
    if domain is None:
        return None
    tight = [replace(st.requests[k], running=None, gang_domain=domain) for k in ordered]
    with st.trial():
        placed, failed = st.placer.place_gang(tight, beside)
    if failed is None:
        return gang_fits(target, req, sorted({a.node for a in placed}))
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
    wanted = f"{asked / MILLI_PER_GPU:g} GPUs" if asked else f"{len(tight)} x {describe(shape)}"
    if beside:
        return _joined(st, req, domain, beside, wanted, members, rooms, asked)
    best = min(rooms, key=lambda v: (-rooms[v], v), default=None)
    if best is None:
        largest = "no node carries that label"
    else:
        held = f"has {rooms[best] / MILLI_PER_GPU:g} free GPUs" if asked else f"holds {rooms[best]} of them"
        largest = f"the one with the most room, {domain}={best}, {held} ({listed(members[best])})"
    return Finding(
        GANG_DOMAIN,
        f"gang '{req.gang}' fits only across several values of node label '{domain}': it asks for "
        f"{wanted} inside one; {largest}",
        [] if best is None else [f"{domain}={best}", *members[best]],
    )


def _joined(
    st: PlanState,
    req: Request,
    domain: str,
    beside: list[tuple[Request, str]],
    wanted: str,
    members: dict[str, list[str]],
    rooms: dict[str, int],
    asked: int,
) -> Finding:
    """GANG_DOMAIN for a gang that runs in part, which the plan keeps so: its waiting members fit, but
    not inside the value of ``domain`` its running members hold (or those hold several values)."""
    values = sorted({st.infos[st.pos[node]].spec.labels.get(domain) or "(none)" for _, node in beside})
    nodes = sorted({node for _, node in beside})
    if len(values) > 1 or values[0] not in members:
        where = "several values" if len(values) > 1 else "no value"
        return Finding(
            GANG_DOMAIN,
            f"gang '{req.gang}' runs in part on nodes of {where} of node label '{domain}' ({listed(nodes)}): "
            "its waiting replicas cannot join them inside one",
            nodes,
        )
    value = values[0]
    held = f"has {rooms[value] / MILLI_PER_GPU:g} free GPUs" if asked else f"holds {rooms[value]} of them"
    return Finding(
        GANG_DOMAIN,
        f"gang '{req.gang}' runs in part inside {domain}={value} ({listed(nodes)}), which its waiting "
        f"replicas must join: they ask for {wanted} there, and it {held} ({listed(members[value])}); they "
        "fit only outside it",
        [f"{domain}={value}", *members[value]],
    )

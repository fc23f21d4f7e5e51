"""Why kube-scheduler's filters keep an alternative off the nodes that have room for it: the taint
without a toleration (``TAINT``), the node selector pair or affinity no term of which matches
(``NODE_AFFINITY``), the extended resource the node does not advertise (``RESOURCE``), each the
refusal of :func:`gpuplan.models.rules.scheduling.refusal` on the first such node by name."""

from __future__ import annotations

from dataclasses import replace
from weakref import WeakKeyDictionary

from gpuplan.models.rules.scheduling import NODE_AFFINITY, RESOURCE, TAINT, refusal
from gpuplan.models.workload import Workload
from gpuplan.planner.explain import counterfactual as cfs
from gpuplan.planner.explain.findings import (
    NODE_AFFINITY_CODE,
    RESOURCE_CODE,
    TAINT_CODE,
    Finding,
    listed,
)
from gpuplan.planner.explain.state import PlanState
from gpuplan.solvers.placement.options import describe
from gpuplan.solvers.problem import Request

#: The reason code of each filter.
CODES = {TAINT: TAINT_CODE, NODE_AFFINITY: NODE_AFFINITY_CODE, RESOURCE: RESOURCE_CODE}

_WORKLOADS: WeakKeyDictionary[PlanState, dict[str, Workload]] = WeakKeyDictionary()


def _workload(st: PlanState, name: str) -> Workload | None:
    found = _WORKLOADS.get(st)
    if found is None:
        found = _WORKLOADS[st] = {w.id: w for w in st.inp.workloads}
    return found.get(name)


def scheduling_finding(st: PlanState, req: Request, k: int, *, empty: bool) -> Finding | None:
    """The filter that keeps alternative ``k`` of ``req`` off a node that has room for it on the state
    the plan leaves (``empty``: that could host it if it were empty), ``None`` when no node that the
    filters refuse would hold it either."""
    shape = req.shapes[k]
    workload = _workload(st, req.workload)
    if not shape.refused or workload is None or k >= len(workload.shapes):
        return None
    free = replace(shape, refused=frozenset())
    if empty:
        hosts = [n for n in st.fits_empty(free, req.team) if st.infos[n].name in shape.refused]
    else:
        fit = st.first_fit(free, st.demand(req))
        hosts = [fit.node] if fit is not None and st.infos[fit.node].name in shape.refused else []
    if not hosts:
        return None
    names = [st.infos[n].name for n in hosts]
    node = st.after.cluster.node_by_name.get(names[0])
    found = None if node is None else refusal(node, workload, workload.shapes[k])
    if found is None:
        return None
    room = "could host" if empty else "has room for"
    others = f" (also {listed(names[1:])})" if len(names) > 1 else ""
    return Finding(
        CODES[found.filter],
        f"{names[0]}{others} {room} {describe(shape)}, but kube-scheduler's filters refuse it there: "
        f"{found.reason}",
        [names[0], found.names],
        [] if empty else [cfs.migrations, cfs.waits],
    )

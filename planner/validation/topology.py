"""Rules 8 and 9: gangs placed whole inside one domain, and the NVLink or NUMA topology a replica needs."""

from __future__ import annotations

import itertools
from collections import defaultdict

import networkx as nx

from gpuplan.models.cluster import Node
from gpuplan.models.rules.gang import GANG, kept_in_part
from gpuplan.models.topology import link_graph
from gpuplan.models.workload import TopologyNeed, Workload
from gpuplan.planner.validation.context import CheckContext, Placed


def check_gangs(ctx: CheckContext) -> None:
    """Rule 8: a gang is placed entirely or not at all, on nodes with one value of its domain label (a
    gang that runs outside that and stays where it runs keeps it: kept, :meth:`CheckContext.only_kept`;
    a gang that runs in part now may stay in part only as it runs: kept,
    :func:`~gpuplan.models.rules.gang.kept_in_part`)."""
    members: defaultdict[str, list[Workload]] = defaultdict(list)
    for w in ctx.inp.workloads:
        if w.gang_id is not None:
            members[w.gang_id].append(w)
    if not members:
        return
    by_workload: defaultdict[str, list[Placed]] = defaultdict(list)
    for p in ctx.placed:
        by_workload[p.workload.id].append(p)
    for gang, workloads in members.items():
        subject = f"gang {gang}"
        placed = [p for w in workloads for p in by_workload[w.id]]
        total = sum(w.replicas for w in workloads)
        n_placed = len({(p.workload.id, p.assignment.replica) for p in placed})
        if 0 < n_placed < total:
            running = sum(len(w.running_on) for w in workloads)
            staying = len({(p.workload.id, p.assignment.replica) for p in placed if ctx.stays(p)})
            kept = kept_in_part(total, running, n_placed, staying)
            why = ": it runs in part now, its running replicas kept where they run" if kept else ""
            ctx.add(
                GANG,
                subject,
                f"Only {n_placed} of the gang's {total} replicas are placed; a gang runs whole or not at "
                f"all{why}.",
                kept=kept,
            )
        for label in sorted({w.gang_domain for w in workloads if w.gang_domain}):
            values = {p.node.labels.get(label) for p in placed}
            if len(values) > 1 or None in values:
                shown = ", ".join(sorted("(none)" if v is None else v for v in values))
                where = "several values" if len(values) > 1 else "nodes without"
                ctx.add(
                    GANG,
                    subject,
                    f"The gang's replicas are on {where} of node label '{label}' ({shown}).",
                    kept=ctx.only_kept(placed),
                )


def _graph(ctx: CheckContext, node: Node) -> nx.Graph:
    """The node's link graph, built once per distinct GPU/link layout (fleets repeat a few)."""
    if node.name not in ctx.node_graphs:
        key = (
            tuple((g.index, g.numa) for g in node.gpus),
            tuple((lk.a, lk.b, lk.kind) for lk in node.links),
        )
        if key not in ctx.graphs:
            ctx.graphs[key] = link_graph(node)
        ctx.node_graphs[node.name] = ctx.graphs[key]
    return ctx.node_graphs[node.name]


def check_topology(ctx: CheckContext) -> None:
    """Rule 9: NVLink replicas use a fully NVLink-connected GPU set, NUMA replicas one NUMA node
    (a running replica that stays where it runs keeps its GPUs: kept, :meth:`CheckContext.only_kept`)."""
    for p in ctx.placed:
        if p.shape is None or p.shape.topology not in (TopologyNeed.NVLINK, TopologyNeed.NUMA):
            continue
        gpus = {u.index: g for u, g in p.uses}
        if len(gpus) < 2:
            continue
        if p.shape.topology is TopologyNeed.NVLINK:
            graph = _graph(ctx, p.node)
            missing = [
                f"{a}-{b} ({graph.edges[a, b]['kind']})"
                for a, b in itertools.combinations(sorted(gpus), 2)
                if not graph.edges[a, b]["nvlink"]
            ]
            if missing:
                ctx.add(
                    "topology-nvlink",
                    p.subject,
                    f"The replica needs NVLink between all its GPUs on node '{p.node.name}' but pairs "
                    f"{', '.join(missing)} are not NVLink-connected.",
                    kept=ctx.only_kept([p]),
                )
        else:
            numa = sorted({g.numa for g in gpus.values()})
            if len(numa) > 1:
                ctx.add(
                    "topology-numa",
                    p.subject,
                    f"The replica needs one NUMA node but its GPUs on node '{p.node.name}' sit on NUMA "
                    f"nodes {numa}.",
                    kept=ctx.only_kept([p]),
                )

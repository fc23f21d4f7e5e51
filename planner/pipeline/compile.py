"""Compile a :class:`models.PlanningInput` into the solver-neutral :class:`PlacementProblem`."""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from datetime import datetime

from gpuplan.models.base import InputError
from gpuplan.models.cluster import Node
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import GpuUse
from gpuplan.models.rules.fairness import input_floors, input_standings
from gpuplan.models.rules.quota import quota_unit
from gpuplan.models.rules.runtime import runtime_s
from gpuplan.models.topology import link_graph, nvlink_cliques
from gpuplan.models.workload import Shape, Workload
from gpuplan.planner.pipeline.admission import NONE_REFUSED, Admission
from gpuplan.solvers.problem import (
    GpuSlot,
    NodeSpec,
    PlacementProblem,
    Request,
    Running,
    ShapeSpec,
    memory_models,
)

#: Pair costs and NVLink cliques by node topology (GPU indices and NUMA nodes in order, links), as
#: :func:`_links` computes them; cleared when it grows past ``_LINKS_MAX`` topologies.
_LINKS: dict[Hashable, tuple[dict[tuple[int, int], int], tuple[frozenset[int], ...]]] = {}
_LINKS_MAX = 1024


def _links(node: Node) -> tuple[dict[tuple[int, int], int], tuple[frozenset[int], ...]]:
    """The node's pair costs and NVLink cliques, computed once per distinct topology (fleets and
    requests repeat a few server types, and the link graph is the dear part of compiling a node)."""
    key = (tuple((g.index, g.numa) for g in node.gpus), tuple((lk.a, lk.b, lk.kind) for lk in node.links))
    found = _LINKS.get(key)
    if found is None:
        graph = link_graph(node)
        costs = {(min(a, b), max(a, b)): int(d["cost"]) for a, b, d in graph.edges(data=True)}
        cliques = tuple(nvlink_cliques(node, graph)) if len(node.gpus) > 1 else ()
        if len(_LINKS) >= _LINKS_MAX:
            _LINKS.clear()
        found = _LINKS[key] = (costs, cliques)
    return dict(found[0]), found[1]


def compile_node(node: Node, catalog: HardwareCatalog) -> NodeSpec:
    """A node with canonical model names, NVLink cliques and pair costs."""
    costs, cliques = _links(node)
    gpus = tuple(
        GpuSlot(
            index=g.index,
            model=catalog.canonical(g.model),
            numa=g.numa,
            mig=None if g.mig is None else tuple((i.profile, i.start) for i in g.mig.instances),
            sharing=node.sharing if g.mig is None else None,
            memory_mib=catalog.model(g.model).memory_mib,
        )
        for g in sorted(node.gpus, key=lambda g: g.index)
    )
    return NodeSpec(
        name=node.name,
        pool=node.pool,
        labels=dict(node.labels),
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        gpus=gpus,
        nvlink_cliques=cliques,
        pair_cost=costs,
        taints=node.taints,
        resources=node.resources,
    )


def compile_shape(
    shape: Shape, catalog: HardwareCatalog, refused: frozenset[str] = NONE_REFUSED
) -> ShapeSpec:
    """A shape with canonical GPU model names (only those with room for its GPU memory ask), and the
    nodes kube-scheduler's filters refuse it on (:class:`~gpuplan.planner.pipeline.admission.Admission`)."""
    named = frozenset(catalog.canonical(m) for m in shape.gpu_models)
    models = memory_models(catalog, shape.kind, shape.mig_profile, shape.gpu_memory_mib, named)
    if shape.gpu_memory_mib and shape.kind != "cpu" and not models:
        # Input validation refuses such an ask; an empty set would mean any model here.
        raise InputError(f"gpu_memory_mib: {shape.gpu_memory_mib} MiB per GPU fits no allowed GPU model")
    return ShapeSpec(
        kind=shape.kind,
        gpus=shape.gpus,
        milli=shape.share_milli,
        mig_profile=shape.mig_profile,
        models=models,
        cpu_milli=shape.cpu_milli,
        memory_mib=shape.memory_mib,
        topology=shape.topology,
        gpu_memory_mib=shape.gpu_memory_mib,
        named_models=named if shape.gpu_memory_mib else frozenset(),
        refused=refused,
    )


def _running(w: Workload, replica: int) -> Running:
    place = w.running_on[replica]
    gpus = tuple(
        GpuUse(index=g.index, milli=g.milli, mig_profile=g.mig_profile, mig_start=g.mig_start)
        for g in place.gpus
    )
    return Running(node=place.node, gpus=gpus, alternative=w.running_alternative(replica))


def compile_problem(inp: PlanningInput, catalog: HardwareCatalog, now: datetime) -> PlacementProblem:
    """Expand workloads into replicas and nodes into solver specs (and the arrivals into the shapes of
    their replicas: the expected arrival mix), with each team's fair-share standing at ``now``."""
    policy = inp.policy
    requests: list[Request] = []
    admission = Admission(inp.cluster)
    for w in inp.workloads:
        tier = policy.tier(w.tier)
        shapes = tuple(compile_shape(s, catalog, admission.refused(w, s)) for s in w.shapes)
        ran = runtime_s(w.started_at, now)
        runtime = None if ran is None else int(ran)
        for r in range(w.replicas):
            requests.append(
                Request(
                    workload=w.id,
                    replica=r,
                    team=w.team,
                    tier=w.tier,
                    tier_weight=tier.weight,
                    tier_rank=policy.tier_rank(w.tier),
                    priority=w.priority,
                    wait_s=int(w.waited_s(now)),
                    shapes=shapes,
                    gang=w.gang_id,
                    gang_domain=w.gang_domain,
                    preemptible=w.preemptible,
                    running=_running(w, r) if r < len(w.running_on) else None,
                    runtime_s=runtime if r < len(w.running_on) else None,
                    disruptible=w.disruptible,
                )
            )
    return PlacementProblem(
        nodes=tuple(compile_node(n, catalog) for n in inp.cluster.nodes),
        requests=tuple(requests),
        catalog=catalog,
        policy=policy,
        fair_share=input_standings(inp, catalog, now),
        fair_floor=input_floors(inp, catalog, quota_unit(catalog)),
        floor_unit=quota_unit(catalog),
        arrivals=tuple(
            shapes
            for w in inp.arrivals
            for shapes in itertools.repeat(
                tuple(compile_shape(s, catalog, admission.refused(w, s)) for s in w.shapes), w.replicas
            )
        ),
    )

"""A lower bound on the cost of the whole question: the cheapest purchase under which all demand meets
its tier targets, whatever the placement of the existing fleet.

The purchase a run finds only serves what one (time-limited) placement of the fleet left waiting: a
better placement may leave less. This bound does not depend on that placement. The existing fleet's
nodes join the purchase MILP (:mod:`planner.capacity.purchase`) as free node types, with capacity pooled
per group of identical nodes (GPU model, GPU count, CPU, memory, NVLink and NUMA layout) exactly as for
purchasable types, and the demand is every replica that must run now: the replicas running or started by
the fleet plan and those waiting past their tier's target. Replicas the plan predicts to start within
their target are not counted; nor are those no node type may be bought for (the run reports them as
unservable). Pooling, any MIG layout and sharing mode on every GPU, and no quotas, gangs, pools or
scheduling filters only relax the real question, so the MILP's optimum (or its LP relaxation's, when
the MILP is stopped) is a lower bound on any purchase that serves that demand. It is 0 when the
existing fleet could host the demand if perfectly packed.

On purchasable types a replica keeps its like-for-like class (as the run buys for it); on the fleet's
nodes it may use any alternative it allows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.models.workload import TopologyNeed
from gpuplan.planner.capacity.demand import Key, like_for_like
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.capacity.purchase import NO_SOLUTION, TypeSpec, shape_fits, solve_purchase
from gpuplan.solvers.problem import NodeSpec, PlacementProblem, Request, ShapeSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WholeBound:
    """The lower bound on the whole question, what the relaxation buys for it and the MILP's status
    (``OPTIMAL``: the relaxation's optimum; else its LP relaxation's bound)."""

    value: float
    buys: dict[str, int]
    status: str


def _parts(node: NodeSpec) -> list[tuple[NodeSpec, str | None]]:
    """The node as one part per GPU model (each with the node's CPU and memory: a relaxation), or as a
    GPU-less part."""
    models = sorted({g.model for g in node.gpus})
    if not models:
        return [(node, None)]
    out: list[tuple[NodeSpec, str | None]] = []
    for model in models:
        gpus = tuple(g for g in node.gpus if g.model == model)
        mine = {g.index for g in gpus}
        cliques = tuple(c & mine for c in node.nvlink_cliques if c & mine)
        out.append((replace(node, gpus=gpus, nvlink_cliques=cliques), model))
    return out


def fleet_types(nodes: tuple[NodeSpec, ...], catalog: HardwareCatalog) -> list[TypeSpec]:
    """The existing nodes as free node types, identical nodes (GPU model, GPUs with their NUMA nodes,
    NVLink cliques, CPU, memory) grouped with their count."""
    groups: dict[tuple[object, ...], tuple[NodeSpec, str | None, int]] = {}
    for node in nodes:
        for part, model in _parts(node):
            positions = {g.index: i for i, g in enumerate(part.gpus)}
            key = (
                model,
                tuple(g.numa for g in part.gpus),
                tuple(sorted(tuple(sorted(positions[i] for i in c)) for c in part.nvlink_cliques)),
                part.cpu_milli,
                part.memory_mib,
            )
            first, _, n = groups.get(key, (part, model, 0))
            groups[key] = (first, model, n + 1)
    return [
        TypeSpec(
            name=f"fleet-{i}",
            cost=0.0,
            node=node,
            spec=catalog.model(model) if model is not None else None,
            available=count,
        )
        for i, (node, model, count) in enumerate(groups.values(), start=1)
    ]


def _plain(shape: ShapeSpec, topology: bool) -> ShapeSpec:
    """``shape`` without the node filters the relaxation ignores (and without its NVLink or NUMA need
    when ``topology`` is false)."""
    return replace(shape, refused=frozenset(), topology=shape.topology if topology else TopologyNeed.ANY)


def whole_bound(
    inp: PlanningInput,
    problem: PlacementProblem,
    plan: Plan,
    deferred: set[Key],
    excluded: set[Key],
    specs: list[TypeSpec],
    opts: GapOptions,
    seconds: float,
) -> WholeBound:
    """The lower bound on the cheapest purchase under which the demand the run must serve now is
    served, the existing fleet pooled with what is bought (see the module).

    ``deferred`` are the waiting replicas the plan predicts to start within their target, ``excluded``
    those the run found no purchase can serve (unservable, or bound to a running gang's domain). When
    the plan keeps rules the current state breaks (``stays_broken``), running replicas are counted
    without their NVLink or NUMA need and the isolation rules are left out, so the bound stays valid.
    """
    broken = bool(plan.stays_broken)
    fleet = fleet_types(problem.nodes, problem.catalog)
    demand = [r for r in problem.requests if r.key not in deferred and r.key not in excluded]
    narrowed = {r.key: r for r in like_for_like(inp, demand, opts)}
    requests: list[Request] = []
    own: dict[Key, tuple[ShapeSpec, ...]] = {}
    for r in demand:
        keep = not (broken and r.running is not None)
        here = tuple(_plain(s, keep) for s in r.shapes)
        bought = tuple(_plain(s, True) for s in narrowed[r.key].shapes)
        if not any(shape_fits(s, t) is None for s in bought for t in specs):
            continue  # no purchase can serve it: the run reports it, the bound leaves it out
        if r.running is not None and not any(shape_fits(s, t) is None for s in here for t in fleet):
            continue  # it runs where the relaxation sees no room for it: left out, as the bound must hold
        requests.append(replace(r, shapes=bought))
        own[r.key] = here
    if not requests:
        return WholeBound(0.0, {}, "OPTIMAL")
    found = solve_purchase(
        requests,
        [*fleet, *specs],
        policy=None if broken else inp.policy,
        time_limit_s=seconds,
        threads=opts.num_workers,
        fleet_shapes=own,
    )
    log.info(
        "whole-question bound: %.2f (%s) for %d replicas on %d fleet node groups",
        found.lower_bound, found.status, len(requests), len(fleet),
    )  # fmt: skip
    status = found.status if found.status != NO_SOLUTION else "FEASIBLE"
    return WholeBound(found.lower_bound, found.counts, status)


def by_type(buys: dict[str, int]) -> str:
    """What the relaxation buys, in words (``nothing`` when it buys nothing)."""
    return ", ".join(f"{n} x {name}" for name, n in sorted(buys.items())) or "nothing"

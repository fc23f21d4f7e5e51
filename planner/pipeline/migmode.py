"""MIG mode changes chosen from the waiting demand before the solve.

A GPU in MIG mode serves only its instances and a GPU with MIG off only whole or fractional work, so a
whole-GPU request waits beside idle MIG GPUs however many there are, and MIG work waits beside idle
plain GPUs that could hold its profile. Turning MIG off, or on, on a drained GPU is an action like a
re-partition (the GPU Operator's MIG manager applies it on the node label ``nvidia.com/mig.config``): it
is taken only on a MIG-capable GPU that no running replica holds, only when the policy allows
re-partitioning (``mig.allow_repartition``; turning MIG on also needs ``mig.allow_create``, since the
GPU starts with no instance), and costs ``mig.repartition_cost`` in the disruption term.

The choice is greedy, as the sharing pre-pass's (:mod:`~planner.pipeline.sharing`): with the current
modes the greedy places the demand; then, kind of node by kind of node, batches of nodes have their idle
MIG-capable GPUs switched when the greedy then leaves less tier-weighted queue penalty waiting (in
weighted mode: by more than the changes cost), batches doubling while they pay. A node's GPUs switch
together (an 8-GPU job needs them all); :func:`used_modes` keeps only the changes the plan uses. The
modes are fixed before the solve, so the solve is a restriction of the problem whenever some GPU's mode
could change: :func:`mig_modes_fixed` says so in the report and gives a bound with those GPUs free.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from gpuplan.models.cluster import Gpu, Node, sharing_offers
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Assignment, MigLayout, MigMode, PlanStatus, Unplaced
from gpuplan.models.policy import ObjectiveMode, Policy
from gpuplan.models.workload import Shape
from gpuplan.planner.pipeline.batches import search_batches
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.layouts import cluster_with_mig_modes
from gpuplan.planner.pipeline.sharing import changeable as sharing_changeable
from gpuplan.solvers.base import SolveResult, get_solver
from gpuplan.solvers.bounds import knapsack_bound, with_mig_free, with_modes_free
from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.problem import GpuSlot, PlacementProblem, disturbable
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)

#: Greedy plans tried at most (each kind of node takes a number of trials logarithmic in its nodes).
MAX_TRIALS = 64
#: Time limit of each greedy trial: none, as in the sharing pre-pass (trials cut at different points
#: would compare plans of different queues; the pre-pass bounds itself by trials and its share).
TRIAL_LIMIT_S = math.inf

GpuKey = tuple[str, int]


def idle_capable(inp: PlanningInput, catalog: HardwareCatalog) -> list[tuple[Node, Gpu]]:
    """The MIG-capable GPUs no running replica holds (in any way), nodes in name order."""
    busy = {(p.node, g.index) for w in inp.workloads for p in w.running_on for g in p.gpus}
    return [
        (n, g)
        for n in sorted(inp.cluster.nodes, key=lambda n: n.name)
        for g in n.gpus
        if (n.name, g.index) not in busy and catalog.model(g.model).mig_capable
    ]


def _waiting_shapes(inp: PlanningInput) -> list[Shape]:
    """The alternatives of the replicas that do not run yet."""
    return [s for w in inp.workloads if w.replicas > len(w.running_on) for s in w.shapes]


def _named(shape: Shape, catalog: HardwareCatalog) -> set[str]:
    """The canonical GPU models a shape names (empty: any)."""
    return {catalog.canonical(m) for m in shape.gpu_models if catalog.has_model(m)}


def serves(node: Node, gpu: Gpu, enabled: bool, shape: Shape, catalog: HardwareCatalog) -> bool:
    """Whether ``gpu`` of ``node`` in MIG mode ``enabled`` offers ``shape`` a GPU kind it asks for: a
    profile of the model with MIG on, a whole GPU or a fraction (as the node's sharing mode offers them)
    with MIG off. The one rule the pre-pass, the bound and the reasons share."""
    named = _named(shape, catalog)
    if named and catalog.canonical(gpu.model) not in named:
        return False
    if enabled:
        return shape.kind == "mig" and shape.mig_profile in catalog.model(gpu.model).profile_map
    return shape.kind in ("whole", "fraction") and sharing_offers(node.sharing, shape.kind)


def may_switch(policy: Policy, enabled: bool) -> bool:
    """Whether the policy lets a plan turn MIG mode on (``enabled``) or off on a drained GPU."""
    return policy.mig.allow_repartition and (policy.mig.allow_create or not enabled)


def candidates(inp: PlanningInput, catalog: HardwareCatalog) -> list[MigMode]:
    """The mode changes of idle MIG-capable GPUs whose other mode offers a waiting shape a kind of GPU
    (none when the policy forbids them): the changes a plan may make for the queue."""
    shapes = _waiting_shapes(inp)
    out = []
    for node, gpu in idle_capable(inp, catalog):
        enabled = gpu.mig is None
        if may_switch(inp.policy, enabled) and any(serves(node, gpu, enabled, s, catalog) for s in shapes):
            out.append(MigMode(node=node.name, gpu=gpu.index, enabled=enabled))
    return out


def changeable(inp: PlanningInput, catalog: HardwareCatalog, problem: PlacementProblem) -> list[GpuKey]:
    """The GPUs whose MIG mode a plan of ``inp`` (compiled as ``problem``) may change to do better: every
    MIG-capable GPU the policy lets switch that no running replica holds which may neither move nor be
    preempted (the others can be drained within the budget), whose other mode offers some replica's
    shape a kind of GPU (in weighted mode, where other terms count too, any), in the node's sharing mode
    or, when a plan may change that mode too (:func:`~gpuplan.planner.pipeline.sharing.changeable`), in
    either."""
    held = {
        (r.running.node, g.index)
        for r in problem.requests
        if r.running is not None and not disturbable(problem.policy, r)
        for g in r.running.gpus
    }
    shapes = [s for w in inp.workloads for s in w.shapes]
    weighted = inp.policy.objective is ObjectiveMode.WEIGHTED
    either = {n.name for n in sharing_changeable(inp, problem)}
    return [
        (n.name, g.index)
        for n in sorted(inp.cluster.nodes, key=lambda n: n.name)
        for g in n.gpus
        if (n.name, g.index) not in held
        and catalog.model(g.model).mig_capable
        and may_switch(inp.policy, g.mig is None)
        and (
            weighted
            or any(
                serves(
                    n if n.name not in either else n.model_copy(update={"sharing": None}),
                    g,
                    g.mig is None,
                    s,
                    catalog,
                )
                for s in shapes
            )
        )
    ]


def _kind_of_node(node: Node, gpus: Sequence[MigMode]) -> Hashable:
    """Nodes with equal keys gain or lose alike from switching ``gpus``."""
    return (
        tuple((g.model, g.mig is None, g.mig.instances if g.mig else ()) for g in node.gpus),
        tuple((m.gpu, m.enabled) for m in gpus),
        node.cpu_milli,
        node.memory_mib,
        node.pool,
        tuple(sorted(node.labels.items())),
        repr(node.sharing),
    )


def _waiting_penalty(
    inp: PlanningInput, modes: Sequence[MigMode], catalog: HardwareCatalog, now: datetime
) -> int:
    """Tier-weighted queue penalty the greedy leaves waiting with the GPUs of ``modes`` switched."""
    trial = inp.model_copy(update={"cluster": cluster_with_mig_modes(inp.cluster, modes)})
    problem = compile_problem(trial, catalog, now)
    result = get_solver("greedy-fgd").solve(problem, RunOptions(time_limit_s=TRIAL_LIMIT_S))
    waiting = {(u.workload, u.replica) for u in result.unplaced}
    return sum(queue_penalty(r, problem) for r in problem.requests if r.key in waiting)


def _worth(policy: Policy, gain: int, changes: int) -> bool:
    """Whether placing ``gain`` more queue penalty pays for ``changes`` more mode changes."""
    if policy.objective is ObjectiveMode.WEIGHTED:
        return policy.weights.queue * gain > policy.weights.disruption * policy.mig.repartition_cost * changes
    return gain > 0


def choose_mig_modes(
    inp: PlanningInput,
    catalog: HardwareCatalog,
    now: datetime,
    budget_s: float | None = None,
    trial_replicas: int | None = None,
) -> tuple[MigMode, ...]:
    """The MIG mode changes of idle GPUs that let the greedy place more of the waiting demand.

    Nodes of one kind have their candidate GPUs switched as :func:`~planner.pipeline.batches.search_batches`
    tries them: all at once first, then halved from the end while that does not raise the waiting
    penalty; else in growing batches (nodes in name order), each trimmed from its end. Trials stop when
    nothing waits, after :data:`MAX_TRIALS` (and, with ``trial_replicas``, once the trials have placed
    that many replicas in all: a bound the same every run, for deterministic plans; at least two
    trials) and, if given, after ``budget_s`` seconds."""
    found = candidates(inp, catalog)
    if not found:
        return ()
    replicas = sum(w.replicas for w in inp.workloads)
    cap = MAX_TRIALS if trial_replicas is None else trial_replicas // max(1, replicas)
    max_trials = max(2, min(MAX_TRIALS, cap))
    # A unit is a node's candidate GPUs of one direction (off, or on): they switch together.
    per_node: dict[tuple[str, bool], list[MigMode]] = {}
    for m in found:
        per_node.setdefault((m.node, m.enabled), []).append(m)
    by_kind: dict[Hashable, list[tuple[str, bool]]] = {}
    for unit, modes in per_node.items():
        by_kind.setdefault(_kind_of_node(inp.cluster.node_by_name[unit[0]], modes), []).append(unit)

    def switched(units: Iterable[tuple[str, bool]]) -> list[MigMode]:
        return [m for u in units for m in per_node[u]]

    chosen, trials = search_batches(
        by_kind.values(),
        lambda units: _waiting_penalty(inp, switched(units), catalog, now),
        lambda gain, batch: _worth(inp.policy, gain, len(switched(batch))),
        max_trials=max_trials,
        budget_s=budget_s,
        all_first=True,
    )
    if chosen:
        names = ", ".join(f"{n} MIG {'on' if on else 'off'}" for n, on in sorted(chosen))
        log.info("MIG mode changes for waiting demand (%d trials): %s", trials, names)
    return tuple(switched(sorted(chosen)))


def used_modes(
    modes: Sequence[MigMode],
    assignments: Iterable[Assignment],
    layouts: Iterable[MigLayout],
    waiting: Iterable[Unplaced] = (),
) -> tuple[MigMode, ...]:
    """The ``modes`` the plan uses: a GPU turned off that some replica takes whole or as a fraction (or
    a waiting one has reserved), a GPU turned on that the plan's layouts give an instance; the others
    are dropped: the GPU stays as it is."""
    plain = {(a.node, g.index) for a in assignments for g in a.gpus if g.mig_profile is None}
    plain |= {
        (u.reserved_node, g.index)
        for u in waiting
        if u.reserved_node
        for g in u.reserved_gpus
        if g.mig_profile is None
    }
    partitioned = {(lay.node, lay.gpu) for lay in layouts if lay.instances}
    return tuple(m for m in modes if (m.node, m.gpu) in (partitioned if m.enabled else plain))


def without_dropped(result: SolveResult, modes: Sequence[MigMode], kept: Sequence[MigMode]) -> SolveResult:
    """``result`` without the layouts of GPUs turned on whose change the plan dropped (they hold no
    instance: :func:`used_modes`)."""
    dropped = {(m.node, m.gpu) for m in modes if m.enabled} - {(m.node, m.gpu) for m in kept}
    if not dropped:
        return result
    layouts = tuple(lay for lay in result.mig_layouts if (lay.node, lay.gpu) not in dropped)
    return replace(result, mig_layouts=layouts)


def modes_left(
    inp: PlanningInput, problem: PlacementProblem, modes: Sequence[MigMode], kept: Sequence[MigMode]
) -> PlacementProblem:
    """``problem`` (compiled with every change of ``modes``) with the GPUs whose change the plan dropped
    back in their own MIG mode, layout and sharing: the state the plan leaves, which its report
    measures."""
    dropped = {(m.node, m.gpu) for m in modes} - {(m.node, m.gpu) for m in kept}
    if not dropped:
        return problem
    nodes = inp.cluster.node_by_name

    def back(node: str, g: GpuSlot) -> GpuSlot:
        own = nodes[node].gpu_by_index[g.index]
        mig = None if own.mig is None else tuple((i.profile, i.start) for i in own.mig.instances)
        return replace(g, mig=mig, sharing=nodes[node].sharing if own.mig is None else None)

    return replace(
        problem,
        nodes=tuple(
            replace(n, gpus=tuple(back(n.name, g) if (n.name, g.index) in dropped else g for g in n.gpus))
            if any(key[0] == n.name for key in dropped)
            else n
            for n in problem.nodes
        ),
    )


def mig_modes_fixed(
    inp: PlanningInput, catalog: HardwareCatalog, problem: PlacementProblem, result: SolveResult
) -> SolveResult:
    """``result`` of a solve on the MIG modes the pre-pass chose (``problem``) as a plan of ``inp``: when
    some GPU's mode could change (:func:`changeable`: idle, or drained by moves and preemptions), the
    solver saw a restriction of the problem, so it proved nothing for the whole problem: not
    ``OPTIMAL``, and the bound is the knapsack bound with those GPUs in no mode (and the nodes whose
    sharing mode could change in none either, as :func:`sharing.modes_fixed`)."""
    free = changeable(inp, catalog, problem)
    if not free:
        return result
    sharing_free = [n.name for n in sharing_changeable(inp, problem)]
    relaxed = with_mig_free(with_modes_free(problem, sharing_free), free)
    return replace(
        result,
        status=PlanStatus.FEASIBLE if result.status is PlanStatus.OPTIMAL else result.status,
        best_bound=float(knapsack_bound(relaxed)),
        bound_source="knapsack",
        terms={**result.terms, "mig_modes_fixed": float(len(free))},
    )

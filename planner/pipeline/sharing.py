"""Sharing-mode changes chosen from the waiting demand before the solve.

The device plugin serves one mode per node, so a fleet whose free nodes are all exclusive cannot start
a waiting fraction however idle they are. Changing a node's mode is an action with a drain cost, like a
MIG re-partition: it is only taken on a node whose non-MIG GPUs run nothing (its MIG GPUs keep their
instances and work), costs ``policy.sharing.change_cost`` in the disruption term and is allowed unless
``policy.sharing.allow_change`` is false.

The choice is greedy, as the FGD greedy plans: with the current modes the greedy places the demand;
then, kind of node by kind of node (nodes alike in GPUs, CPU, memory, pool, labels and mode behave
alike), batches of drained nodes are flipped when the greedy then leaves less tier-weighted queue
penalty waiting (in weighted mode: by more than the changes cost), batches doubling while they pay. The
solvers plan on the cluster with the chosen modes; :func:`used_changes` keeps only the changes the plan
uses. The modes are fixed before the solve, so the solve is a restriction of the problem whenever some
node's mode could change: :func:`modes_fixed` says so in the report and gives a bound with modes free.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from gpuplan.models.cluster import EXCLUSIVE, Node, Sharing, TimeSliced, sharing_offers
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Assignment, NodeSharing, PlanStatus, Unplaced
from gpuplan.models.policy import ObjectiveMode, Policy
from gpuplan.planner.pipeline.batches import search_batches
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.layouts import cluster_with_sharing
from gpuplan.solvers.base import SolveResult, get_solver
from gpuplan.solvers.bounds import knapsack_bound, with_modes_free
from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.problem import PlacementProblem, disturbable
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)

#: Greedy plans tried at most, so that large fleets with many kinds of drained node stay quick (each kind
#: takes a number of trials logarithmic in its nodes).
MAX_TRIALS = 64
#: Time limit of each greedy trial: none, since the greedy stops at its limit and trials cut at different
#: points would compare plans of different queues (the pre-pass bounds itself by trials and its share).
TRIAL_LIMIT_S = math.inf


def flipped(sharing: Sharing, policy: Policy) -> Sharing:
    """The other mode: exclusive nodes go time-sliced with the policy's replicas, and back."""
    if sharing == EXCLUSIVE:
        return TimeSliced.model_validate({"time-slicing": {"replicas": policy.sharing.replicas}})
    return EXCLUSIVE


def drained(inp: PlanningInput) -> list[Node]:
    """Nodes with a mode and non-MIG GPUs on which no running replica holds a non-MIG GPU."""
    busy = {
        (place.node, g.index)
        for w in inp.workloads
        for place in w.running_on
        for g in place.gpus
        if g.mig_profile is None
    }
    return [
        n
        for n in inp.cluster.nodes
        if n.sharing is not None
        and any(g.mig is None for g in n.gpus)
        and not any((n.name, g.index) in busy for g in n.gpus)
    ]


def _kind_of_node(node: Node) -> Hashable:
    """Nodes with equal keys gain or lose alike from a flip."""
    return (
        tuple((g.model, g.mig is None) for g in node.gpus),
        node.cpu_milli,
        node.memory_mib,
        node.pool,
        tuple(sorted(node.labels.items())),
        repr(node.sharing),
    )


def _waiting_kinds(inp: PlanningInput) -> set[str]:
    """The GPU kinds (``whole``, ``fraction``) of the alternatives of waiting replicas."""
    return {s.kind for w in inp.workloads if w.replicas > len(w.running_on) for s in w.shapes}


def _serves(sharing: Sharing, kinds: Iterable[str]) -> bool:
    """Whether mode ``sharing`` offers some GPU kind of ``kinds`` (whole or fraction: one of each mode)."""
    return any(sharing_offers(sharing, k) for k in kinds if k in ("whole", "fraction"))


def _waiting_penalty(
    inp: PlanningInput, modes: dict[str, Sharing], catalog: HardwareCatalog, now: datetime
) -> int:
    """Tier-weighted queue penalty the greedy leaves waiting with the nodes of ``modes`` in those modes."""
    trial = inp.model_copy(update={"cluster": cluster_with_sharing(inp.cluster, _entries(modes))})
    problem = compile_problem(trial, catalog, now)
    result = get_solver("greedy-fgd").solve(problem, RunOptions(time_limit_s=TRIAL_LIMIT_S))
    waiting = {(u.workload, u.replica) for u in result.unplaced}
    return sum(queue_penalty(r, problem) for r in problem.requests if r.key in waiting)


def _flips(inp: PlanningInput, names: Iterable[str]) -> dict[str, Sharing]:
    """The nodes ``names`` each in its other mode."""
    nodes = inp.cluster.node_by_name
    return {n: flipped(s, inp.policy) for n in names if (s := nodes[n].sharing) is not None}


def _entries(modes: dict[str, Sharing]) -> tuple[NodeSharing, ...]:
    return tuple(NodeSharing(node=n, sharing=s) for n, s in sorted(modes.items()))


def _worth(policy: Policy, gain: int, changes: int) -> bool:
    """Whether placing ``gain`` more queue penalty pays for ``changes`` more mode changes."""
    if policy.objective is ObjectiveMode.WEIGHTED:
        return policy.weights.queue * gain > policy.weights.disruption * policy.sharing.change_cost * changes
    return gain > 0


def candidates(inp: PlanningInput) -> list[Node]:
    """The drained nodes whose other mode offers a GPU kind the waiting demand asks for (none when the
    policy forbids changes): the nodes whose mode the plan may change for the queue."""
    if not inp.policy.sharing.allow_change:
        return []
    wanted = _waiting_kinds(inp)
    return [
        n for n in drained(inp) if n.sharing is not None and _serves(flipped(n.sharing, inp.policy), wanted)
    ]


def drainable(inp: PlanningInput, problem: PlacementProblem) -> list[Node]:
    """The nodes with a mode and non-MIG GPUs that a plan could drain (``problem`` compiled from ``inp``):
    every replica running on one of their non-MIG GPUs may move or be preempted, and there are no more of
    them than the disruption budget lets a round move and preempt. The drained nodes are among them."""
    held: dict[str, list[bool]] = {}
    for r in problem.requests:
        if r.running is None:
            continue
        node = inp.cluster.node_by_name.get(r.running.node)
        plain = {g.index for g in node.gpus if g.mig is None} if node is not None else set()
        if any(g.index in plain and g.mig_profile is None for g in r.running.gpus):
            held.setdefault(r.running.node, []).append(disturbable(problem.policy, r))
    budget = problem.policy.disruption
    room = budget.max_moves_per_round + budget.max_preemptions_per_round
    return [
        n
        for n in inp.cluster.nodes
        if n.sharing is not None
        and any(g.mig is None for g in n.gpus)
        and all(held.get(n.name, []))
        and len(held.get(n.name, [])) <= room
    ]


def changeable(inp: PlanningInput, problem: PlacementProblem) -> list[Node]:
    """The nodes whose mode a plan of ``inp`` (compiled as ``problem``) may change to do better: the
    nodes it could drain (:func:`drainable`, busy ones too: the pre-pass only flips drained ones) whose
    other mode offers a GPU kind the waiting demand asks for; in weighted mode, where other terms count
    too, every node it could drain (none when the policy forbids changes)."""
    if not inp.policy.sharing.allow_change:
        return []
    nodes = drainable(inp, problem)
    if inp.policy.objective is ObjectiveMode.WEIGHTED:
        return nodes
    wanted = _waiting_kinds(inp)
    return [n for n in nodes if n.sharing is not None and _serves(flipped(n.sharing, inp.policy), wanted)]


def modes_fixed(inp: PlanningInput, problem: PlacementProblem, result: SolveResult) -> SolveResult:
    """``result`` of a solve on the modes the pre-pass chose (``problem``) as a plan of ``inp``: when
    some node's mode could change (:func:`changeable`: drained, or drained by the moves and preemptions
    the budget allows), the solver saw a restriction of the problem (the modes it was given), so it
    proved nothing for the whole problem: not ``OPTIMAL``, and the bound is the knapsack bound with those
    nodes' modes free (the solver's own bound holds for the modes it was given only)."""
    free = [n.name for n in changeable(inp, problem)]
    if not free:
        return result
    return replace(
        result,
        status=PlanStatus.FEASIBLE if result.status is PlanStatus.OPTIMAL else result.status,
        best_bound=float(knapsack_bound(with_modes_free(problem, free))),
        bound_source="knapsack",
        terms={**result.terms, "sharing_modes_fixed": float(len(free))},
    )


def choose_sharing(
    inp: PlanningInput, catalog: HardwareCatalog, now: datetime, budget_s: float | None = None
) -> tuple[NodeSharing, ...]:
    """The mode changes of drained nodes that let the greedy place more of the waiting demand.

    Nodes of one kind are flipped as :func:`~planner.pipeline.batches.search_batches` tries them: in
    growing batches (in name order) while a batch pays and in halving batches after one that does not,
    so a kind is flipped as far as it helps in a number of trials logarithmic in its nodes; a batch
    that pays is then trimmed from its end while that does not raise the waiting penalty. Trials stop
    when nothing waits, after :data:`MAX_TRIALS` and, if given, after ``budget_s`` seconds."""
    found = sorted(candidates(inp), key=lambda n: n.name)
    if not found:
        return ()
    by_kind: dict[Hashable, list[str]] = {}
    for node in found:
        by_kind.setdefault(_kind_of_node(node), []).append(node.name)
    chosen, trials = search_batches(
        by_kind.values(),
        lambda names: _waiting_penalty(inp, _flips(inp, names), catalog, now),
        lambda gain, batch: _worth(inp.policy, gain, len(batch)),
        max_trials=MAX_TRIALS,
        budget_s=budget_s,
    )
    modes = _flips(inp, chosen)
    if modes:
        log.info("sharing mode changes for waiting demand (%d trials): %s", trials, ", ".join(sorted(modes)))
    return _entries(modes)


def busy_changes(
    inp: PlanningInput, catalog: HardwareCatalog, now: datetime, chosen: Sequence[NodeSharing]
) -> tuple[NodeSharing, ...]:
    """The changes of the busy nodes a plan could drain (:func:`drainable`, not drained: their running
    work would have to move or be preempted first) whose other mode offers a GPU kind the waiting demand
    asks for, and that ``chosen`` leaves as they are. The greedy trials of :func:`choose_sharing` never
    move or preempt, so these are left to an exact solve, which must take that work off (its place is
    not one the new mode offers) and decides whether the change pays."""
    if not inp.policy.sharing.allow_change:
        return ()
    idle = {n.name for n in drained(inp)} | {c.node for c in chosen}
    wanted = _waiting_kinds(inp)
    busy = [
        n.name
        for n in drainable(inp, compile_problem(inp, catalog, now))
        if n.name not in idle and n.sharing is not None and _serves(flipped(n.sharing, inp.policy), wanted)
    ]
    return _entries(_flips(inp, busy))


def keeps_busy(problem: PlacementProblem, result: SolveResult, changes: Sequence[NodeSharing]) -> bool:
    """Whether ``result`` keeps a running replica where it runs on a node ``changes`` changes (a busy
    node must be drained first: a solver that keeps running work in place, as the greedy back-ends do,
    gives no plan of that change)."""
    nodes = {c.node for c in changes}
    where = {q.key: q.running for q in problem.requests if q.running is not None and q.running.node in nodes}
    return any(
        (run := where.get((a.workload, a.replica))) is not None
        and a.node == run.node
        and set(a.gpus) == set(run.gpus)
        for a in result.assignments
    )


def used_changes(
    changes: Sequence[NodeSharing],
    assignments: Iterable[Assignment],
    waiting: Iterable[Unplaced] = (),
) -> tuple[NodeSharing, ...]:
    """The ``changes`` the plan uses: some replica takes (or a waiting one has reserved) a non-MIG GPU of
    the node as only the new mode offers it; the others are dropped: the node stays as it is. A GPU
    used whole or in a fraction is out of MIG mode in the plan, whatever its mode in the input (the MIG
    pre-pass may have turned it off)."""
    uses = [(a.node, g) for a in assignments for g in a.gpus if g.mig_profile is None]
    uses += [
        (u.reserved_node, g)
        for u in waiting
        if u.reserved_node
        for g in u.reserved_gpus
        if g.mig_profile is None
    ]
    return tuple(
        change
        for change in changes
        if any(n == change.node and sharing_offers(change.sharing, g.kind) for n, g in uses)
    )


def modes_left(
    inp: PlanningInput, problem: PlacementProblem, changes: Sequence[NodeSharing], kept: Sequence[NodeSharing]
) -> PlacementProblem:
    """``problem`` (compiled with every change of ``changes``) with the nodes whose change the plan
    dropped (not in ``kept``) back in their mode: the modes the plan leaves, which its report measures."""
    dropped = {c.node for c in changes} - {c.node for c in kept}
    if not dropped:
        return problem
    mode = {n: inp.cluster.node_by_name[n].sharing for n in dropped}
    return replace(
        problem,
        nodes=tuple(
            replace(
                n, gpus=tuple(g if g.mig is not None else replace(g, sharing=mode[n.name]) for g in n.gpus)
            )
            if n.name in mode
            else n
            for n in problem.nodes
        ),
    )


def mode_notes(inp: PlanningInput, catalog: HardwareCatalog, workloads: Iterable[str]) -> dict[str, str]:
    """For each of ``workloads`` that a node's sharing mode keeps off, the sentence naming those nodes
    and why they were not changed (the policy forbids it, or they are not drained); ``inp`` holds the
    modes the plan leaves. Nodes are named in name order, whatever the cluster file's order."""
    moded = [
        (n.name, n.sharing, {catalog.canonical(g.model) for g in n.gpus if g.mig is None})
        for n in sorted(inp.cluster.nodes, key=lambda n: n.name)
        if n.sharing is not None and any(g.mig is None for g in n.gpus)
    ]
    if not moded:
        return {}
    free = {n.name for n in drained(inp)}
    found = {w: _blocked_by_modes(inp, catalog, w, moded, free) for w in sorted(set(workloads))}
    return {w: note for w, note in found.items() if note}


def _blocked_by_modes(
    inp: PlanningInput,
    catalog: HardwareCatalog,
    workload: str,
    moded: Sequence[tuple[str, Sharing, set[str]]],
    free: set[str],
) -> str:
    """The sentence naming the nodes whose mode keeps ``workload`` off (empty if none)."""
    w = inp.workload_by_id.get(workload)
    if w is None:
        return ""
    blocked = [
        name
        for name, sharing, models in moded
        if any(
            s.kind in ("whole", "fraction")
            and not sharing_offers(sharing, s.kind)
            and (not s.gpu_models or models & {catalog.canonical(m) for m in s.gpu_models})
            for s in w.shapes
        )
    ]
    if not blocked:
        return ""
    if not inp.policy.sharing.allow_change:
        why = "the policy does not allow changing a node's mode (sharing.allow_change is false)"
    elif not free.intersection(blocked):
        why = "none of them is drained"
    else:
        why = "changing them did not place more of the queue"
    shown = ", ".join(blocked[:4]) + (f" and {len(blocked) - 4} more" if len(blocked) > 4 else "")
    return f"the sharing mode of {shown} does not offer it and {why}"

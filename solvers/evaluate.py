"""One measure for every solver: the objective terms of a returned plan, computed from the plan alone.

Back-ends optimise proxies of these terms (linearised fragmentation, a topology cost per candidate),
and later passes (predicted starts, the repair of idle moves) change plans after the solve, so the
report of a plan is always computed here, from its assignments and MIG layouts:

- ``queue``: the tier-weighted queue penalty of every replica the plan leaves waiting (a preempted
  running replica waits too), and under a fairness floor what the teams lack of it, each whole
  GPU-equivalent short at more than all waiting replicas together (``floor_weight``);
- ``fragmentation``: FGD's expected fragmented free GPU capacity, in milli-GPU, for the problem's
  target mix (``problem_mix``: the expected arrivals' when given, else the demand's own), the measure
  FGD minimises greedily;
- ``disruption``: migrations (a running replica restarted in place because its GPU is re-partitioned,
  a *drain*, counts as one), preemptions, destroyed MIG instances and sharing-mode changes at their
  costs;
- ``topology``: the alternative-rank cost plus the link cost of each multi-GPU set actually chosen.

The objective is the queue term in the default lexicographic mode, the weighted sum in weighted mode.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from gpuplan.models.plan import Assignment, MigLayout, PlanStatus
from gpuplan.models.policy import ObjectiveMode
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.formulation.objective import (
    ALTERNATIVE_COST,
    MOVE_COST,
    PREEMPT_COST,
    floor_shortfall,
    floor_weight,
    queue_penalty,
)
from gpuplan.solvers.placement import FirstFitScorer, Fragmentation, NodeInfo, NodeState, Placer, problem_mix
from gpuplan.solvers.placement.options import keep
from gpuplan.solvers.placement.state import initial_state
from gpuplan.solvers.problem import NodeSpec, PlacementProblem, Request

log = logging.getLogger(__name__)

#: Term names, in lexicographic order.
TERMS = ("queue", "fragmentation", "disruption", "topology")


@dataclass(frozen=True)
class Evaluation:
    """The objective terms of one plan and the counts behind the disruption term."""

    queue: int
    fragmentation: int
    disruption: int
    topology: int
    moves: int
    preemptions: int
    destroyed_instances: int
    free_gpu_milli: int
    drains: int = 0
    sharing_changes: int = 0
    mig_mode_changes: int = 0

    def objective(self, problem: PlacementProblem) -> int:
        """The primary objective the policy asks for: the queue term, or the weighted sum."""
        if problem.policy.objective is ObjectiveMode.WEIGHTED:
            w = problem.policy.weights
            return (
                w.queue * self.queue
                + w.fragmentation * self.fragmentation
                + w.disruption * self.disruption
                + w.topology * self.topology
            )
        return self.queue

    def terms(self) -> dict[str, float]:
        """The terms and counts, as reported in a plan."""
        return {
            "queue": float(self.queue),
            "fragmentation": float(self.fragmentation),
            "disruption": float(self.disruption),
            "topology": float(self.topology),
            "moves": float(self.moves),
            "drains": float(self.drains),
            "preemptions": float(self.preemptions),
            "destroyed_mig_instances": float(self.destroyed_instances),
            "sharing_changes": float(self.sharing_changes),
            "mig_mode_changes": float(self.mig_mode_changes),
        }


def with_layouts(nodes: Sequence[NodeSpec], layouts: Sequence[MigLayout]) -> tuple[NodeSpec, ...]:
    """The nodes with a plan's target MIG layouts in place of their current ones."""
    target = {(lay.node, lay.gpu): tuple((i.profile, i.start) for i in lay.instances) for lay in layouts}
    if not target:
        return tuple(nodes)
    return tuple(
        replace(
            node,
            gpus=tuple(
                replace(g, mig=target[(node.name, g.index)]) if (node.name, g.index) in target else g
                for g in node.gpus
            ),
        )
        for node in nodes
    )


class NodeFragmentation:
    """FGD's fragmentation of single nodes under given MIG layouts, for the problem's target mix."""

    def __init__(self, problem: PlacementProblem, layouts: Sequence[MigLayout]) -> None:
        placer = Placer(with_layouts(problem.nodes, layouts), problem.catalog, FirstFitScorer())
        self.infos = placer.infos
        self.pos = {i.name: i.pos for i in self.infos}
        self.by_key = {r.key: r for r in problem.requests}
        self.measure = Fragmentation(problem_mix(problem))

    def state(self, node: str, assignments: Iterable[Assignment]) -> tuple[NodeInfo, NodeState]:
        """The node's state with ``assignments`` (all on it) in place."""
        info = self.infos[self.pos[node]]
        state = initial_state(info)
        for a in assignments:
            shape = self.by_key[(a.workload, a.replica)].shapes[a.alternative]
            state = keep(info, state, shape, a.gpus)
        return info, state

    def of(self, node: str, assignments: Iterable[Assignment]) -> float:
        """Fragmented milli-GPU of the node with ``assignments`` in place."""
        return self.measure(*self.state(node, assignments))


#: The last :func:`fragmented_milli` answer: (problem, assignments, layouts, answer). A plan's report
#: and its metrics ask for the same plan in turn; the problem is held weakly (it may be a whole fleet).
_last_fragmented: (
    tuple[weakref.ref[PlacementProblem], tuple[Assignment, ...], tuple[MigLayout, ...], tuple[float, int]]
    | None
) = None


def fragmented_milli(
    problem: PlacementProblem, assignments: Sequence[Assignment], layouts: Sequence[MigLayout]
) -> tuple[float, int]:
    """(FGD fragmentation in milli-GPU, free GPU milli) of the cluster once the plan is in place."""
    global _last_fragmented
    plan, target = tuple(assignments), tuple(layouts)
    last = _last_fragmented
    if last is not None and last[0]() is problem and last[1] == plan and last[2] == target:
        return last[3]
    found = _fragmented_milli(problem, plan, target)
    _last_fragmented = (weakref.ref(problem), plan, target, found)
    return found


def _fragmented_milli(
    problem: PlacementProblem, assignments: Sequence[Assignment], layouts: Sequence[MigLayout]
) -> tuple[float, int]:
    meter = NodeFragmentation(problem, layouts)
    on: dict[str, list[Assignment]] = {n.name: [] for n in problem.nodes}
    for a in assignments:
        on[a.node].append(a)
    fragmented = 0.0
    free = 0
    for name, placed in on.items():
        info, state = meter.state(name, placed)
        fragmented += meter.measure(info, state)
        free += sum(state.free)
    return fragmented, free


def shortfall(problem: PlacementProblem, assignments: Sequence[Assignment]) -> int:
    """Whole GPU-equivalents the teams lack to reach the fairness floor in ``assignments`` (0 without
    a floor)."""
    if not problem.fair_floor:
        return 0
    served = problem.served_units(assignments)
    return floor_shortfall(problem, served)


def _floor_part(problem: PlacementProblem, assignments: Sequence[Assignment]) -> int:
    """The fairness floor's part of the queue term (0 without a floor or when the floor is met)."""
    short = shortfall(problem, assignments)
    return floor_weight(problem) * short if short else 0


def queue_term(problem: PlacementProblem, result: SolveResult) -> int:
    """The queue penalty of the replicas a result does not place, and what it lacks of the fairness
    floor (the primary term, cheaply)."""
    placed = {(a.workload, a.replica) for a in result.assignments}
    waiting = sum(queue_penalty(q, problem) for q in problem.requests if q.key not in placed)
    return waiting + _floor_part(problem, result.assignments)


def _stays(req: Request, a: Assignment) -> bool:
    """Whether a running replica's assignment is exactly where it runs."""
    run = req.running
    assert run is not None
    return a.node == run.node and a.alternative == run.alternative and set(a.gpus) == set(run.gpus)


def _topology(problem: PlacementProblem, req: Request, a: Assignment, nodes: dict[str, NodeSpec]) -> int:
    shape = req.shapes[a.alternative]
    cost = ALTERNATIVE_COST * a.alternative
    if shape.kind == "whole" and shape.gpus > 1:
        cost += nodes[a.node].cost([g.index for g in a.gpus])
    return cost


def evaluate(
    problem: PlacementProblem,
    assignments: Sequence[Assignment],
    layouts: Sequence[MigLayout],
    sharing_changes: int = 0,
    mig_mode_changes: int = 0,
) -> Evaluation:
    """The exact objective terms of a plan (assignments, target MIG layouts, the number of nodes whose
    sharing mode it changes and of GPUs whose MIG mode it changes) of ``problem``, whose nodes are in
    the modes the plan leaves them. A MIG mode change costs ``mig.repartition_cost``, as a re-partition's
    destroyed instance does."""
    placed = {(a.workload, a.replica): a for a in assignments}
    nodes = {n.name: n for n in problem.nodes}
    current = {(n.name, g.index): set(g.mig) for n in problem.nodes for g in n.gpus if g.mig is not None}
    # A re-partition drains only the replicas on the instances it destroys; the others keep running.
    gone: set[tuple[str, int, tuple[str, int]]] = set()
    for lay in layouts:
        kept = {(i.profile, i.start) for i in lay.instances}
        gone |= {(lay.node, lay.gpu, inst) for inst in current.get((lay.node, lay.gpu), set()) - kept}
    destroyed = len(gone)
    queue = moves = drains = preemptions = topology = 0
    for req in problem.requests:
        a = placed.get(req.key)
        if a is None:
            queue += queue_penalty(req, problem)
            preemptions += req.running is not None
            continue
        topology += _topology(problem, req, a, nodes)
        if req.running is None:
            continue
        if not _stays(req, a):
            moves += 1
        elif any((a.node, g.index, (g.mig_profile, g.mig_start)) in gone for g in a.gpus):
            drains += 1
    queue += _floor_part(problem, assignments)
    fragmented, free = fragmented_milli(problem, assignments, layouts)
    disruption = (
        MOVE_COST * (moves + drains)
        + PREEMPT_COST * preemptions
        + problem.policy.mig.repartition_cost * destroyed
        + problem.policy.sharing.change_cost * sharing_changes
        + problem.policy.mig.repartition_cost * mig_mode_changes
    )
    return Evaluation(
        queue=queue,
        fragmentation=round(fragmented),
        disruption=disruption,
        topology=topology,
        moves=moves,
        preemptions=preemptions,
        destroyed_instances=destroyed,
        free_gpu_milli=free,
        drains=drains,
        sharing_changes=sharing_changes,
        mig_mode_changes=mig_mode_changes,
    )


def reported(
    problem: PlacementProblem, result: SolveResult, sharing_changes: int = 0, mig_mode_changes: int = 0
) -> SolveResult:
    """``result`` with the objective, terms and gap of the plan it returns, which changes the sharing
    mode of ``sharing_changes`` nodes and the MIG mode of ``mig_mode_changes`` GPUs (``problem`` has the
    modes the plan leaves).

    The gap is signed, ``(objective - bound) / max(1, objective)``; a bound above the objective would
    be a bug, so it is dropped (logged) rather than reported. ``OPTIMAL`` needs a zero gap: a proof of
    a model whose objective differs from the reported one (the weighted mode's linearised terms) is
    reported ``FEASIBLE``; so is a plan that drains running work, which the exact model's disruption
    term does not count (its proof is of another measure).
    """
    ev = evaluate(problem, result.assignments, result.mig_layouts, sharing_changes, mig_mode_changes)
    objective = ev.objective(problem)
    bound, source = result.best_bound, result.bound_source
    diagnostics = {k: v for k, v in result.terms.items() if k not in ev.terms()}
    if bound is not None and bound > objective:
        log.error(
            "%s reported bound %s above its plan's objective %s; bound dropped",
            result.solver,
            bound,
            objective,
        )
        bound, source = None, None
        diagnostics["invalid_bound_dropped"] = 1.0
    gap = None if bound is None else (objective - bound) / max(1.0, float(objective))
    status = result.status
    if status is PlanStatus.OPTIMAL and (gap != 0 or ev.drains):
        status = PlanStatus.FEASIBLE
    return replace(
        result,
        status=status,
        objective=float(objective),
        best_bound=bound,
        bound_source=source,
        gap=gap,
        terms={**ev.terms(), **diagnostics},
    )

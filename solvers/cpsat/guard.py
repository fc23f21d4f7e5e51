"""Keep the FGD hint when CP-SAT's plan is no better by the exact fragmentation measure.

On fleet-sized models fragmentation enters the objective linearised (``linear_frag``): each placement
costs its node's fragmentation growth as if it were made alone, so CP-SAT can prefer a plan that FGD's
own measure finds more fragmented once placements on one node interact. When the CP-SAT plan waits no
less than the hint (same queue term), both plans are measured exactly on the nodes where either puts
new work, and the less fragmented one is returned.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.evaluate import queue_term
from gpuplan.solvers.placement import Fragmentation, NodeInfo, NodeState, problem_mix
from gpuplan.solvers.placement.options import keep
from gpuplan.solvers.problem import PlacementProblem


def _new_work(problem: PlacementProblem, result: SolveResult) -> dict[int, list[int]]:
    """Node position -> indices of assignments of waiting replicas placed there."""
    node_pos = {n.name: i for i, n in enumerate(problem.nodes)}
    running = {q.key for q in problem.requests if q.running is not None}
    out: dict[int, list[int]] = {}
    for i, a in enumerate(result.assignments):
        if (a.workload, a.replica) not in running:
            out.setdefault(node_pos[a.node], []).append(i)
    return out


def fragmentation_on(
    problem: PlacementProblem,
    infos: Sequence[NodeInfo],
    states: Sequence[NodeState],
    result: SolveResult,
    placed: dict[int, list[int]],
    nodes: set[int],
    measure: Fragmentation,
) -> float:
    """Exact FGD fragmentation of ``nodes`` once the plan's new work (``placed``, from
    :func:`_new_work`) is placed from ``states``."""
    by_key = {q.key: q for q in problem.requests}
    total = 0.0
    for n in nodes:
        state = states[n]
        for i in placed.get(n, ()):
            a = result.assignments[i]
            shape = by_key[(a.workload, a.replica)].shapes[a.alternative]
            state = keep(infos[n], state, shape, a.gpus)
        total += measure(infos[n], state)
    return total


def exact_comparison(
    problem: PlacementProblem,
    infos: Sequence[NodeInfo],
    states: Sequence[NodeState],
    solved: SolveResult,
    hint: SolveResult,
) -> tuple[float, float] | None:
    """(fragmentation of ``solved``, of ``hint``) on the nodes either changes, when both wait equally."""
    if queue_term(problem, solved) != queue_term(problem, hint):
        return None
    ours, theirs = _new_work(problem, solved), _new_work(problem, hint)
    nodes = set(ours) | set(theirs)
    measure = Fragmentation(problem_mix(problem))
    return (
        fragmentation_on(problem, infos, states, solved, ours, nodes, measure),
        fragmentation_on(problem, infos, states, hint, theirs, nodes, measure),
    )

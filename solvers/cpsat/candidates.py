"""Candidate restriction for large clusters: each waiting replica only gets variables on the nodes
where FGD ranks it best (plus where the FGD hint puts it), never one boolean per (replica, GPU) of
the whole fleet."""

from __future__ import annotations

from solvers.base import SolveResult
from solvers.greedy import Fgd
from solvers.problem import PlacementProblem

#: Above this many (waiting replica, node) pairs the model restricts candidates.
FULL_MODEL_PAIRS = 20_000
#: Nodes kept per alternative of a waiting replica when restricting.
NODES_PER_ALTERNATIVE = 12


def candidate_nodes(
    problem: PlacementProblem,
    hint: SolveResult,
    movable: set[int],
    per_alternative: int = NODES_PER_ALTERNATIVE,
) -> dict[int, list[int]] | None:
    """Node positions per request, or None when the full model is small enough.

    Waiting replicas and the running ones allowed to move (``movable``) are ranked; identical ones
    share their ranking and each gets as many extra nodes as it has twins, so that a batch of equal
    pods can spread over equally good nodes. A movable replica always keeps its current node.
    """
    waiting = [r for r, q in enumerate(problem.requests) if q.running is None or r in movable]
    if len(waiting) * len(problem.nodes) <= FULL_MODEL_PAIRS:
        return None
    placer = Fgd().placer(problem)
    for q in problem.requests:
        if q.running is not None:
            placer.keep(q)
    twins: dict[tuple[object, ...], list[int]] = {}
    for r in waiting:
        q = problem.requests[r]
        twins.setdefault((q.shapes, q.team, q.tier, q.gang_domain, q.running), []).append(r)
    node_pos = {n.name: i for i, n in enumerate(problem.nodes)}
    out: dict[int, list[int]] = {}
    for group in twins.values():
        ranked = placer.ranked(problem.requests[group[0]], per_alternative + len(group) - 1)
        for r in group:
            out[r] = list(ranked)
    for r in movable:
        run = problem.requests[r].running
        assert run is not None
        if node_pos[run.node] not in out[r]:
            out[r].append(node_pos[run.node])
    req_pos = {q.key: r for r, q in enumerate(problem.requests)}
    for a in hint.assignments:
        r = req_pos[(a.workload, a.replica)]
        n = node_pos[a.node]
        if n not in out.setdefault(r, []):
            out[r].append(n)
    return out

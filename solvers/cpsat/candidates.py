"""Candidate restriction for large clusters: each waiting replica only gets variables on the nodes
where FGD ranks it best (plus where the FGD hint puts it), never one boolean per (replica, GPU) of
the whole fleet."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.placement import NodeInfo, NodeState, Placer
from gpuplan.solvers.problem import PlacementProblem

#: Above this many (waiting replica, node) pairs the model restricts candidates.
FULL_MODEL_PAIRS = 20_000
#: Nodes kept per alternative of a waiting replica when restricting.
NODES_PER_ALTERNATIVE = 12


def is_large(problem: PlacementProblem, movable: set[int]) -> bool:
    """Whether the full model would have too many (replica, node) pairs."""
    waiting = sum(q.running is None for q in problem.requests) + len(movable)
    return waiting * len(problem.nodes) > FULL_MODEL_PAIRS


@dataclass
class Rankings:
    """What the FGD placer saw once running work was kept: the placer, node states and (when ``rank``)
    per-request rankings."""

    problem: PlacementProblem
    movable: set[int]
    rank: bool = True
    per_alternative: int = NODES_PER_ALTERNATIVE
    ranked: dict[int, list[int]] = field(default_factory=dict)
    infos: tuple[NodeInfo, ...] = ()
    states: tuple[NodeState, ...] = ()
    placer: Placer | None = None

    def __call__(self, placer: Placer) -> None:
        """Record the starting state and rank the nodes for every waiting or movable replica.

        Identical replicas share their ranking; each gets as many extra nodes as it has twins, so
        that a batch of equal pods can spread over equally good nodes.
        """
        self.placer = placer
        self.infos = placer.infos
        self.states = tuple(placer.cluster.states)
        if not self.rank:
            return
        twins: dict[tuple[object, ...], list[int]] = {}
        for r, q in enumerate(self.problem.requests):
            if q.running is None or r in self.movable:
                twins.setdefault((q.shapes, q.team, q.tier, q.gang_domain, q.running), []).append(r)
        for group in twins.values():
            nodes = placer.ranked(self.problem.requests[group[0]], self.per_alternative + len(group) - 1)
            for r in group:
                self.ranked[r] = list(nodes)
        if self.movable:
            self._rank_without_movable(placer, twins)

    def _rank_without_movable(self, placer: Placer, twins: dict[tuple[object, ...], list[int]]) -> None:
        """Also offer each waiting replica the best nodes it would fit on once the running work that may
        move is gone: the room a move frees is only usable if the mover's node is a candidate."""
        bare = Placer(
            self.problem.nodes,
            self.problem.catalog,
            placer.scorer,
            allow_create=self.problem.policy.mig.allow_create,
            policy=self.problem.policy,
        )
        for r, q in enumerate(self.problem.requests):
            if q.running is not None and r not in self.movable:
                bare.keep(q)
        extra = max(1, self.per_alternative // 2)
        for group in twins.values():
            first = self.problem.requests[group[0]]
            if first.running is not None:
                continue
            nodes = bare.ranked(first, extra + len(group) - 1)
            for r in group:
                self.ranked[r].extend(n for n in nodes if n not in self.ranked[r])

    def candidates(self, hint: SolveResult) -> dict[int, list[int]]:
        """Ranked nodes per request, plus each movable replica's current node and the hint's node."""
        node_pos = {n.name: i for i, n in enumerate(self.problem.nodes)}
        out = {r: list(nodes) for r, nodes in self.ranked.items()}
        for r in self.movable:
            run = self.problem.requests[r].running
            assert run is not None
            if node_pos[run.node] not in out[r]:
                out[r].append(node_pos[run.node])
        req_pos = {q.key: r for r, q in enumerate(self.problem.requests)}
        for a in hint.assignments:
            r = req_pos[(a.workload, a.replica)]
            if r in out and node_pos[a.node] not in out[r]:
                out[r].append(node_pos[a.node])
        return out

"""Aggregation for fleet-scale planning: waiting replicas into request classes, nodes into node classes.

A request class holds the waiting replicas that are interchangeable for the plan: the same alternatives
(shapes with CPU, memory, allowed models and topology), team, tier and queue penalty. A node class holds
the nodes whose current state is interchangeable: the placement kernel's signature (static description,
free CPU, memory, GPU capacity and MIG instances, sharing tags). Fleets have few of both whatever their
size or the order of their input rows, which is what makes the configuration LP small and the plan
independent of the input order.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.placement import NodeInfo, NodeState, Placer
from gpuplan.solvers.problem import PlacementProblem, Request, ShapeSpec


@dataclass(frozen=True)
class RequestClass:
    """Interchangeable waiting replicas: their alternatives, team, tier, value and members.

    ``value`` is the queue penalty each member avoids when placed; ``members`` are request positions in
    queue order (tier, priority, time waited, then workload id and replica), never in input order.
    """

    index: int
    shapes: tuple[ShapeSpec, ...]
    team: str
    tier: str
    value: int
    members: tuple[int, ...]

    @property
    def demand(self) -> int:
        """How many replicas the class holds."""
        return len(self.members)


@dataclass(frozen=True)
class NodeClass:
    """Nodes in interchangeable states: a representative's description and state, and the members;
    ``repartition``: whether a plan may destroy their idle MIG instances and create others."""

    index: int
    info: NodeInfo
    state: NodeState
    members: tuple[int, ...]
    repartition: bool = False

    @property
    def count(self) -> int:
        """How many nodes are in the class."""
        return len(self.members)


def _request_key(problem: PlacementProblem, req: Request) -> Hashable:
    return (req.shapes, req.team, req.tier, req.tier_rank, req.preemptible, queue_penalty(req, problem))


def _queue_key(req: Request) -> tuple[int, int, int, str, int]:
    """Queue order that does not depend on the input order: tier, priority, wait, then the id."""
    return (req.tier_rank, -req.priority, -req.wait_s, req.workload, req.replica)


def request_classes(problem: PlacementProblem, positions: Sequence[int]) -> tuple[RequestClass, ...]:
    """The classes of the requests at ``positions`` (waiting, not in a gang), ordered by their key."""
    groups: dict[Hashable, list[int]] = {}
    for r in positions:
        groups.setdefault(_request_key(problem, problem.requests[r]), []).append(r)
    ordered = sorted(
        groups.values(), key=lambda rs: _queue_key(min((problem.requests[r] for r in rs), key=_queue_key))
    )
    out = []
    for i, members in enumerate(ordered):
        first = problem.requests[members[0]]
        out.append(
            RequestClass(
                index=i,
                shapes=first.shapes,
                team=first.team,
                tier=first.tier,
                value=queue_penalty(first, problem),
                members=tuple(sorted(members, key=lambda r: _queue_key(problem.requests[r]))),
            )
        )
    return tuple(out)


def node_classes(
    placer: Placer, *, with_room: bool = False, repartition: bool = False
) -> tuple[NodeClass, ...]:
    """The node classes of a placer's current state (its signature groups), ordered by the name of
    their first member so that the order does not depend on the input order of the nodes; with
    ``with_room``, only the nodes with CPU and memory left; ``repartition``: whether a plan may
    destroy idle MIG instances and create others (the policy allows both)."""
    states = placer.cluster.states
    groups = [
        sorted(g.members, key=lambda n: placer.infos[n].name)
        for g in placer.cluster.groups.values()
        if g.members and (not with_room or (states[g.first()].cpu > 0 and states[g.first()].mem > 0))
    ]
    groups.sort(key=lambda members: placer.infos[members[0]].name)
    return tuple(
        NodeClass(i, placer.infos[m[0]], states[m[0]], tuple(m), repartition) for i, m in enumerate(groups)
    )

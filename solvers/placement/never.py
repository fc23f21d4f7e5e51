"""Which replicas can never be placed, even on an empty cluster: the one answer the back-ends, the bounds
and the explanations give.

A replica never fits when no node open to its team could host any of its alternatives were it empty
(:meth:`~gpuplan.solvers.placement.placer.Placer.never_fits`). A gang is placed whole or not at all, so
all its replicas never fit when one of them never fits, or when no value of its domain label (the whole
cluster, without one) has nodes that, empty, could hold them all
(:func:`gpuplan.models.rules.gang.never_fits`). A replica that runs may stay where it runs, and so may a
gang with a running replica: they never count. Nor does a MIG shape when the policy allows
re-partitioning, since the empty states keep today's MIG layouts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from gpuplan.models.policy import Policy
from gpuplan.models.rules import gang as gang_rule
from gpuplan.solvers.placement.options import describe, options
from gpuplan.solvers.placement.placer import FirstFitScorer, Placer
from gpuplan.solvers.placement.state import NodeInfo, NodeState
from gpuplan.solvers.problem import PlacementProblem, Request, ShapeSpec

Key = tuple[str, int]


@dataclass(frozen=True)
class GangShortfall:
    """Why a gang never fits, and the nodes that could host one of its replicas (in the value of its
    domain label with the most room)."""

    reason: str
    nodes: tuple[str, ...] = ()


def what(req: Request) -> str:
    """The alternatives of a request, as a reason names them."""
    return " or ".join(describe(s) for s in req.shapes)


def replica_never_fits(policy: Policy, req: Request, placer: Placer) -> bool:
    """Whether no node open to ``req``'s team could host any of its alternatives, even empty, under
    ``policy`` (``placer``: any placer over the problem's nodes; its empty states are used)."""
    if req.running is not None:
        return False
    if policy.mig.allow_repartition and any(s.kind == "mig" for s in req.shapes):
        return False
    return placer.never_fits(req)


def gang_never_fits(policy: Policy, placer: Placer, members: Sequence[Request]) -> GangShortfall | None:
    """Why the gang of ``members`` (every replica of one gang, running ones too) can never be placed
    whole on ``placer``'s nodes, even empty, under ``policy``; ``None`` when it might be."""
    if not members or any(m.running is not None for m in members):
        return None
    if policy.mig.allow_repartition and any(s.kind == "mig" for m in members for s in m.shapes):
        return None
    name = members[0].gang
    blocker = next((m for m in members if placer.never_fits(m)), None)
    if blocker is not None:
        return GangShortfall(
            f"gang '{name}' can never be placed whole: no node of the cluster could host {what(blocker)} "
            f"('{blocker.workload}' replica {blocker.replica}), even if empty"
        )
    domains = tuple(sorted({m.gang_domain for m in members if m.gang_domain}))
    size = len(members)
    memo = _memo(placer)
    room, where_from = memo.room(frozenset((m.shapes, m.team) for m in members), domains, size)
    if not gang_rule.never_fits(size, room.values()):
        return None
    asked = what(members[0]) if len({m.shapes for m in members}) == 1 else "one of its replicas"
    inside = f" inside one value of node label {', '.join(repr(d) for d in domains)}" if domains else ""
    best = min(room, key=lambda v: (-room[v], v), default=None)
    if best is None:
        return GangShortfall(
            f"gang '{name}' needs {size} replicas of {asked}{inside}, and no node that carries that label "
            "could host one, even if empty"
        )
    value = ", ".join(f"{d}={v}" for d, v in zip(domains, best, strict=True))
    where = f" in one ({value})" if domains else ""
    nodes = tuple(sorted(n for i in where_from[best] for n in memo.names(domains)[i][best]))
    if room[best] == len(nodes):  # each node holds one replica at most
        have = f"at most {len(nodes)}" if domains else f"only {len(nodes)}"
        return GangShortfall(
            f"gang '{name}' needs {size} nodes that can each host {asked}{inside}, and the cluster has "
            f"{have}{where}, even if empty",
            nodes,
        )
    return GangShortfall(
        f"gang '{name}' needs room for {size} replicas of {asked}{inside}, and the cluster's nodes could "
        f"hold at most {room[best]}{where}, even if empty",
        nodes,
    )


#: A value of a gang's domain labels (empty: the whole cluster).
Value = tuple[str | None, ...]
#: What a gang asks: the alternatives and team of its replicas.
Kinds = frozenset[tuple[tuple[ShapeSpec, ...], str]]


#: Per value, at most how many replicas its empty nodes hold, and the node classes that hold any.
_Room = tuple[dict[Value, int], dict[Value, list[int]]]


class _Memo:
    """What one placer's empty nodes hold, kept between questions (a greedy pass asks once per gang that
    found no room): the node classes, which shapes fit each, and each class's nodes per domain value."""

    def __init__(self, placer: Placer) -> None:
        self.classes = list(placer.empty_classes())
        self._fits: dict[tuple[int, ShapeSpec], bool] = {}
        self._names: dict[tuple[str, ...], list[dict[Value, list[str]]]] = {}
        self._rooms: dict[tuple[Kinds, tuple[str, ...], int], _Room] = {}

    def names(self, domains: tuple[str, ...]) -> list[dict[Value, list[str]]]:
        """Per class, its nodes by their value of ``domains`` (nodes without one of them left out)."""
        if domains not in self._names:
            out: list[dict[Value, list[str]]] = []
            for _, _, nodes in self.classes:
                by: dict[Value, list[str]] = defaultdict(list)
                for node in nodes:
                    value = tuple(node.spec.labels.get(d) for d in domains)
                    if None not in value:
                        by[value].append(node.name)
                out.append(by)
            self._names[domains] = out
        return self._names[domains]

    def room(self, kinds: Kinds, domains: tuple[str, ...], size: int) -> _Room:
        """Per value of ``domains``, at most how many of ``size`` replicas asking ``kinds`` its empty
        nodes hold, and the classes whose nodes hold any."""
        key = (kinds, domains, size)
        if key not in self._rooms:
            room: dict[Value, int] = defaultdict(int)
            where_from: dict[Value, list[int]] = defaultdict(list)
            names = self.names(domains)
            for i, (info, state, _) in enumerate(self.classes):
                holds = self._holds(i, info, state, kinds, size)
                for value, nodes in names[i].items() if holds else ():
                    room[value] += holds * len(nodes)
                    where_from[value].append(i)
            self._rooms[key] = (dict(room), dict(where_from))
        return self._rooms[key]

    def _holds(self, i: int, info: NodeInfo, state: NodeState, kinds: Kinds, size: int) -> int:
        """At most how many replicas asking ``kinds`` an empty node of class ``i`` holds: none if no
        alternative of theirs fits it alone, else what its CPU, memory and (whole GPUs only) GPUs allow."""
        fitting: set[ShapeSpec] = set()
        for shapes, team in kinds:
            if info.reserved is None or team in info.reserved:
                fitting.update(s for s in shapes if self._fit(i, info, state, s))
        if not fitting:
            return 0
        limits = [size]
        for have, need in (
            (state.cpu, min(s.cpu_milli for s in fitting)),
            (state.mem, min(s.memory_mib for s in fitting)),
        ):
            if need > 0:
                limits.append(have // need)
        if all(s.kind == "whole" and s.gpus > 0 for s in fitting):
            limits.append(len(info.spec.gpus) // min(s.gpus for s in fitting))
        return min(limits)

    def _fit(self, i: int, info: NodeInfo, state: NodeState, shape: ShapeSpec) -> bool:
        key = (i, shape)
        if key not in self._fits:
            self._fits[key] = bool(options(info, state, shape))
        return self._fits[key]


_MEMOS: WeakKeyDictionary[Placer, _Memo] = WeakKeyDictionary()


def _memo(placer: Placer) -> _Memo:
    """The memo of ``placer`` (it lives as long as the placer; its empty states never change)."""
    memo = _MEMOS.get(placer)
    if memo is None:
        memo = _MEMOS[placer] = _Memo(placer)
    return memo


def never_fitting(problem: PlacementProblem, placer: Placer | None = None) -> dict[Key, str]:
    """Every replica of ``problem`` that never fits, with why: its own alternatives fit no empty node, or
    its gang can never be placed whole (:func:`gang_never_fits`)."""
    placer = placer or Placer(problem.nodes, problem.catalog, FirstFitScorer(), policy=problem.policy)
    out = {
        q.key: f"no node of the cluster could host {what(q)}, even if empty"
        for q in problem.requests
        if replica_never_fits(problem.policy, q, placer)
    }
    gangs: dict[str, list[Request]] = defaultdict(list)
    for q in problem.requests:
        if q.gang is not None:
            gangs[q.gang].append(q)
    for members in gangs.values():
        short = gang_never_fits(problem.policy, placer, members)
        if short is not None:
            out.update({m.key: short.reason for m in members if m.key not in out})
    return out

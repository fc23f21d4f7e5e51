"""The policy rules a greedy placement must keep: team-exclusive nodes, GPU sharing isolation, quotas.

Gang domains are kept by :meth:`gpuplan.solvers.placement.Placer.place_gang`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.policy import IsolationKind, Policy
from gpuplan.solvers.placement.options import Option
from gpuplan.solvers.placement.state import MILLI, NodeInfo
from gpuplan.solvers.problem import NodeSpec, Request, ShapeSpec


@dataclass(frozen=True)
class Demand:
    """What a request brings besides its shape: its team, sharing tags and charged quotas.

    A sharing tag ``"<rule>=<group>"`` says which team (or isolated tier) the request belongs to for
    isolation rule number ``<rule>``; a GPU may not hold two tags of one rule with different groups.
    """

    team: str
    tags: tuple[str, ...] = ()
    quotas: tuple[int, ...] = ()


def reserved_teams(policy: Policy, node: NodeSpec) -> frozenset[str] | None:
    """Teams allowed on ``node`` by the team-exclusive rules covering it (``None``: any team)."""
    teams: frozenset[str] | None = None
    for rule in policy.isolation:
        if rule.kind is not IsolationKind.TEAM_EXCLUSIVE or rule.team is None:
            continue
        if node.name in rule.nodes or (rule.pool is not None and node.pool == rule.pool):
            mine = frozenset({rule.team})
            teams = mine if teams is None else teams & mine
    return teams


class Rules:
    """Isolation and quota bookkeeping for one placement run (quota usage is mutable)."""

    def __init__(self, policy: Policy, catalog: HardwareCatalog) -> None:
        self.sharing = tuple(
            (i, r)
            for i, r in enumerate(policy.isolation)
            if r.kind in (IsolationKind.NO_SHARED_GPU_ACROSS_TEAMS, IsolationKind.TIERS_NO_SHARE)
        )
        # Integer quota sums in a unit that divides milli-GPU and every MIG compute geometry exactly.
        self.unit = MILLI * math.lcm(*(m.compute_slices for m in catalog.models))
        self.quotas = policy.quotas
        self.models = tuple(
            None if q.gpu_model is None else catalog.canonical(q.gpu_model) for q in self.quotas
        )
        # An infinite quota never binds (its limit is never read: it charges nothing).
        self.limits = tuple(
            0 if math.isinf(q.gpus) else int(Fraction(repr(q.gpus)) * self.unit) for q in self.quotas
        )
        self.used = [0] * len(self.quotas)

    @property
    def tagged(self) -> bool:
        """Whether GPUs must remember which teams or tiers they serve."""
        return bool(self.sharing)

    def demand(self, request: Request) -> Demand:
        """The request's team, sharing tags and the quotas that charge it."""
        tags = []
        for i, rule in self.sharing:
            if rule.kind is IsolationKind.NO_SHARED_GPU_ACROSS_TEAMS:
                tags.append(f"{i}={request.team}")
            elif request.tier in rule.tiers:
                tags.append(f"{i}={request.tier}")
        charged = tuple(
            i
            for i, q in enumerate(self.quotas)
            if q.team == request.team and not (q.borrow and request.preemptible) and not math.isinf(q.gpus)
        )
        return Demand(request.team, tuple(sorted(tags)), charged)

    def budget(self, demand: Demand) -> tuple[int, ...]:
        """Remaining units of each quota charging the demand."""
        return tuple(self.limits[i] - self.used[i] for i in demand.quotas)

    def _units(self, info: NodeInfo, shape: ShapeSpec, pos: int) -> int:
        """Quota units of one GPU use of ``shape`` on the GPU at ``pos``."""
        if shape.kind == "whole":
            return self.unit
        if shape.kind == "fraction":
            return self.unit * shape.milli // MILLI
        model = info.models[pos]
        assert shape.mig_profile is not None
        return self.unit * model.profile(shape.mig_profile).compute_slices // model.compute_slices

    def charges(self, info: NodeInfo, shape: ShapeSpec, gpus: Sequence[int], demand: Demand) -> list[int]:
        """Units each charging quota would take for ``shape`` on GPU positions ``gpus`` of the node."""
        out = []
        for i in demand.quotas:
            q, model = self.quotas[i], self.models[i]
            if q.pool is not None and info.spec.pool != q.pool:
                out.append(0)
                continue
            out.append(
                sum(
                    self._units(info, shape, p) for p in gpus if model is None or info.models[p].name == model
                )
            )
        return out

    def fits(self, info: NodeInfo, shape: ShapeSpec, option: Option, demand: Demand) -> bool:
        """Whether taking ``option`` keeps every charging quota within its limit (a quota the option
        does not count, by GPU model or pool, is no obstacle even when running work is over it)."""
        if not demand.quotas:
            return True
        charged = self.charges(info, shape, option.gpus, demand)
        return all(
            c == 0 or self.used[i] + c <= self.limits[i] for i, c in zip(demand.quotas, charged, strict=True)
        )

    def charge(
        self, info: NodeInfo, shape: ShapeSpec, gpus: Sequence[int], demand: Demand, sign: int = 1
    ) -> None:
        """Record the quota use of a placement or of running work (``sign`` -1: give it back)."""
        for i, c in zip(demand.quotas, self.charges(info, shape, gpus, demand), strict=True):
            self.used[i] += sign * c

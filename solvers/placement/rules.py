"""The policy rules a greedy placement must keep: team-exclusive nodes, GPU sharing isolation, quotas.

The rules themselves (who is allowed where, who may share a GPU, what a GPU use charges, which quota
charges it, a quota's limit) are in :mod:`gpuplan.models.rules`; this module keeps their bookkeeping for
one placement run, in the catalog's exact quota unit. Gang domains are kept by
:meth:`gpuplan.solvers.placement.Placer.place_gang`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.policy import Policy
from gpuplan.models.rules import isolation, quota
from gpuplan.solvers.placement.options import Option
from gpuplan.solvers.placement.state import NodeInfo
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
    """Teams allowed on ``node`` by the team-exclusive rules covering it (``None``: any team;
    :func:`gpuplan.models.rules.isolation.reserved_teams`)."""
    return isolation.reserved_teams(policy.isolation, node.name, node.pool)


class Rules:
    """Isolation and quota bookkeeping for one placement run (quota usage is mutable)."""

    def __init__(self, policy: Policy, catalog: HardwareCatalog) -> None:
        self.sharing = tuple((i, r) for i, r in enumerate(policy.isolation) if isolation.keeps_apart(r))
        # Integer quota sums in the catalog's quota unit, which every share divides exactly.
        self.unit = quota.quota_unit(catalog)
        self.quotas = policy.quotas
        self.models = tuple(quota.quota_model(q, catalog) for q in self.quotas)
        limits = tuple(quota.limit_units(q.gpus, self.unit) for q in self.quotas)
        # An infinite quota never binds: it charges nothing (its limit, 0 here, is never read).
        self.binding = tuple(limit is not None for limit in limits)
        self.limits = tuple(limit or 0 for limit in limits)
        self.used = [0] * len(self.quotas)

    @property
    def tagged(self) -> bool:
        """Whether GPUs must remember which teams or tiers they serve."""
        return bool(self.sharing)

    def demand(self, request: Request) -> Demand:
        """The request's team, sharing tags and the quotas that charge it."""
        tags = []
        for i, rule in self.sharing:
            group = isolation.sharing_group(rule, request.team, request.tier)
            if group is not None:
                tags.append(f"{i}={group}")
        charged = tuple(
            i
            for i, q in enumerate(self.quotas)
            if self.binding[i] and quota.charges_replica(q, request.team, request.preemptible)
        )
        return Demand(request.team, tuple(sorted(tags)), charged)

    def budget(self, demand: Demand) -> tuple[int, ...]:
        """Remaining units of each quota charging the demand."""
        return tuple(self.limits[i] - self.used[i] for i in demand.quotas)

    def _units(self, info: NodeInfo, shape: ShapeSpec, pos: int) -> int:
        """Quota units of one GPU use of ``shape`` on the GPU at ``pos``."""
        return quota.use_units(shape.kind, shape.milli, shape.mig_profile, info.models[pos], self.unit)

    def charges(self, info: NodeInfo, shape: ShapeSpec, gpus: Sequence[int], demand: Demand) -> list[int]:
        """Units each charging quota would take for ``shape`` on GPU positions ``gpus`` of the node."""
        out = []
        pool = info.spec.pool
        for i in demand.quotas:
            q, model = self.quotas[i], self.models[i]
            out.append(
                sum(
                    self._units(info, shape, p)
                    for p in gpus
                    if quota.charges_gpu(q, model, pool, info.models[p].name)
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

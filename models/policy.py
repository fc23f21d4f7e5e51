"""Policy: tiers and weights, team quotas, isolation rules, disruption budget, MIG, fair share, the
fairness floor and objective."""

from __future__ import annotations

import itertools
from enum import StrEnum
from typing import Annotated

from pydantic import AwareDatetime, Field, StrictInt, model_validator

from gpuplan.models.base import Name, Seconds, Strict
from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.workload import BACKGROUND, LATENCY_SENSITIVE, STANDARD

#: Largest quota in GPU-equivalents: beyond any fleet, and finite.
MAX_QUOTA_GPUS = 1_000_000


class Tier(Strict):
    """A service tier: its queue-time weight and the wait it should not exceed."""

    name: Name = Field(min_length=1)
    weight: StrictInt = Field(ge=0, description='a whole number, not text: 3, not "3"')
    target_wait_s: Seconds | None = None
    may_be_preempted: bool = True
    default_duration_s: Seconds | None = Field(default=None, gt=0)


def default_tiers() -> tuple[Tier, ...]:
    """latency-sensitive 10, standard 3, background 1."""
    return (
        Tier(name=LATENCY_SENSITIVE, weight=10, target_wait_s=300, may_be_preempted=False),
        Tier(name=STANDARD, weight=3, target_wait_s=3600),
        Tier(name=BACKGROUND, weight=1, target_wait_s=86400),
    )


class Quota(Strict):
    """At most ``gpus`` GPU-equivalents for a team, optionally per GPU model or pool."""

    team: Name
    gpus: float = Field(ge=0, le=MAX_QUOTA_GPUS, allow_inf_nan=False)
    gpu_model: str | None = None
    pool: Name | None = None
    borrow: bool = False


class IsolationKind(StrEnum):
    """Kinds of isolation rule."""

    TEAM_EXCLUSIVE = "team-exclusive"
    NO_SHARED_GPU_ACROSS_TEAMS = "no-shared-gpu-across-teams"
    TIERS_NO_SHARE = "tiers-no-share"


class IsolationRule(Strict):
    """An isolation rule.

    ``team-exclusive``: the listed nodes (or every node of ``pool``) run only ``team``'s work.
    ``no-shared-gpu-across-teams``: a GPU is never shared by two teams.
    ``tiers-no-share``: the listed tiers never share a GPU with each other.
    """

    kind: IsolationKind
    team: Name | None = None
    pool: Name | None = None
    nodes: tuple[Name, ...] = ()
    tiers: tuple[Name, ...] = ()

    @model_validator(mode="after")
    def _complete(self) -> IsolationRule:
        if self.kind is IsolationKind.TEAM_EXCLUSIVE and (
            not self.team or (not self.pool and not self.nodes)
        ):
            raise ValueError("a team-exclusive rule needs a team and a pool or nodes")
        if self.kind is IsolationKind.TIERS_NO_SHARE and len(self.tiers) < 2:
            raise ValueError("a tiers-no-share rule needs at least two tiers")
        return self


class DisruptionBudget(Strict):
    """How much running work one round may disturb, and when.

    ``preempt_only_for_higher_tier`` (default true, as Kubernetes preempts a pod only for a pod of
    higher priority): a running replica is preempted only when the plan starts a waiting replica of a
    strictly higher tier (higher weight) on the node it ran on; false, any preemptible replica may be
    preempted (within the budget) whenever that lowers the objective.
    """

    max_moves_per_round: int = Field(default=0, ge=0)
    max_preemptions_per_round: int = Field(default=0, ge=0)
    max_moves_per_team: int | None = Field(default=None, ge=0)
    min_runtime_s: Seconds = 0
    preempt_latency_sensitive: bool = False
    preempt_only_for_higher_tier: bool = True


class MigPolicy(Strict):
    """Whether gpuplan may change MIG layouts, and what a re-partition costs."""

    allow_create: bool = True
    allow_repartition: bool = False
    repartition_cost: int = Field(default=10, ge=0)


class SharingPolicy(Strict):
    """Whether gpuplan may change a drained node's sharing mode for waiting demand, what a change costs
    (in the disruption term, as a MIG re-partition) and the replicas a node switched to time-slicing
    gets."""

    allow_change: bool = True
    change_cost: int = Field(default=10, ge=0)
    replicas: int = Field(default=4, ge=1, le=MILLI_PER_GPU)


class KubernetesPolicy(Strict):
    """How the Kubernetes export hands pods to schedulers: ``scheduler_name`` is the ``schedulerName`` of
    the pending pods gpuplan binds itself (a ``v1 Binding``); ``scheduling_gate`` the scheduling gate that
    is gpuplan's own (the export removes only this one, never another controller's); ``gang_scheduler_name``
    the scheduler of the pods of a gang, the one running the coscheduling plugin that reads their PodGroup
    (``None``: the default scheduler has it)."""

    scheduler_name: str = Field(default="gpuplan", min_length=1)
    scheduling_gate: str = Field(default="gpuplan.io/placement", min_length=1)
    gang_scheduler_name: str | None = Field(default=None, min_length=1)


#: The queue penalty's fair-share factors are whole hundredths (:func:`fair_units`).
FAIR_FACTOR_SCALE = 100


def fair_units(factor: float) -> int:
    """A fair-share factor as the queue penalty's integer multiplier, in hundredths (at least 1)."""
    return max(1, round(FAIR_FACTOR_SCALE * factor))


#: GPU-hours of usage: a number of at most a billion, so that any sum of them stays finite.
GpuHours = Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)]


class FairShare(Strict):
    """Fair share with usage history: among replicas of equal tiers, a team that used less than its share
    of the fleet lately is served first.

    Each team's standing is Slurm's classic fair-share factor ``2 ** (-usage / share)`` over its
    normalised share (``shares``, 1 each by default) and its share of the decayed usage (GPU-hours,
    halved every ``half_life_h`` hours, Slurm's ``PriorityDecayHalfLife``); the queue penalty of its
    waiting replicas is multiplied by ``min_factor + (max_factor - min_factor) * standing``
    (:mod:`gpuplan.models.rules.fairness`, in whole hundredths: :func:`fair_units`). ``usage`` is usage
    given directly (decayed GPU-hours at planning time, e.g. from another accounting system);
    ``history_usage`` and ``history_until`` are what ``gpuplan replan`` reads from the plan history
    (replaced on every replan); running work counts from its ``started_at`` (or ``history_until``, if
    later) up to the planning time.
    """

    shares: dict[Name, float] = Field(default_factory=dict)
    default_share: float = Field(default=1.0, gt=0, le=1e6, allow_inf_nan=False)
    half_life_h: float = Field(default=168.0, gt=0, le=1e6, allow_inf_nan=False)
    min_factor: float = Field(default=1.0, gt=0, le=100, allow_inf_nan=False)
    max_factor: float = Field(default=2.0, gt=0, le=100, allow_inf_nan=False)
    usage: dict[Name, GpuHours] = Field(default_factory=dict)
    history_usage: dict[Name, GpuHours] = Field(default_factory=dict)
    history_until: AwareDatetime | None = None
    #: Kueue's fair-sharing preemption: under ``disruption.preempt_only_for_higher_tier``, a running
    #: replica on an over-share team's borrowed capacity may also be preempted for a replica of the same
    #: tier, of a team below its share, that the plan starts on its node
    #: (:func:`gpuplan.models.rules.fairness.fair_displaces`).
    preempt_borrowed: bool = False

    @model_validator(mode="after")
    def _range(self) -> FairShare:
        for team, share in self.shares.items():
            if not 0 < share <= 1e6:
                raise ValueError(f"shares: team '{team}' has share {share:g}; give a number in (0, 1e6]")
        if self.max_factor < self.min_factor:
            raise ValueError(f"max_factor {self.max_factor:g} is below min_factor {self.min_factor:g}")
        return self

    def share(self, team: str) -> float:
        """The share weight of ``team`` (``default_share`` when not listed)."""
        return self.shares.get(team, self.default_share)


class ObjectiveMode(StrEnum):
    """Lexicographic (default) or weighted combination of the objective terms."""

    LEXICOGRAPHIC = "lexicographic"
    WEIGHTED = "weighted"


class ObjectiveWeights(Strict):
    """Term weights (weighted mode) — queue time, fragmentation, disruption, topology."""

    queue: int = Field(default=1000, ge=0)
    fragmentation: int = Field(default=100, ge=0)
    disruption: int = Field(default=10, ge=0)
    topology: int = Field(default=1, ge=0)


class Policy(Strict):
    """All rules and preferences of one planning run."""

    tiers: tuple[Tier, ...] = Field(default_factory=default_tiers)
    teams: tuple[Name, ...] = ()
    quotas: tuple[Quota, ...] = ()
    isolation: tuple[IsolationRule, ...] = ()
    disruption: DisruptionBudget = Field(default_factory=DisruptionBudget)
    mig: MigPolicy = Field(default_factory=MigPolicy)
    sharing: SharingPolicy = Field(default_factory=SharingPolicy)
    kubernetes: KubernetesPolicy = Field(default_factory=KubernetesPolicy)
    objective: ObjectiveMode = ObjectiveMode.LEXICOGRAPHIC
    weights: ObjectiveWeights = Field(default_factory=ObjectiveWeights)
    #: Left out of the dump when absent, so a policy without it keeps its digest.
    fair_share: FairShare | None = Field(default=None, exclude_if=lambda v: v is None)
    #: The fairness floor: every team holds at least this share of its max-min fair entitlement of the
    #: fleet's GPU-equivalents (:mod:`gpuplan.models.rules.fairness`), whenever a plan can give it; what
    #: a plan lacks is the first part of the queue term (a whole GPU-equivalent short outweighs every
    #: waiting replica). Left out of the dump when absent, as ``fair_share``.
    fair_floor: float | None = Field(
        default=None, gt=0, le=1, allow_inf_nan=False, exclude_if=lambda v: v is None
    )

    @model_validator(mode="after")
    def _references(self) -> Policy:
        names = {t.name for t in self.tiers}
        if len(names) != len(self.tiers):
            raise ValueError("tier names must be unique")
        for i, rule in enumerate(self.isolation):
            for t in rule.tiers:
                if t not in names:
                    raise ValueError(f"isolation[{i}] names unknown tier '{t}'")
        if self.teams:
            known = set(self.teams)
            for i, q in enumerate(self.quotas):
                if q.team not in known:
                    raise ValueError(f"quotas[{i}] names unknown team '{q.team}'")
        if self.fair_share is not None:
            self._tiers_dominate(self.fair_share)
        return self

    def _tiers_dominate(self, fair: FairShare) -> None:
        """A standing never lifts a lower tier over a higher one: for every two tiers of different
        weight, the higher one's penalty at the lowest factor exceeds the lower one's at the highest
        (equal demand and wait; factors as the queue penalty's integers)."""
        low, high = fair_units(fair.min_factor), fair_units(fair.max_factor)
        weights = sorted({max(1, t.weight) for t in self.tiers})
        for below, above in itertools.pairwise(weights):
            if above * low <= below * high:
                raise ValueError(
                    f"fair_share: factors {fair.min_factor:g} to {fair.max_factor:g} would let a standing "
                    f"lift a tier of weight {below} over one of weight {above}; keep max_factor / "
                    f"min_factor below {above / below:.3g}"
                )
        ranks = {t.weight for t in self.tiers}
        if high > low and len(ranks) > len({max(1, w) for w in ranks}):
            raise ValueError(
                "fair_share: tiers of weight 0 and 1 rank apart but weigh the same in the queue penalty, so "
                "a standing would reorder them; give them distinct weights above 0 or set max_factor = "
                "min_factor"
            )

    def tier(self, name: str) -> Tier:
        """The tier called ``name``."""
        for t in self.tiers:
            if t.name == name:
                return t
        raise KeyError(name)

    def tier_rank(self, name: str) -> int:
        """0 for the most important tier (highest weight), growing downwards; equal weights share
        a rank."""
        weight = self.tier(name).weight
        return len({t.weight for t in self.tiers if t.weight > weight})

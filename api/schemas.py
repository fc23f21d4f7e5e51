"""Request and response bodies of the API (the planning formats themselves come from ``models``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from gpuplan.models.base import Name
from gpuplan.models.capacity import CapacityGap, NodeTypeCatalog
from gpuplan.models.cluster import Cluster
from gpuplan.models.plan import Plan
from gpuplan.models.policy import Policy
from gpuplan.models.review import Frontier, ReplayReport, RuleCost
from gpuplan.models.workload import Workload
from gpuplan.planner.store.records import JobRecord
from gpuplan.solvers.base import solver_names


class PlanOptions(BaseModel):
    """How to solve: back-end, time limit (capped by the server), seed and planning time."""

    model_config = ConfigDict(extra="forbid")

    solver: str = Field(default="cpsat", description="cpsat, milp, greedy-fgd, best-fit, first-fit, …")
    time_limit_s: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="seconds (server default if unset); beyond the server's max_time_limit_s: 413",
    )
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    now: datetime | None = Field(default=None, description="planning time, ISO-8601 (default: now)")
    deterministic: StrictBool = Field(default=False, description="true or false (not 0 or 1)")

    @field_validator("solver")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in solver_names():
            raise ValueError(f"unknown solver '{name}' (choose from {', '.join(solver_names())})")
        return name


class PlanRequest(BaseModel):
    """A planning job: the cluster, the demand, the policy and how to solve."""

    model_config = ConfigDict(extra="forbid")

    cluster: Cluster
    workloads: tuple[Workload, ...]
    policy: Policy = Field(default_factory=Policy)
    team: Name | None = Field(
        default=None,
        min_length=1,
        description="team owning the plan (default: the workloads' team when they share one)",
    )
    options: PlanOptions = Field(default_factory=PlanOptions)


class CapacityGapRequest(PlanRequest):
    """A capacity-gap job: the planning input plus the node types that may be bought."""

    node_types: NodeTypeCatalog | None = Field(
        default=None, description="purchasable node types (default: the bundled example catalog)"
    )


class PolicyCostRequest(PlanRequest):
    """A policy-cost job: the planning input, and the node types whose prices give the money per
    GPU-hour. ``options.time_limit_s`` is for the whole job, split evenly among its plans (the policy as
    given and one per rule relaxed); the plans are always deterministic."""

    node_types: NodeTypeCatalog | None = Field(
        default=None,
        description="node types whose prices give the money per GPU-hour (default: the bundled catalog, "
        "EXAMPLE prices)",
    )


#: Most fairness floors one frontier job is asked for, and most points or bisection probes it makes.
MAX_FRONTIER_LEVELS = 12
MAX_FRONTIER_PROBES = 6


class FrontierRequest(PolicyCostRequest):
    """A frontier job: the planning input, the node types whose prices give the money per GPU-hour, and
    either the fairness floors to plan at (``levels``) or how many points to find (``points``, with
    ``probes`` bisection steps towards the highest floor a plan reaches). ``options.time_limit_s`` is for
    the whole job, split evenly among its plans."""

    levels: list[Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]] | None = Field(
        default=None,
        max_length=MAX_FRONTIER_LEVELS,
        description="fairness floors in (0, 1] to plan at (default: from the efficient plan's fairness up "
        "to the highest a plan reaches)",
    )
    points: int = Field(default=6, ge=2, le=MAX_FRONTIER_LEVELS, description="points without levels")
    probes: int = Field(default=3, ge=0, le=MAX_FRONTIER_PROBES, description="bisection steps (no levels)")


class ReplayOptions(BaseModel):
    """How long a replay may take: each stored plan is made again with its own solver, seed, planning
    time and rounds."""

    model_config = ConfigDict(extra="forbid")

    time_limit_s: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="seconds for the whole job, split evenly among the plans (server default if unset); "
        "beyond the server's max_time_limit_s: 413",
    )


#: Most stored plans one replay job makes again.
MAX_REPLAY_PLANS = 50


class ReplayRequest(BaseModel):
    """A replay job: a proposed policy, made again on the inputs of the last stored plans."""

    model_config = ConfigDict(extra="forbid")

    policy: Policy = Field(description="the proposed policy")
    last: int = Field(default=5, ge=1, le=MAX_REPLAY_PLANS, description="replay the last N stored plans")
    options: ReplayOptions = Field(default_factory=ReplayOptions)


class ValidateRequest(BaseModel):
    """A plan to check against a cluster (and the demand and policy when given)."""

    model_config = ConfigDict(extra="forbid")

    cluster: Cluster
    plan: Plan
    workloads: tuple[Workload, ...] | None = Field(
        default=None, description="the demand (default: as the plan describes it)"
    )
    policy: Policy = Field(default_factory=Policy)


class ViolationOut(BaseModel):
    """One broken rule."""

    rule: str
    subject: str
    message: str


class SkippedOut(BaseModel):
    """A rule family the validator could not check."""

    family: str = Field(description="shapes, gpu-models, gangs, topology, isolation, quotas, disruption, …")
    reason: str = Field(description="why, e.g. 'without the workloads'")


class ValidateResponse(BaseModel):
    """The validator's verdict."""

    valid: bool
    violations: list[ViolationOut]
    skipped: list[SkippedOut] | None = Field(
        default=None, description="rule families that could not be checked (absent when all were)"
    )


class JobLinks(BaseModel):
    """Where to find a job and its result."""

    self_: str = Field(alias="self")
    result: str

    model_config = ConfigDict(populate_by_name=True)


class JobOut(JobRecord):
    """A planning job: its stored record, progress while solving, and the outcome when done."""

    progress: dict[str, Any] | None = Field(
        default=None, description="while solving: phase, stage, incumbent objective, bound, elapsed_s"
    )
    links: JobLinks


class JobResult(BaseModel):
    """A finished job and its plan (or, for a capacity-gap job, the gap; for a policy-cost job, the rules
    by cost; for a replay job, the comparison; for a frontier job, its points)."""

    job: JobOut
    plan: Plan | None = None
    capacity_gap: CapacityGap | None = None
    policy_cost: list[RuleCost] | None = None
    replay: ReplayReport | None = None
    frontier: Frontier | None = None


class JobPage(BaseModel):
    """One page of the job history, newest first."""

    items: list[JobOut]
    total: int
    limit: int
    offset: int


class AuditOut(BaseModel):
    """Who did what to a job, and when."""

    at: datetime | None
    key_id: str
    role: str
    action: str
    detail: dict[str, Any]


class Health(BaseModel):
    """Liveness or readiness."""

    status: str
    checks: dict[str, str] = Field(default_factory=dict)

"""Request and response bodies of the API (the planning formats themselves come from ``models``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from gpuplan.models.base import Name
from gpuplan.models.capacity import CapacityGap, NodeTypeCatalog
from gpuplan.models.cluster import Cluster
from gpuplan.models.plan import Plan
from gpuplan.models.policy import Policy
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
    """A finished job and its plan (or, for a capacity-gap job, the gap)."""

    job: JobOut
    plan: Plan | None = None
    capacity_gap: CapacityGap | None = None


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

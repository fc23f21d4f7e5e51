"""A job as the plan history keeps it: the single definition of a job's fields and of its input.

A job is one plan asked for, by ``gpuplan replan`` (stored done) or through the API (queued, run, then
closed). The job table's columns (``tables``, and the API's view of it, ``api.store.tables``), the
row-to-record mappings (``plans``, ``api.store.store``) and the API's job body (``api.schemas.JobOut``,
which adds live progress and links) all derive from :class:`JobRecord`; what a job was asked to plan is
a :class:`JobInput`, wherever it is read (a stored plan, a job the API's queue hands out).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from gpuplan.models.base import MAX_NAME_LENGTH


class JobStatus(StrEnum):
    """Life of a job. ``interrupted``: the server stopped while it was queued or running."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


class JobSource(StrEnum):
    """Who made a job: the API, or ``gpuplan replan`` (stored already done)."""

    API = "api"
    REPLAN = "replan"


#: The kind of a placement-plan job (the other kind is ``capacity-gap``).
PLAN_KIND = "plan"


@dataclass(frozen=True)
class Length:
    """The column length of a text field: a storage hint, not a validation rule (a stored value is
    always read back, whatever its length)."""

    chars: int


def as_utc(value: datetime) -> datetime:
    """SQLite returns naive datetimes: read every stored time as UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]


def now() -> datetime:
    """The current time in UTC."""
    return datetime.now(UTC)


class JobRecord(BaseModel):
    """One job: what was asked, by whom, and how it ended."""

    model_config = ConfigDict(frozen=True)

    id: Annotated[str, Length(32)] = Field(description="job id (32 hex digits)")
    source: Annotated[JobSource, Length(16)] = Field(
        default=JobSource.API, description="api, or replan for a plan stored by `gpuplan replan`"
    )
    kind: Annotated[str, Length(20)] = Field(description="plan or capacity-gap")
    status: Annotated[JobStatus, Length(16)]
    team: Annotated[str | None, Length(MAX_NAME_LENGTH)]
    solver: Annotated[str, Length(40)]
    time_limit_s: float
    nodes: int
    workloads: int
    submitted_by: Annotated[str, Length(40)] = Field(description="the API key's id, or cli")
    created_at: UtcDatetime
    started_at: UtcDatetime | None
    finished_at: UtcDatetime | None
    attempts: int
    plan_status: Annotated[str | None, Length(20)] = Field(
        description="OPTIMAL, FEASIBLE or FALLBACK when done"
    )
    outcome: Annotated[str | None, Length(200)] = Field(
        description="what kind of plan, e.g. cut short by the time limit"
    )
    error: str | None


@dataclass(frozen=True)
class JobInput:
    """What a job was asked to plan, as stored."""

    inputs_sha256: str
    input_json: str
    options: dict[str, Any]


#: Who submitted the jobs stored by the command line (``gpuplan replan``), in ``submitted_by``.
CLI_SUBMITTER = "cli"

"""The job store (SQLAlchemy): jobs, their inputs and results, the audit trail and the API keys made by
``gpuplan serve --create-key``. SQLite by default, PostgreSQL by URL (``planner.db.make_engine``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Row

from gpuplan.planner.db import make_engine


class JobStatus(StrEnum):
    """Life of a job. ``interrupted``: the server stopped while it was queued or running."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)
#: Finished jobs that may be submitted again with their stored input.
RESUBMITTABLE = (JobStatus.INTERRUPTED, JobStatus.FAILED, JobStatus.CANCELLED)

metadata = MetaData()

jobs = Table(
    "api_jobs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("kind", String(20), nullable=False, default="plan"),
    Column("team", String(200), nullable=True),
    Column("solver", String(40), nullable=False),
    Column("time_limit_s", Float, nullable=False),
    Column("nodes", Integer, nullable=False),
    Column("workloads", Integer, nullable=False),
    Column("submitted_by", String(40), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=True),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    Column("attempts", Integer, nullable=False, default=1),
    Column("plan_status", String(20), nullable=True),
    Column("outcome", String(200), nullable=True),
    Column("error", Text, nullable=True),
    Index("ix_api_jobs_created", "created_at"),
    Index("ix_api_jobs_team", "team"),
    Index("ix_api_jobs_status", "status"),
)

job_inputs = Table(
    "api_job_inputs",
    metadata,
    Column("job_id", String(32), ForeignKey("api_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("inputs_sha256", String(64), nullable=False),
    Column("input_json", Text, nullable=False),
    Column("options_json", Text, nullable=False),
)

job_results = Table(
    "api_job_results",
    metadata,
    Column("job_id", String(32), ForeignKey("api_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("plan_json", Text, nullable=False),
)

audit = Table(
    "api_audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("key_id", String(40), nullable=False),
    Column("role", String(200), nullable=False),
    Column("action", String(40), nullable=False),
    Column("job_id", String(32), nullable=True),
    Column("detail", Text, nullable=False),
    Index("ix_api_audit_job", "job_id"),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("key_hash", String(64), primary_key=True),
    Column("role", String(200), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)


def utc(value: datetime | None) -> datetime | None:
    """SQLite returns naive datetimes: read every stored time as UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def now() -> datetime:
    """The current time in UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class JobRecord:
    """One row of the job table."""

    id: str
    status: JobStatus
    kind: str
    team: str | None
    solver: str
    time_limit_s: float
    nodes: int
    workloads: int
    submitted_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    attempts: int
    plan_status: str | None
    outcome: str | None
    error: str | None

    @classmethod
    def from_row(cls, row: Row[Any]) -> JobRecord:
        """Build from a ``jobs`` row."""
        m = row._mapping
        created = utc(m["created_at"])
        assert created is not None
        return cls(
            id=m["id"],
            status=JobStatus(m["status"]),
            kind=m["kind"],
            team=m["team"],
            solver=m["solver"],
            time_limit_s=m["time_limit_s"],
            nodes=m["nodes"],
            workloads=m["workloads"],
            submitted_by=m["submitted_by"],
            created_at=created,
            started_at=utc(m["started_at"]),
            finished_at=utc(m["finished_at"]),
            attempts=m["attempts"],
            plan_status=m["plan_status"],
            outcome=m["outcome"],
            error=m["error"],
        )


@dataclass(frozen=True)
class JobInput:
    """What a job was asked to plan, as stored."""

    inputs_sha256: str
    input_json: str
    options: dict[str, Any]


@dataclass(frozen=True)
class Actor:
    """Who did something, for the audit trail."""

    key_id: str
    role: str


class Store:
    """Reads and writes of the service's tables; every method is one short transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def open(cls, target: str) -> Store:
        """Open (and create the tables of) the database at ``target``: a file path or a URL."""
        store = cls(make_engine(target))
        metadata.create_all(store.engine)
        return store

    def close(self) -> None:
        """Release the connection pool."""
        self.engine.dispose()

    def ping(self) -> None:
        """Raise if the database cannot be reached."""
        with self.engine.connect() as conn:
            conn.execute(select(1))

    # --- keys -------------------------------------------------------------------------------------------

    def add_key(self, digest: str, role: str) -> None:
        """Store a key's hash with its role."""
        with self.engine.begin() as conn:
            conn.execute(insert(api_keys).values(key_hash=digest, role=role, created_at=now()))

    def key_role(self, digest: str) -> str | None:
        """The role of the stored key with hash ``digest``."""
        with self.engine.connect() as conn:
            role: str | None = conn.execute(
                select(api_keys.c.role).where(api_keys.c.key_hash == digest)
            ).scalar_one_or_none()
        return role

    # --- jobs -------------------------------------------------------------------------------------------

    def create_job(self, job: JobRecord, data: JobInput, actor: Actor, detail: dict[str, Any]) -> None:
        """Insert a queued job, its input and the audit record of its submission."""
        with self.engine.begin() as conn:
            conn.execute(
                insert(jobs).values(
                    id=job.id,
                    status=job.status.value,
                    kind=job.kind,
                    team=job.team,
                    solver=job.solver,
                    time_limit_s=job.time_limit_s,
                    nodes=job.nodes,
                    workloads=job.workloads,
                    submitted_by=job.submitted_by,
                    created_at=job.created_at,
                    attempts=job.attempts,
                )
            )
            conn.execute(
                insert(job_inputs).values(
                    job_id=job.id,
                    inputs_sha256=data.inputs_sha256,
                    input_json=data.input_json,
                    options_json=json.dumps(data.options, sort_keys=True),
                )
            )
            self._audit(conn, actor, "submit", job.id, detail)

    def record(self, actor: Actor, action: str, job_id: str | None, detail: dict[str, Any]) -> None:
        """Append one audit record."""
        with self.engine.begin() as conn:
            self._audit(conn, actor, action, job_id, detail)

    @staticmethod
    def _audit(conn: Any, actor: Actor, action: str, job_id: str | None, detail: dict[str, Any]) -> None:
        conn.execute(
            insert(audit).values(
                at=now(),
                key_id=actor.key_id,
                role=actor.role,
                action=action,
                job_id=job_id,
                detail=json.dumps(detail, sort_keys=True, default=str),
            )
        )

    def audit_trail(self, job_id: str) -> list[dict[str, Any]]:
        """The audit records of one job, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(audit).where(audit.c.job_id == job_id).order_by(audit.c.id)).all()
        return [
            {
                "at": utc(r.at),
                "key_id": r.key_id,
                "role": r.role,
                "action": r.action,
                "detail": json.loads(r.detail),
            }
            for r in rows
        ]

    def mark_running(self, job_id: str) -> bool:
        """Queued -> running; False when the job is no longer queued (cancelled meanwhile)."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.status == JobStatus.QUEUED.value)
                .values(status=JobStatus.RUNNING.value, started_at=now())
            )
        return bool(res.rowcount)

    def finish(
        self,
        job_id: str,
        status: JobStatus,
        *,
        plan_json: str | None = None,
        plan_status: str | None = None,
        outcome: str | None = None,
        error: str | None = None,
    ) -> bool:
        """Close an active job; False (and nothing written) when it had already been closed."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.status.in_([s.value for s in ACTIVE]))
                .values(
                    status=status.value,
                    finished_at=now(),
                    plan_status=plan_status,
                    outcome=outcome,
                    error=error,
                )
            )
            if not res.rowcount:
                return False
            if plan_json is not None:
                conn.execute(insert(job_results).values(job_id=job_id, plan_json=plan_json))
        return True

    def requeue(self, job_id: str, actor: Actor) -> bool:
        """A finished, unsuccessful job queued again with its stored input; False if not resubmittable."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.status.in_([s.value for s in RESUBMITTABLE]))
                .values(
                    status=JobStatus.QUEUED.value,
                    started_at=None,
                    finished_at=None,
                    plan_status=None,
                    outcome=None,
                    error=None,
                    attempts=jobs.c.attempts + 1,
                )
            )
            if not res.rowcount:
                return False
            self._audit(conn, actor, "resubmit", job_id, {})
        return True

    def interrupt_active(self) -> int:
        """Mark every queued or running job ``interrupted`` (at start-up: its solve was lost)."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(jobs.c.status.in_([s.value for s in ACTIVE]))
                .values(
                    status=JobStatus.INTERRUPTED.value,
                    finished_at=now(),
                    error="the server stopped before this job finished; resubmit it",
                )
            )
        return int(res.rowcount)

    def job(self, job_id: str) -> JobRecord | None:
        """One job, or None."""
        with self.engine.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
        return JobRecord.from_row(row) if row is not None else None

    def job_input(self, job_id: str) -> JobInput | None:
        """The stored input of a job."""
        with self.engine.connect() as conn:
            row = conn.execute(select(job_inputs).where(job_inputs.c.job_id == job_id)).first()
        if row is None:
            return None
        return JobInput(row.inputs_sha256, row.input_json, json.loads(row.options_json))

    def result(self, job_id: str) -> str | None:
        """The plan JSON of a finished job."""
        with self.engine.connect() as conn:
            text: str | None = conn.execute(
                select(job_results.c.plan_json).where(job_results.c.job_id == job_id)
            ).scalar_one_or_none()
        return text

    def history(
        self,
        *,
        team: str | None = None,
        status: JobStatus | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[JobRecord], int]:
        """Jobs newest first, filtered, one page of them, and how many match in all."""
        conds = []
        if team is not None:
            conds.append(jobs.c.team == team)
        if status is not None:
            conds.append(jobs.c.status == status.value)
        if since is not None:
            conds.append(jobs.c.created_at >= since)
        if until is not None:
            conds.append(jobs.c.created_at < until)
        with self.engine.connect() as conn:
            total = int(conn.execute(select(func.count()).select_from(jobs).where(*conds)).scalar_one())
            rows = conn.execute(
                select(jobs)
                .where(*conds)
                .order_by(jobs.c.created_at.desc(), jobs.c.id.desc())
                .limit(limit)
                .offset(offset)
            ).all()
        return [JobRecord.from_row(r) for r in rows], total

    def status_counts(self) -> dict[str, int]:
        """How many jobs are in each state."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(jobs.c.status, func.count()).group_by(jobs.c.status)).all()
        return {str(s): int(n) for s, n in rows}

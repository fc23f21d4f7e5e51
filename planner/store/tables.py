"""The store's tables: one SQLAlchemy metadata for plans, jobs, their inputs and results, the audit trail
and API keys.

The job table's columns are derived from :class:`~gpuplan.planner.store.records.JobRecord` (its field
types, optionality and :class:`~gpuplan.planner.store.records.Length` hints), plus ``number``, the
store's own sequence: the order jobs were stored in, and the plan number ``gpuplan replan`` prints,
and the queue's columns, which are not part of a job's record: the lease of the process running it
(``lease_owner``, ``lease_until``), how many leases ran out (``lease_expiries``) and its last progress.
The schema of a database is made by the Alembic migrations in ``migrations/``, never by ``create_all``;
a test checks that the migrated schema is this one.
"""

from __future__ import annotations

import types
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic.fields import FieldInfo
from sqlalchemy import (
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.types import TypeEngine

from gpuplan.planner.store.records import JobRecord, Length

metadata = MetaData()


def _base_type(annotation: Any) -> tuple[Any, bool]:
    """The type under ``Annotated[...]`` and ``... | None``, and whether ``None`` is allowed."""
    nullable = False
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            nullable = nullable or len(args) < len(get_args(annotation))
            (annotation,) = args
        else:
            return annotation, nullable


def _sql_type(name: str, field: FieldInfo) -> TypeEngine[Any]:
    """The column type of a job field: text with a :class:`Length` is a VARCHAR, text without is TEXT."""
    kind, _ = _base_type(field.annotation)
    length = next((m.chars for m in field.metadata if isinstance(m, Length)), None)
    if kind is str or (isinstance(kind, type) and issubclass(kind, StrEnum)):
        return String(length) if length is not None else Text()
    simple: dict[Any, TypeEngine[Any]] = {int: Integer(), float: Float(), datetime: DateTime(timezone=True)}
    if kind in simple:
        return simple[kind]
    raise TypeError(f"job field '{name}': no column type for {kind!r}")


def job_columns() -> list[Column[Any]]:
    """One column per :class:`JobRecord` field, in field order."""
    return [
        Column(name, _sql_type(name, field), nullable=_base_type(field.annotation)[1])
        for name, field in JobRecord.model_fields.items()
    ]


jobs = Table(
    "gpuplan_jobs",
    metadata,
    Column("number", Integer, primary_key=True, autoincrement=True),
    *job_columns(),
    Column("lease_owner", String(100), nullable=True),
    Column("lease_until", DateTime(timezone=True), nullable=True),
    Column("lease_expiries", Integer, nullable=False, server_default="0"),
    Column("progress", Text, nullable=True),
    UniqueConstraint("id", name="uq_gpuplan_jobs_id"),
    Index("ix_gpuplan_jobs_created", "created_at"),
    Index("ix_gpuplan_jobs_finished", "finished_at"),
    Index("ix_gpuplan_jobs_team", "team"),
    Index("ix_gpuplan_jobs_status", "status"),
    Index("ix_gpuplan_jobs_lease", "lease_until"),
)

#: The job table's columns that make a :class:`JobRecord`, in field order.
JOB_FIELDS = tuple(jobs.c[name] for name in JobRecord.model_fields)

job_inputs = Table(
    "gpuplan_job_inputs",
    metadata,
    Column("job_id", String(32), ForeignKey("gpuplan_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("inputs_sha256", String(64), nullable=False),
    Column("input_json", Text, nullable=False),
    Column("options_json", Text, nullable=False),
)

job_results = Table(
    "gpuplan_job_results",
    metadata,
    Column("job_id", String(32), ForeignKey("gpuplan_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("plan_json", Text, nullable=False),
)

audit = Table(
    "gpuplan_audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("key_id", String(40), nullable=False),
    Column("role", String(200), nullable=False),
    Column("action", String(40), nullable=False),
    Column("job_id", String(32), nullable=True),
    Column("detail", Text, nullable=False),
    Index("ix_gpuplan_audit_job", "job_id"),
)

api_keys = Table(
    "gpuplan_api_keys",
    metadata,
    Column("key_hash", String(64), primary_key=True),
    Column("role", String(200), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
)

#: The processes that run jobs (servers with solver processes and ``gpuplan worker``s), each with its
#: last heartbeat: ``/readyz`` of a server without solver processes says whether any of them is alive.
workers = Table(
    "gpuplan_workers",
    metadata,
    Column("owner", String(100), primary_key=True),
    Column("processes", Integer, nullable=False),
    Column("ready", Integer, nullable=False),
    Column("seen_at", DateTime(timezone=True), nullable=False),
)

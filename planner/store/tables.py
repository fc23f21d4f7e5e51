"""The plan history's tables: jobs (every plan asked for, by ``gpuplan replan`` or the API), their inputs
and results.

The job table's columns are derived from :class:`~gpuplan.planner.store.records.JobRecord` (its field
types, optionality and :class:`~gpuplan.planner.store.records.Length` hints), plus ``number``, the
store's own sequence: the order jobs were stored in, and the plan number ``gpuplan replan`` prints.
The API adds its queue's columns to the same table (:func:`job_table`, ``api.store.tables``). The
schema of a database is made by the Alembic migrations in ``migrations/``, never by ``create_all``; a
test checks that the migrated schema is this one.
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
from sqlalchemy.schema import SchemaItem
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


def job_table(meta: MetaData, *extra: SchemaItem) -> Table:
    """The job table in ``meta``: ``number``, one column per :class:`JobRecord` field and its indexes,
    then ``extra`` columns and indexes (the API's queue: ``api.store.tables``)."""
    return Table(
        "gpuplan_jobs",
        meta,
        Column("number", Integer, primary_key=True, autoincrement=True),
        *job_columns(),
        *extra,
        UniqueConstraint("id", name="uq_gpuplan_jobs_id"),
        Index("ix_gpuplan_jobs_created", "created_at"),
        Index("ix_gpuplan_jobs_finished", "finished_at"),
        Index("ix_gpuplan_jobs_team", "team"),
        Index("ix_gpuplan_jobs_status", "status"),
    )


jobs = job_table(metadata)

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

"""The API's view of the schema: one SQLAlchemy metadata for the job table with the queue's columns, the
plan history's job inputs and results, and the API's own tables (the audit trail, API keys, workers).

The job table is the plan history's (``planner.store.tables.job_table``: ``number`` and the columns of
:class:`~gpuplan.planner.store.records.JobRecord`), with the queue's columns, which are not part of a
job's record: the lease of the process running it (``lease_owner``, ``lease_until``), how many leases
ran out (``lease_expiries``) and its last progress. The API's migrations (``migrations/``, after the
plan history's) make the API's part; a test checks that the migrated schema is this one.
"""

from __future__ import annotations

from sqlalchemy import Column, DateTime, Index, Integer, MetaData, String, Table, Text

from gpuplan.planner.store import tables as plan_tables
from gpuplan.planner.store.records import JobRecord

metadata = MetaData()

jobs = plan_tables.job_table(
    metadata,
    Column("lease_owner", String(100), nullable=True),
    Column("lease_until", DateTime(timezone=True), nullable=True),
    Column("lease_expiries", Integer, nullable=False, server_default="0"),
    Column("progress", Text, nullable=True),
    Index("ix_gpuplan_jobs_lease", "lease_until"),
)

#: The job table's columns that make a :class:`JobRecord`, in field order.
JOB_FIELDS = tuple(jobs.c[name] for name in JobRecord.model_fields)

#: The plan history's tables of inputs and results, here referring to :data:`jobs`.
job_inputs = plan_tables.job_inputs.to_metadata(metadata)
job_results = plan_tables.job_results.to_metadata(metadata)

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

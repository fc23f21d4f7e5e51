"""One store: the tables of plans and jobs, made from scratch or converted from the tables before Alembic.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

A database made before Alembic may hold ``gpuplan replan``'s plan history (``gpuplan_plan_history``),
the API's tables (``api_jobs``, ``api_job_inputs``, ``api_job_results``, ``api_audit``, ``api_keys``),
or both, as ``create_all`` made them. This revision creates the store's tables and, for each old table
found, copies its rows over and drops it, all in the one transaction the upgrade runs in:

- a stored plan becomes a ``done`` plan job of source ``replan`` with its plan (and so its
  provenance), its inputs and the options its provenance records; its number is its old id, so the plan
  numbers ``gpuplan replan`` printed stay valid;
- API jobs keep their ids and are numbered after the stored plans, oldest first; a job stored before
  jobs had kinds (no ``kind`` column) is a ``plan`` job;
- job inputs, results, audit records and API keys are copied as they are.

The tables are written out here rather than taken from ``tables.py``: a revision is a fixed step, and
``tables.py`` moves on with later revisions.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

HISTORY = "gpuplan_plan_history"
#: The API's old tables, in an order that drops a table after those referring to it.
OLD_API = ("api_job_inputs", "api_job_results", "api_audit", "api_keys", "api_jobs")
#: Rows of the old plan history converted per batch (each holds a plan and its inputs).
BATCH = 100


def _create() -> dict[str, sa.Table]:
    """The store's tables and indexes, empty."""
    jobs = op.create_table(
        "gpuplan_jobs",
        sa.Column("number", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("team", sa.String(200), nullable=True),
        sa.Column("solver", sa.String(40), nullable=False),
        sa.Column("time_limit_s", sa.Float, nullable=False),
        sa.Column("nodes", sa.Integer, nullable=False),
        sa.Column("workloads", sa.Integer, nullable=False),
        sa.Column("submitted_by", sa.String(40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("plan_status", sa.String(20), nullable=True),
        sa.Column("outcome", sa.String(200), nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.UniqueConstraint("id", name="uq_gpuplan_jobs_id"),
    )
    for name, column in (
        ("created", "created_at"),
        ("finished", "finished_at"),
        ("team", "team"),
        ("status", "status"),
    ):
        op.create_index(f"ix_gpuplan_jobs_{name}", "gpuplan_jobs", [column])
    inputs = op.create_table(
        "gpuplan_job_inputs",
        sa.Column(
            "job_id", sa.String(32), sa.ForeignKey("gpuplan_jobs.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("inputs_sha256", sa.String(64), nullable=False),
        sa.Column("input_json", sa.Text, nullable=False),
        sa.Column("options_json", sa.Text, nullable=False),
    )
    results = op.create_table(
        "gpuplan_job_results",
        sa.Column(
            "job_id", sa.String(32), sa.ForeignKey("gpuplan_jobs.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("plan_json", sa.Text, nullable=False),
    )
    audit = op.create_table(
        "gpuplan_audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("key_id", sa.String(40), nullable=False),
        sa.Column("role", sa.String(200), nullable=False),
        sa.Column("action", sa.String(40), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=True),
        sa.Column("detail", sa.Text, nullable=False),
    )
    op.create_index("ix_gpuplan_audit_job", "gpuplan_audit", ["job_id"])
    keys = op.create_table(
        "gpuplan_api_keys",
        sa.Column("key_hash", sa.String(64), primary_key=True),
        sa.Column("role", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    assert jobs is not None and inputs is not None and results is not None
    assert audit is not None and keys is not None
    return {"jobs": jobs, "inputs": inputs, "results": results, "audit": audit, "keys": keys}


def _old(bind: sa.Connection, name: str) -> sa.Table:
    return sa.Table(name, sa.MetaData(), autoload_with=bind)


def _copy(bind: sa.Connection, old: sa.Table, new: sa.Table) -> None:
    """Every row of ``old`` into ``new``, column by column (the same names)."""
    names = [c.name for c in new.columns]
    bind.execute(new.insert().from_select(names, sa.select(*(old.c[n] for n in names))))


def _team(inputs: dict[str, Any]) -> str | None:
    """The workloads' team when they share one (as the API names a job's team)."""
    teams = {w.get("team") for w in inputs.get("workloads", ())}
    return teams.pop() if len(teams) == 1 else None


def _history_rows(row: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A stored plan as a job row, its input row and its result row."""
    provenance = json.loads(row.provenance_json)
    inputs = json.loads(row.inputs_json)
    job_id = uuid.uuid4().hex
    time_limit = float(provenance.get("replan_time_limit_s", provenance.get("time_limit_s", 0.0)))
    solver = str(provenance.get("solver", row.solver))
    options = {
        "kind": "plan",
        "solver": solver,
        "time_limit_s": time_limit,
        "seed": row.seed,
        "now": row.planned_for or None,
        "deterministic": bool(provenance.get("deterministic", True)),
        "rounds": int(provenance.get("replan_rounds", 1)),
    }
    job = {
        "number": row.id,
        "id": job_id,
        "source": "replan",
        "kind": "plan",
        "status": "done",
        "team": _team(inputs),
        "solver": solver,
        "time_limit_s": time_limit,
        "nodes": len(inputs.get("cluster", {}).get("nodes", ())),
        "workloads": len(inputs.get("workloads", ())),
        "submitted_by": "cli",
        "created_at": row.created_at,
        "started_at": row.created_at,
        "finished_at": row.created_at,
        "attempts": 1,
        "plan_status": row.status,
        "outcome": None,
        "error": None,
    }
    data = {
        "job_id": job_id,
        "inputs_sha256": row.inputs_sha256,
        "input_json": row.inputs_json,
        "options_json": json.dumps(options, sort_keys=True),
    }
    return job, data, {"job_id": job_id, "plan_json": row.plan_json}


def _convert_history(bind: sa.Connection, new: dict[str, sa.Table]) -> int:
    """Copy the old plan history; return the highest plan number (0 when it was empty)."""
    old = _old(bind, HISTORY)
    rows = bind.execute(sa.select(old).order_by(old.c.id), execution_options={"yield_per": BATCH})
    for batch in rows.partitions():
        converted = [_history_rows(row) for row in batch]
        bind.execute(new["jobs"].insert(), [job for job, _, _ in converted])
        bind.execute(new["inputs"].insert(), [data for _, data, _ in converted])
        bind.execute(new["results"].insert(), [result for _, _, result in converted])
    return int(bind.execute(sa.select(sa.func.coalesce(sa.func.max(old.c.id), 0))).scalar_one())


def _convert_api(bind: sa.Connection, new: dict[str, sa.Table], found: set[str], after: int) -> None:
    """Copy the API's old tables; jobs are numbered from ``after + 1``, oldest first."""
    old = _old(bind, "api_jobs")
    jobs = new["jobs"]
    number = sa.func.row_number().over(order_by=(old.c.created_at, old.c.id)) + after
    kind = old.c.kind if "kind" in old.c else sa.literal("plan", sa.String)
    made: dict[str, sa.ColumnElement[Any]] = {
        "number": number,
        "source": sa.literal("api", sa.String),
        "kind": kind,
    }
    columns = [made[c.name] if c.name in made else old.c[c.name] for c in jobs.columns]
    bind.execute(jobs.insert().from_select([c.name for c in jobs.columns], sa.select(*columns)))
    for name, table in (
        ("api_job_inputs", "inputs"),
        ("api_job_results", "results"),
        ("api_audit", "audit"),
        ("api_keys", "keys"),
    ):
        if name in found:
            _copy(bind, _old(bind, name), new[table])


def _restart_sequence(bind: sa.Connection, table: str, column: str) -> None:
    """After rows were copied with their numbers, PostgreSQL's sequence continues after the highest."""
    if bind.dialect.name == "postgresql":
        bind.execute(
            sa.text(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                f"(SELECT max({column}) FROM {table}))"
            )
        )


def upgrade() -> None:
    """Create the store's tables; convert and drop the tables made before Alembic, if any."""
    bind = op.get_bind()
    found = set(sa.inspect(bind).get_table_names())
    new = _create()
    last_plan = _convert_history(bind, new) if HISTORY in found else 0
    if "api_jobs" in found:
        _convert_api(bind, new, found, last_plan)
    _restart_sequence(bind, "gpuplan_jobs", "number")
    _restart_sequence(bind, "gpuplan_audit", "id")
    for name in (*OLD_API, HISTORY):
        if name in found:
            op.drop_table(name)


def downgrade() -> None:
    """Drop the store's tables (the tables from before Alembic are not made again)."""
    for name in ("gpuplan_job_inputs", "gpuplan_job_results", "gpuplan_audit", "gpuplan_api_keys"):
        op.drop_table(name)
    op.drop_table("gpuplan_jobs")

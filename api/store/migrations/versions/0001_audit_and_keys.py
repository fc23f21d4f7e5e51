"""The API's first tables: the audit trail and the API keys, made from scratch or converted from the
tables before Alembic.

Revision ID: 0001
Revises:
Create Date: 2026-11-30 (split from the single chain's 0001 on 2026-12-05)

The API's part of the single chain's revision 0001 (the plan tables were the rest, the plan history's
revision ``history_0001`` now): a database that chain upgraded has these tables, and its revision, in
``alembic_version``, the API's version table, so this chain goes on from it. It runs after the plan
history's chain (``gpuplan.api.store.migrate``).

The audit records and keys of a database made before Alembic (``api_audit``, ``api_keys``, as
``create_all`` made them) are copied as they are and their tables dropped, in the one transaction the
upgrade runs in; the plan history converted the old jobs.

The tables are written out here rather than taken from ``tables.py``: a revision is a fixed step, and
``tables.py`` moves on with later revisions.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

#: The API's old tables of audit records and keys, and the tables they go to.
OLD = {"api_audit": "gpuplan_audit", "api_keys": "gpuplan_api_keys"}


def _create() -> dict[str, sa.Table]:
    """The two tables and their index, empty."""
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
    assert audit is not None and keys is not None
    return {"gpuplan_audit": audit, "gpuplan_api_keys": keys}


def _copy(bind: sa.Connection, name: str, new: sa.Table) -> None:
    """Every row of the old table ``name`` into ``new``, column by column (the same names)."""
    old = sa.Table(name, sa.MetaData(), autoload_with=bind)
    names = [c.name for c in new.columns]
    bind.execute(new.insert().from_select(names, sa.select(*(old.c[n] for n in names))))


def upgrade() -> None:
    """Create the two tables; convert and drop the old ones made before Alembic, if any."""
    bind = op.get_bind()
    found = set(sa.inspect(bind).get_table_names())
    new = _create()
    for old, table in OLD.items():
        if old in found:
            _copy(bind, old, new[table])
    if bind.dialect.name == "postgresql":
        # After rows were copied with their ids, PostgreSQL's sequence continues after the highest.
        sequence = "pg_get_serial_sequence('gpuplan_audit', 'id')"
        bind.execute(sa.text(f"SELECT setval({sequence}, (SELECT max(id) FROM gpuplan_audit))"))
    for old in OLD:
        if old in found:
            op.drop_table(old)


def downgrade() -> None:
    """Drop the two tables (the tables from before Alembic are not made again)."""
    op.drop_table("gpuplan_api_keys")
    op.drop_table("gpuplan_audit")

"""The job table as a queue shared by several servers: a lease on each running job.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

``lease_owner`` names the server or worker process running the job (or that ran it last) and
``lease_until`` when its lease ends unless renewed; ``lease_expiries`` counts the leases that ran out
(a job whose holders keep dying fails for good after a few); ``progress`` is the holder's last progress
report, so that every server can show it. Jobs already stored get no lease and no expiries.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

TABLE = "gpuplan_jobs"


def upgrade() -> None:
    """Add the four columns and an index on the lease times (the expiry scan)."""
    op.add_column(TABLE, sa.Column("lease_owner", sa.String(100), nullable=True))
    op.add_column(TABLE, sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))
    op.add_column(TABLE, sa.Column("lease_expiries", sa.Integer, nullable=False, server_default="0"))
    op.add_column(TABLE, sa.Column("progress", sa.Text, nullable=True))
    op.create_index("ix_gpuplan_jobs_lease", TABLE, ["lease_until"])


def downgrade() -> None:
    """Drop them (SQLite rebuilds the table)."""
    op.drop_index("ix_gpuplan_jobs_lease", TABLE)
    with op.batch_alter_table(TABLE) as batch:
        for name in ("progress", "lease_expiries", "lease_until", "lease_owner"):
            batch.drop_column(name)

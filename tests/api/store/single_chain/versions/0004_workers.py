"""The processes that run jobs and their heartbeats: ``gpuplan_workers``.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

One row per server with solver processes or ``gpuplan worker`` (its lease owner name), with its number
of solver processes, how many are up, and when it last said so; a row is removed when its process stops,
and a row not renewed within a lease is a dead process's.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

TABLE = "gpuplan_workers"


def upgrade() -> None:
    """Create the table (empty)."""
    op.create_table(
        TABLE,
        sa.Column("owner", sa.String(100), primary_key=True),
        sa.Column("processes", sa.Integer, nullable=False),
        sa.Column("ready", sa.Integer, nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    """Drop it."""
    op.drop_table(TABLE)

"""Keys that expire or are revoked: ``expires_at`` and ``revoked_at`` on the API keys.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Both are empty for the keys already stored: they never expire and are not revoked.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

TABLE = "gpuplan_api_keys"


def upgrade() -> None:
    """Add the two columns, null for every stored key."""
    op.add_column(TABLE, sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(TABLE, sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Drop them (SQLite rebuilds the table)."""
    with op.batch_alter_table(TABLE) as batch:
        batch.drop_column("revoked_at")
        batch.drop_column("expires_at")

"""Tasks remember the config being measured, so a crash or hang can be pinned on it.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add tasks.in_flight_config (JSON, vLLM keys) and tasks.in_flight_since (UTC)."""
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("in_flight_config", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("in_flight_since", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Drop the two columns, in place (SQLite 3.35 and later): batch mode would copy the table,
    and dropping the old copy cascades into the tasks' trials."""
    op.drop_column("tasks", "in_flight_since")
    op.drop_column("tasks", "in_flight_config")

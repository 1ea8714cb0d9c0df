"""Imports: configs of existing files kept as a labelled source per device and shape.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the imports table (db.models.ImportedFile)."""
    op.create_table(
        "imports",
        sa.Column("import_id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("N", sa.Integer(), nullable=False),
        sa.Column("K", sa.Integer(), nullable=False),
        sa.Column("block_n", sa.Integer(), nullable=False),
        sa.Column("block_k", sa.Integer(), nullable=False),
        sa.Column("label", sa.String(length=128), nullable=False),
        sa.Column("file_name", sa.String(length=512), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("configs", sa.JSON(), nullable=False),
        # Timezone-aware UTC (db.models.UTCDateTime); SQLite keeps it as naive UTC text.
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.device_id"], name=op.f("fk_imports_device_id_devices")
        ),
        sa.PrimaryKeyConstraint("import_id", name=op.f("pk_imports")),
        sa.UniqueConstraint(
            "device_id", "N", "K", "block_n", "block_k", "label", name=op.f("uq_imports_device_id")
        ),
    )


def downgrade() -> None:
    """Drop the imports table."""
    op.drop_table("imports")

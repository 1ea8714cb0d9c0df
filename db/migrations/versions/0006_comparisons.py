"""`tuner compare` results: one row per run, one per kernel at each (N, K, M).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create comparisons and comparison_points (db.models.Comparison, ComparisonPoint)."""
    op.create_table(
        "comparisons",
        sa.Column("comparison_id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("environment_id", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=64), nullable=False),
        sa.Column("tp", sa.Integer(), nullable=False),
        sa.Column("out_dtype", sa.String(length=16), nullable=False),
        sa.Column("verdicts", sa.JSON(), nullable=False),
        # Timezone-aware UTC (db.models.UTCDateTime); SQLite keeps it as naive UTC text.
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.device_id"], name=op.f("fk_comparisons_device_id_devices")
        ),
        sa.ForeignKeyConstraint(
            ["environment_id"],
            ["environments.environment_id"],
            name=op.f("fk_comparisons_environment_id_environments"),
        ),
        sa.PrimaryKeyConstraint("comparison_id", name=op.f("pk_comparisons")),
    )
    op.create_table(
        "comparison_points",
        sa.Column("point_id", sa.Integer(), nullable=False),
        sa.Column("comparison_id", sa.Integer(), nullable=False),
        sa.Column("N", sa.Integer(), nullable=False),
        sa.Column("K", sa.Integer(), nullable=False),
        sa.Column("M", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("latency_us", sa.Float(), nullable=True),
        sa.Column("p20_us", sa.Float(), nullable=True),
        sa.Column("p80_us", sa.Float(), nullable=True),
        sa.Column("note", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "status IN ('ok', 'failed', 'unavailable')", name=op.f("ck_comparison_points_status")
        ),
        sa.ForeignKeyConstraint(
            ["comparison_id"],
            ["comparisons.comparison_id"],
            name=op.f("fk_comparison_points_comparison_id_comparisons"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("point_id", name=op.f("pk_comparison_points")),
        sa.UniqueConstraint(
            "comparison_id",
            "N",
            "K",
            "M",
            "backend",
            name=op.f("uq_comparison_points_comparison_id"),
        ),
    )


def downgrade() -> None:
    """Drop the two tables."""
    op.drop_table("comparison_points")
    op.drop_table("comparisons")

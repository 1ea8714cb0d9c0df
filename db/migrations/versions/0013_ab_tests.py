"""A/B tests of two serving arms (`tuner ab`) and their client runs.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ab_tests and ab_runs (db.models.AbTest, AbRun)."""
    op.create_table(
        "ab_tests",
        sa.Column("ab_test_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=True),
        sa.Column("release_id", sa.Integer(), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("verdict", sa.String(length=16), nullable=True),
        # Timezone-aware UTC (db.models.UTCDateTime); SQLite keeps it as naive UTC text.
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.device_id"], name=op.f("fk_ab_tests_device_id_devices")
        ),
        sa.ForeignKeyConstraint(
            ["release_id"], ["releases.release_id"], name=op.f("fk_ab_tests_release_id_releases")
        ),
        sa.PrimaryKeyConstraint("ab_test_id", name=op.f("pk_ab_tests")),
        sa.UniqueConstraint("key", name=op.f("uq_ab_tests_key")),
    )
    op.create_table(
        "ab_runs",
        sa.Column("ab_run_id", sa.Integer(), nullable=False),
        sa.Column("ab_test_id", sa.Integer(), nullable=False),
        sa.Column("block", sa.Integer(), nullable=False),
        sa.Column("arm", sa.String(length=16), nullable=False),
        sa.Column("workload", sa.String(length=32), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("client_result", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["ab_test_id"],
            ["ab_tests.ab_test_id"],
            name=op.f("fk_ab_runs_ab_test_id_ab_tests"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("ab_run_id", name=op.f("pk_ab_runs")),
        sa.UniqueConstraint(
            "ab_test_id", "block", "arm", "workload", name=op.f("uq_ab_runs_ab_test_id")
        ),
    )


def downgrade() -> None:
    """Drop both tables (every A/B is lost), inside the run's transaction: SQLite's Python driver
    begins one only before a data change, so a change of no row comes first, and a refused
    downgrade of an older revision in the same run leaves the tables in place."""
    op.execute("UPDATE environments SET tuner = tuner WHERE 1 = 0")
    op.drop_table("ab_runs")
    op.drop_table("ab_tests")

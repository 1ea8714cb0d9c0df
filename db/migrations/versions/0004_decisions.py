"""Noise control and roofline: re-timed finalists, each task's decision, measured ceilings.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# db.models.CONFIG_COLUMNS as of this revision (a migration does not follow later models).
CONFIG_COLUMNS = (
    "BLOCK_SIZE_M",
    "BLOCK_SIZE_N",
    "BLOCK_SIZE_K",
    "GROUP_SIZE_M",
    "num_warps",
    "num_stages",
)


def _timestamp(name: str) -> sa.Column:
    # Timezone-aware UTC (db.models.UTCDateTime); SQLite keeps it as naive UTC text.
    return sa.Column(name, sa.DateTime(timezone=True), nullable=False)


def _task_and_environment(table: str) -> list[sa.schema.SchemaItem]:
    return [
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("environment_id", sa.Integer(), nullable=False),
        *(sa.Column(name, sa.Integer(), nullable=False) for name in CONFIG_COLUMNS),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.task_id"],
            name=op.f(f"fk_{table}_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["environment_id"],
            ["environments.environment_id"],
            name=op.f(f"fk_{table}_environment_id_environments"),
        ),
    ]


def upgrade() -> None:
    """Create retimes, decisions and ceilings (db.models.Retime, Decision, Ceiling)."""
    op.create_table(
        "retimes",
        sa.Column("retime_id", sa.Integer(), nullable=False),
        *_task_and_environment("retimes"),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("latency_us", sa.Float(), nullable=False),
        sa.Column("p20_us", sa.Float(), nullable=False),
        sa.Column("p80_us", sa.Float(), nullable=False),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("retime_id", name=op.f("pk_retimes")),
        sa.UniqueConstraint("task_id", *CONFIG_COLUMNS, name=op.f("uq_retimes_task_id")),
    )
    op.create_table(
        "decisions",
        sa.Column("decision_id", sa.Integer(), nullable=False),
        *_task_and_environment("decisions"),
        sa.Column("latency_us", sa.Float(), nullable=False),
        sa.Column("default_latency_us", sa.Float(), nullable=True),
        sa.Column("runner_up", sa.JSON(), nullable=True),
        sa.Column("spread_us", sa.Float(), nullable=False),
        sa.Column("kept", sa.String(length=16), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        _timestamp("created_at"),
        sa.CheckConstraint(
            "kept IN ('fastest', 'default', 'simpler')", name=op.f("ck_decisions_kept")
        ),
        sa.PrimaryKeyConstraint("decision_id", name=op.f("pk_decisions")),
        sa.UniqueConstraint("task_id", name=op.f("uq_decisions_task_id")),
    )
    op.create_table(
        "ceilings",
        sa.Column("ceiling_id", sa.Integer(), nullable=False),
        sa.Column("environment_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        _timestamp("created_at"),
        sa.ForeignKeyConstraint(
            ["environment_id"],
            ["environments.environment_id"],
            name=op.f("fk_ceilings_environment_id_environments"),
        ),
        sa.PrimaryKeyConstraint("ceiling_id", name=op.f("pk_ceilings")),
    )


def downgrade() -> None:
    """Drop the three tables."""
    op.drop_table("ceilings")
    op.drop_table("decisions")
    op.drop_table("retimes")

"""Initial schema: devices, environments, sweeps, tasks, trials.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CONFIG_COLUMNS = (
    "BLOCK_SIZE_M",
    "BLOCK_SIZE_N",
    "BLOCK_SIZE_K",
    "GROUP_SIZE_M",
    "num_warps",
    "num_stages",
)


def _timestamp(name: str, nullable: bool) -> sa.Column:
    # Timezone-aware UTC (db.models.UTCDateTime); SQLite keeps it as naive UTC text.
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    """Create the five tables of the store."""
    op.create_table(
        "devices",
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("device_name", sa.String(length=128), nullable=False),
        _timestamp("created_at", nullable=False),
        sa.PrimaryKeyConstraint("device_id", name=op.f("pk_devices")),
        sa.UniqueConstraint("device_name", name=op.f("uq_devices_device_name")),
    )
    op.create_table(
        "environments",
        sa.Column("environment_id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("gpu_name", sa.String(length=128), nullable=False),
        sa.Column("compute_capability", sa.String(length=16), nullable=False),
        sa.Column("driver", sa.String(length=64), nullable=False),
        sa.Column("cuda", sa.String(length=64), nullable=False),
        sa.Column("torch", sa.String(length=64), nullable=False),
        sa.Column("triton", sa.String(length=64), nullable=False),
        sa.Column("tuner", sa.String(length=64), nullable=False),
        sa.Column("kernel_hash", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_id"],
            ["devices.device_id"],
            name=op.f("fk_environments_device_id_devices"),
        ),
        sa.PrimaryKeyConstraint("environment_id", name=op.f("pk_environments")),
        sa.UniqueConstraint(
            "device_id",
            "gpu_name",
            "compute_capability",
            "driver",
            "cuda",
            "torch",
            "triton",
            "tuner",
            "kernel_hash",
            name=op.f("uq_environments_device_id"),
        ),
    )
    op.create_table(
        "sweeps",
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("sweep_key", sa.String(length=64), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("tp", sa.Integer(), nullable=False),
        sa.Column("strategy", sa.String(length=64), nullable=False),
        sa.Column("budget", sa.Integer(), nullable=False),
        sa.Column("space", sa.String(length=128), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("m_values", sa.JSON(), nullable=False),
        sa.Column("out_dtype", sa.String(length=16), nullable=False),
        sa.Column("block_n", sa.Integer(), nullable=False),
        sa.Column("block_k", sa.Integer(), nullable=False),
        _timestamp("created_at", nullable=False),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.device_id"], name=op.f("fk_sweeps_device_id_devices")
        ),
        sa.PrimaryKeyConstraint("sweep_id", name=op.f("pk_sweeps")),
        sa.UniqueConstraint("sweep_key", name=op.f("uq_sweeps_sweep_key")),
    )
    op.create_table(
        "tasks",
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("N", sa.Integer(), nullable=False),
        sa.Column("K", sa.Integer(), nullable=False),
        sa.Column("M", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("worker_id", sa.String(length=256), nullable=True),
        _timestamp("lease_expires_at", nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _timestamp("started_at", nullable=True),
        _timestamp("finished_at", nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "state IN ('pending', 'running', 'done', 'failed')", name=op.f("ck_tasks_state")
        ),
        sa.ForeignKeyConstraint(
            ["sweep_id"],
            ["sweeps.sweep_id"],
            name=op.f("fk_tasks_sweep_id_sweeps"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_tasks")),
        sa.UniqueConstraint("sweep_id", "N", "K", "M", name=op.f("uq_tasks_sweep_id")),
    )
    op.create_index(op.f("ix_tasks_state_lease_expires_at"), "tasks", ["state", "lease_expires_at"])
    op.create_table(
        "trials",
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("environment_id", sa.Integer(), nullable=False),
        *(sa.Column(name, sa.Integer(), nullable=False) for name in CONFIG_COLUMNS),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("latency_us", sa.Float(), nullable=True),
        sa.Column("p20_us", sa.Float(), nullable=True),
        sa.Column("p80_us", sa.Float(), nullable=True),
        sa.Column("rel_error", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("measure_s", sa.Float(), nullable=True),
        _timestamp("created_at", nullable=False),
        sa.ForeignKeyConstraint(
            ["environment_id"],
            ["environments.environment_id"],
            name=op.f("fk_trials_environment_id_environments"),
        ),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.task_id"],
            name=op.f("fk_trials_task_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("trial_id", name=op.f("pk_trials")),
        sa.UniqueConstraint("task_id", *CONFIG_COLUMNS, name=op.f("uq_trials_task_id")),
    )


def downgrade() -> None:
    """Drop every table of the store."""
    op.drop_table("trials")
    op.drop_index(op.f("ix_tasks_state_lease_expires_at"), table_name="tasks")
    op.drop_table("tasks")
    op.drop_table("sweeps")
    op.drop_table("environments")
    op.drop_table("devices")

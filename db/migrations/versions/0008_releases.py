"""Releases: a device's files frozen as published, numbered per device, their bytes stored once
per content (blobs, keyed by sha256).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create blobs, releases and release_files (db.models.Blob, Release, ReleaseFile)."""
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_blobs")),
    )
    op.create_table(
        "releases",
        sa.Column("release_id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("content_sha256", sa.String(length=64), nullable=False),
        sa.Column("archives", sa.JSON(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(length=256), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        # Timezone-aware UTC (db.models.UTCDateTime); SQLite keeps it as naive UTC text.
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.device_id"], name=op.f("fk_releases_device_id_devices")
        ),
        sa.PrimaryKeyConstraint("release_id", name=op.f("pk_releases")),
        sa.UniqueConstraint("device_id", "number", name=op.f("uq_releases_device_id")),
    )
    op.create_table(
        "release_files",
        sa.Column("release_file_id", sa.Integer(), nullable=False),
        sa.Column("release_id", sa.Integer(), nullable=False),
        sa.Column("file_name", sa.String(length=512), nullable=False),
        sa.Column("family", sa.String(length=32), nullable=False),
        sa.Column("shape_params", sa.String(length=128), nullable=False),
        sa.Column("N", sa.Integer(), nullable=False),
        sa.Column("K", sa.Integer(), nullable=False),
        sa.Column("block_n", sa.Integer(), nullable=False),
        sa.Column("block_k", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["release_id"],
            ["releases.release_id"],
            name=op.f("fk_release_files_release_id_releases"),
        ),
        sa.ForeignKeyConstraint(
            ["sha256"], ["blobs.sha256"], name=op.f("fk_release_files_sha256_blobs")
        ),
        sa.PrimaryKeyConstraint("release_file_id", name=op.f("pk_release_files")),
        sa.UniqueConstraint("release_id", "file_name", name=op.f("uq_release_files_release_id")),
    )


def downgrade() -> None:
    """Drop the three tables (every release is lost)."""
    op.drop_table("release_files")
    op.drop_table("releases")
    op.drop_table("blobs")

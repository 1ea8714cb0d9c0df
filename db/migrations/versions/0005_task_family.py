"""Tasks name their kernel family and the family's dimensions beyond N and K, so that a second
family's tasks live beside the dense GEMM's in one store.

A sweep tunes one family, so tasks stay unique per (sweep, N, K, M). Columns are only added
and dropped, in place: on SQLite, changing the unique key would copy the table, and dropping
the old copy would cascade into its trials.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add tasks.family ("dense" for every existing task) and tasks.shape_params ("")."""
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(
            sa.Column("family", sa.String(length=32), nullable=False, server_default="dense")
        )
        batch.add_column(
            sa.Column("shape_params", sa.String(length=128), nullable=False, server_default="")
        )


def downgrade() -> None:
    """Drop the two columns; refused while tasks of another family than "dense" exist (they
    would lose their family and be taken for dense GEMM tasks)."""
    others = (
        op.get_bind()
        .execute(
            sa.text("SELECT COUNT(*) FROM tasks WHERE family != 'dense' OR shape_params != ''")
        )
        .scalar()
    )
    if others:
        raise RuntimeError(
            f"{others} task(s) of another kernel family than dense: delete "
            "their sweeps before downgrading below revision 0005"
        )
    # ALTER TABLE ... DROP COLUMN in place (SQLite 3.35 and later), not batch mode's copy of
    # the table: dropping the old copy would cascade into the tasks' trials.
    op.drop_column("tasks", "shape_params")
    op.drop_column("tasks", "family")

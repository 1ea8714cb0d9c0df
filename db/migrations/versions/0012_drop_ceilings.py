"""Drop the ceilings table: workers no longer measure a GPU's copy bandwidth and FP8-mm
throughput, and the report and `tuner winners` show GB/s and TFLOP/s without a % of them.

A downgrade creates the table again, empty (as revision 0004 made it): the measurements are
gone.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Drop ceilings and its rows."""
    op.drop_table("ceilings")


def downgrade() -> None:
    """Create the empty ceilings table of revision 0004, inside the run's transaction: SQLite's
    Python driver begins one only before a data change, so a change of no row comes first, and
    a refused downgrade of an older revision in the same run leaves no table behind."""
    op.execute("UPDATE environments SET tuner = tuner WHERE 1 = 0")
    op.create_table(
        "ceilings",
        sa.Column("ceiling_id", sa.Integer(), nullable=False),
        sa.Column("environment_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["environment_id"],
            ["environments.environment_id"],
            name=op.f("fk_ceilings_environment_id_environments"),
        ),
        sa.PrimaryKeyConstraint("ceiling_id", name=op.f("pk_ceilings")),
    )

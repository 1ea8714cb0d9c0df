"""Imported files record the kernel family their name parses as, so that a file of another
family than the dense GEMM's is kept as that family's.

Every existing import is a dense GEMM file (imports parsed only those names). The column is
only added and dropped, in place, as in revision 0005.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add imports.family ("dense" for every existing import)."""
    with op.batch_alter_table("imports") as batch:
        batch.add_column(
            sa.Column("family", sa.String(length=32), nullable=False, server_default="dense")
        )


def downgrade() -> None:
    """Drop the column; refused while imports of another family than "dense" exist (they
    would be taken for dense GEMM files)."""
    others = (
        op.get_bind()
        .execute(sa.text("SELECT COUNT(*) FROM imports WHERE family != 'dense'"))
        .scalar()
    )
    if others:
        raise RuntimeError(
            f"{others} import(s) of another kernel family than dense: delete "
            "them before downgrading below revision 0010"
        )
    op.drop_column("imports", "family")

"""Imports keep the verdict of the launch check `tuner import` runs: the architecture the entries
were compiled for, and the M whose entries cannot launch there (with the reason), so that every
merge, export and report leaves those entries out without compiling anything.

Columns are only added, in place. Imports stored before this revision are "not checked".

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add imports.checked_arch (NULL: not checked) and imports.cannot_launch ({})."""
    with op.batch_alter_table("imports") as batch:
        batch.add_column(sa.Column("checked_arch", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("cannot_launch", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    """Drop the two columns (the entries they left out are used again by merges).

    Only the columns still there: on SQLite a downgrade through this revision that a later step
    refuses (0005 refuses while other families' tasks exist) was seen to keep these columns
    dropped while the store stays stamped 0006, so the next try comes here again.
    """
    present = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("imports")}
    for name in ("cannot_launch", "checked_arch"):
        if name in present:
            op.drop_column("imports", name)

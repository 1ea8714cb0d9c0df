"""Imported files record their family's dimensions beyond N and K (`shape_params`, as tasks
store them: "E=8" for a fused-MoE file), and the family and those dimensions join the unique
key, so that files of two families, or of two E, with one (N, K, block_shape) and label are
two imports, not one.

Every existing import has no such dimensions (imports refused them until now): they get "".
The unique key changes, which on SQLite copies the table (batch mode); no table refers to
imports, so the copy cascades into nothing.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_KEY = ["device_id", "N", "K", "block_n", "block_k", "label"]
NEW_KEY = ["device_id", "family", "shape_params", "N", "K", "block_n", "block_k", "label"]
# Quoted: PostgreSQL folds an unquoted N or K to lower case, which names no column.
QUOTED_OLD_KEY = ", ".join(f'"{column}"' for column in OLD_KEY)


def _begin() -> None:
    """Begin the transaction with a change of no row: SQLite's Python driver begins one only
    before a data change, so batch mode's CREATE TABLE of the copy would run outside of it, and
    a later failure (a refused downgrade of an older revision in the same run) would leave that
    copy, `_alembic_tmp_imports`, behind and break the next try."""
    op.execute("UPDATE imports SET label = label WHERE 1 = 0")


def _imports_at_0010() -> sa.Table:
    """The imports table as revisions 0003, 0007 and 0010 made it: what batch mode copies when
    it writes SQL without a store to reflect (`alembic upgrade --sql`)."""
    return sa.Table(
        "imports",
        sa.MetaData(),
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
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("checked_arch", sa.Integer(), nullable=True),
        sa.Column("cannot_launch", sa.JSON(), nullable=False, server_default="{}"),
        sa.Column("family", sa.String(length=32), nullable=False, server_default="dense"),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.device_id"], name="fk_imports_device_id_devices"
        ),
        sa.PrimaryKeyConstraint("import_id", name="pk_imports"),
        sa.UniqueConstraint(*OLD_KEY, name="uq_imports_device_id"),
    )


def upgrade() -> None:
    """Add imports.shape_params ("" for every existing import) and widen the unique key."""
    _begin()
    copy_from = _imports_at_0010() if context.is_offline_mode() else None
    with op.batch_alter_table("imports", copy_from=copy_from) as batch:
        batch.add_column(
            sa.Column("shape_params", sa.String(length=128), nullable=False, server_default="")
        )
        batch.drop_constraint("uq_imports_device_id", type_="unique")
        batch.create_unique_constraint("uq_imports_device_id", NEW_KEY)


def downgrade() -> None:
    """Drop the column and narrow the key back; refused while imports with shape params exist
    (they would lose them) or two imports share the old key (it could not hold them)."""
    bind = op.get_bind()
    with_params = bind.execute(
        sa.text("SELECT COUNT(*) FROM imports WHERE shape_params != ''")
    ).scalar()
    shared = bind.execute(
        sa.text(
            "SELECT COUNT(*) FROM (SELECT 1 FROM imports GROUP BY "
            f"{QUOTED_OLD_KEY} HAVING COUNT(*) > 1) AS shared"
        )
    ).scalar()
    if with_params or shared:
        raise RuntimeError(
            f"{with_params} import(s) with shape params and {shared} key(s) shared by "
            "imports of several families: delete them before downgrading below revision 0011"
        )
    _begin()
    with op.batch_alter_table("imports") as batch:
        batch.drop_constraint("uq_imports_device_id", type_="unique")
        batch.create_unique_constraint("uq_imports_device_id", OLD_KEY)
        batch.drop_column("shape_params")

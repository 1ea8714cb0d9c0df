"""Environments record where the timed kernel came from: "builtin" (the tuner's own copy) or
"vllm" (the installed vLLM's), and that vLLM's version ("" for the builtin).

The unique key stays (device, versions, kernel_hash): a vLLM kernel's text differs from the
builtin's (its name is part of the hashed text), so the key already keeps sources apart. Columns
are only added and dropped, in place, as in revision 0005 (a batch copy of the table would
cascade into the trials).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add environments.kernel_source ("builtin" for every existing one) and .vllm ("")."""
    with op.batch_alter_table("environments") as batch:
        batch.add_column(
            sa.Column(
                "kernel_source", sa.String(length=16), nullable=False, server_default="builtin"
            )
        )
        batch.add_column(sa.Column("vllm", sa.String(length=64), nullable=False, server_default=""))


def downgrade() -> None:
    """Drop the two columns; refused while environments of vLLM's kernel exist (their trials
    would pass for the builtin kernel's)."""
    others = (
        op.get_bind()
        .execute(sa.text("SELECT COUNT(*) FROM environments WHERE kernel_source != 'builtin'"))
        .scalar()
    )
    if others:
        raise RuntimeError(
            f"{others} environment(s) of vLLM's kernel: delete their sweeps "
            "before downgrading below revision 0009"
        )
    op.drop_column("environments", "vllm")
    op.drop_column("environments", "kernel_source")

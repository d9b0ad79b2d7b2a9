"""The inbox: messages queued for a running session (a persistent child told something while it
works), read before its next model call.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the inbox table."""
    op.create_table(
        "inbox",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_inbox")),
    )
    op.create_index(op.f("ix_inbox_session_id_id"), "inbox", ["session_id", "id"], unique=False)


def downgrade() -> None:
    """Drop the inbox table."""
    op.drop_index(op.f("ix_inbox_session_id_id"), table_name="inbox")
    op.drop_table("inbox")

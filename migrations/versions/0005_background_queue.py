"""The background queue: background child sessions waiting for a slot of the concurrency cap,
FIFO across every process on the database.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
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
    """Create the background_queue table."""
    op.create_table(
        "background_queue",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("stream_id", sa.String(), nullable=False),
        sa.Column("parent_session_id", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("timeout_ms", sa.BigInteger(), nullable=True),
        sa.Column("enqueued_at", sa.BigInteger(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_background_queue")),
        sa.UniqueConstraint("session_id", name=op.f("uq_background_queue_session_id")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        op.f("ix_background_queue_state_seq"), "background_queue", ["state", "seq"], unique=False
    )
    op.create_index(
        op.f("ix_background_queue_stream_id"), "background_queue", ["stream_id"], unique=False
    )


def downgrade() -> None:
    """Drop the background_queue table."""
    op.drop_index(op.f("ix_background_queue_stream_id"), table_name="background_queue")
    op.drop_index(op.f("ix_background_queue_state_seq"), table_name="background_queue")
    op.drop_table("background_queue")

"""Indexes for the UI's reads: sessions newest first (`GET /sessions`) and a stream's sessions
(the whole tree in `/status`).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Index sessions by creation and by stream."""
    op.create_index(
        op.f("ix_sessions_created_at_session_id"),
        "sessions",
        ["created_at", "session_id"],
        unique=False,
    )
    op.create_index(op.f("ix_sessions_stream_id"), "sessions", ["stream_id"], unique=False)


def downgrade() -> None:
    """Drop the listing indexes."""
    op.drop_index(op.f("ix_sessions_stream_id"), table_name="sessions")
    op.drop_index(op.f("ix_sessions_created_at_session_id"), table_name="sessions")

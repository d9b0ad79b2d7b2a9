"""Initial schema: sessions, messages, sub-session refs, streams, chunks, interrupt flags.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    """Create every table of the store."""
    op.create_table(
        "sessions",
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("agent_type", sa.String(), nullable=False),
        sa.Column("stream_id", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("parent_session_id", sa.String(), nullable=True),
        sa.Column("step_count", sa.Integer(), nullable=False),
        sa.Column("state", _json(), nullable=False),
        sa.Column("input", _json(), nullable=True),
        sa.Column("output", _json(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("failure_reason", sa.String(), nullable=True),
        sa.Column("idempotency_key", sa.String(), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("owner_id", sa.String(), nullable=True),
        sa.Column("lease_expires_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_sessions")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_sessions_idempotency_key")),
    )
    op.create_index(
        op.f("ix_sessions_status_lease_expires_at"),
        "sessions",
        ["status", "lease_expires_at"],
        unique=False,
    )
    op.create_table(
        "messages",
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "idx", name=op.f("pk_messages")),
    )
    op.create_table(
        "sub_session_refs",
        sa.Column("parent_session_id", sa.String(), nullable=False),
        sa.Column("sub_session_id", sa.String(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("agent_type", sa.String(), nullable=False),
        sa.Column("parent_tool_call_id", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("completed_at", sa.BigInteger(), nullable=True),
        sa.Column("mode", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=True),
        sa.Column("remote_stream_id", sa.String(), nullable=True),
        sa.Column("remote_last_sequence", sa.BigInteger(), nullable=True),
        sa.Column("completion_delivered", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint(
            "parent_session_id", "sub_session_id", name=op.f("pk_sub_session_refs")
        ),
    )
    op.create_index(
        op.f("ix_sub_session_refs_parent_session_id_position"),
        "sub_session_refs",
        ["parent_session_id", "position"],
        unique=False,
    )
    op.create_table(
        "streams",
        sa.Column("stream_id", sa.String(), nullable=False),
        sa.Column("last_sequence", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("stopped_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("stream_id", name=op.f("pk_streams")),
    )
    op.create_index(op.f("ix_streams_stopped_at"), "streams", ["stopped_at"], unique=False)
    op.create_table(
        "chunks",
        sa.Column("stream_id", sa.String(), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("stream_id", "sequence", name=op.f("pk_chunks")),
    )
    op.create_table(
        "interrupt_flags",
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("requested_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_interrupt_flags")),
    )


def downgrade() -> None:
    """Drop every table of the store."""
    op.drop_table("interrupt_flags")
    op.drop_table("chunks")
    op.drop_index(op.f("ix_streams_stopped_at"), table_name="streams")
    op.drop_table("streams")
    op.drop_index(
        op.f("ix_sub_session_refs_parent_session_id_position"), table_name="sub_session_refs"
    )
    op.drop_table("sub_session_refs")
    op.drop_table("messages")
    op.drop_index(op.f("ix_sessions_status_lease_expires_at"), table_name="sessions")
    op.drop_table("sessions")

"""Sessions keep the fingerprint of the request that created them, beside its idempotency key.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add `sessions.request_fingerprint` (null for sessions created before it)."""
    op.add_column("sessions", sa.Column("request_fingerprint", sa.String(), nullable=True))


def downgrade() -> None:
    """Drop `sessions.request_fingerprint`."""
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("request_fingerprint")

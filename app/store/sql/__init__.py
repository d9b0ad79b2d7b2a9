"""The SQL stores: one SQLAlchemy schema and Alembic history for SQLite and PostgreSQL."""

from app.store.sql.store import SqlStore

__all__ = ["SqlStore"]

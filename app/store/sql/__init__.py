"""The SQL stores (SQLite and PostgreSQL over SQLAlchemy async): being built, see issue 3."""

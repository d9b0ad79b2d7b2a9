"""Alembic environment of the SQL state store: async engines, one history for both backends.

Run by the store itself (`app.store.sql.migrate`, which hands over its connection) or by hand:
`DATABASE_URL=... .venv/bin/alembic upgrade head` from the repository's root.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from app.store.sql.engines import ensure_sqlite_folder, parse_url
from app.store.sql.migrate import run_off_loop
from app.store.sql.tables import metadata

config = context.config


def configure_and_run(connection: Connection) -> None:
    """Run the pending migrations on `connection`, inside its transaction."""
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def database_url() -> str:
    """The database to migrate: DATABASE_URL, or `sqlalchemy.url` when set programmatically."""
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit(
            "Set DATABASE_URL to the database to migrate, e.g. "
            "DATABASE_URL=sqlite+aiosqlite:///data/agent-server.db .venv/bin/alembic upgrade head"
        )
    return url


def run_online(url: str) -> None:
    """Open the database with the store's own engine settings and migrate it."""
    parsed, backend = parse_url(url)
    if backend == "sqlite":
        ensure_sqlite_folder(parsed)
    run_off_loop(parsed, backend, configure_and_run)


def main() -> None:
    """Alembic's entry point for this environment."""
    connection = config.attributes.get("connection")
    if connection is not None:
        configure_and_run(connection)
        return
    if config.config_file_name is not None:
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    url = database_url()
    if context.is_offline_mode():
        context.configure(
            url=url, target_metadata=metadata, literal_binds=True, render_as_batch=True
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    run_online(url)


main()

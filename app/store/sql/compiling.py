"""Compiling SQLAlchemy Core to one backend's driver SQL, shared by every statement module."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ARRAY,
    Select,
    String,
    Table,
    TextClause,
    any_,
    bindparam,
    func,
    literal_column,
    select,
    text,
)
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.sql.elements import ClauseElement, ColumnElement

from app.store.sql.driver import DriverSql
from app.store.sql.engines import Backend

_DIALECT_URLS: dict[Backend, str] = {
    "sqlite": "sqlite+aiosqlite:///store.db",
    "postgresql": "postgresql+asyncpg://localhost/store",
}


def dialect_for(backend: Backend) -> Dialect:
    """The SQLAlchemy dialect of `backend`'s driver (no engine, no connection)."""
    return make_url(_DIALECT_URLS[backend]).get_dialect()()


def among_ids(backend: Backend, column: Any, name: str) -> ColumnElement[bool]:
    """`column` is one of the id list bound as `name` (what `Queries.ids` gives): `= ANY(array)`
    on PostgreSQL, `IN (SELECT value FROM json_each(...))` on SQLite, one fixed statement
    whatever the list's length."""
    if backend == "postgresql":
        return column == any_(bindparam(name, type_=ARRAY(String)))  # type: ignore[no-any-return]
    each = func.json_each(bindparam(name))
    listed: Select[tuple[Any]] = select(literal_column("value")).select_from(each)
    return column.in_(listed)  # type: ignore[no-any-return]


def compile_for(statement: ClauseElement, dialect: Dialect) -> DriverSql:
    """`statement` as the driver's SQL; constants must be literal SQL, not bound values."""
    compiled = statement.compile(dialect=dialect)
    constants = [name for name, value in compiled.params.items() if value is not None]
    if constants:
        raise ValueError(f"Write constants as literal SQL, not parameters: {constants}")
    return DriverSql(compiled.string, getattr(compiled, "positiontup", None) or ())


def upsert(table: Table, key: tuple[str, ...], **values: str) -> TextClause:
    """`INSERT ... ON CONFLICT (key) DO UPDATE` of every column but the key and `values`.

    Columns take the bind parameter of their name unless `values` gives them a SQL expression.
    Text, because the syntax is the same on both backends and SQLAlchemy's dialect-specific
    `on_conflict_do_update` cannot be cached.
    """
    names = [column.name for column in table.columns]
    inserted = ", ".join(values.get(name, f":{name}") for name in names)
    updated = ", ".join(
        f"{name} = excluded.{name}" for name in names if name not in key and name not in values
    )
    return text(
        f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({inserted}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updated}"
    )

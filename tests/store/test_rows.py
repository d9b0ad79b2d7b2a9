"""Records to rows: what the SQL store writes for a record, whatever way the record was made."""

from __future__ import annotations

from app.store import SessionRecord
from app.store.sql.rows import (
    JSON_COLUMNS,
    SESSION_COLUMNS,
    json_text,
    session_row,
    session_update_row,
)


def _records() -> list[SessionRecord]:
    by_keyword = SessionRecord(
        lease_expires_at=9,
        owner_id="me",
        output={"done": True},
        input=["a", 1],
        state={"k": "v"},
        status="completed",
        created_at=1,
        updated_at=2,
        stream_id="root",
        agent_type="agent",
        session_id="child",
        parent_session_id="root",
    )
    by_position = SessionRecord("root", "agent", "root", "running", 1, 1)
    evolved = by_position.evolve(output="out", status="failed", error="boom", step_count=3)
    return [by_keyword, by_position, evolved]


def test_a_session_row_lists_the_columns_in_order_with_json_as_text() -> None:
    for record in _records():
        row = session_row(record)
        assert tuple(row) == SESSION_COLUMNS
        for name in SESSION_COLUMNS:
            value = getattr(record, name)
            assert row[name] == (json_text(value) if name in JSON_COLUMNS else value)
    row = session_row(_records()[0])
    assert (row["state"], row["input"], row["output"]) == ('{"k":"v"}', '["a",1]', '{"done":true}')
    assert session_row(_records()[1])["output"] == "null"


def test_a_session_row_leaves_the_record_as_it_was() -> None:
    record = _records()[0]
    session_row(record)
    assert record.state == {"k": "v"}
    assert record.input == ["a", 1]


def test_an_update_row_adds_the_key_it_updates_by() -> None:
    record = _records()[2]
    row = session_update_row(record)
    assert tuple(row) == (*SESSION_COLUMNS, "b_session_id")
    assert row["b_session_id"] == "root"

"""What a background subagent's end looks like to the parent's model: lifecycle moves, the
summary envelope, the result payload (exactly the seed's fields), the notice and the table."""

from __future__ import annotations

import re
from typing import get_args

import pytest

from app.agents.results import (
    INLINE_LIMIT,
    TERMINAL,
    TRANSITIONS,
    WAKE_STATES,
    Envelope,
    Lifecycle,
    StatusRow,
    Update,
    artifact_id,
    can_move,
    check_move,
    notice_text,
    parse_envelope,
    record_path,
    result_payload,
    status_payload,
    status_table,
)

STATES: tuple[Lifecycle, ...] = get_args(Lifecycle)
SEED_FIELDS = [
    "status",
    "session_id",
    "category",
    "lifecycle_status",
    "read_method",
    "artifact_id",
    "record_path",
    "inline_content",
    "error",
]


def envelope(summary: str, full: str) -> str:
    return (
        f"<subagent_background_result>\n<summary>{summary}</summary>\n"
        f"<full_result>{full}</full_result>\n</subagent_background_result>"
    )


def test_lifecycle_moves() -> None:
    assert STATES == ("queued", "running", "succeeded", "failed", "timed_out", "cancelled")
    legal = {(a, b) for a in STATES for b in STATES if can_move(a, b)}
    assert legal == {
        ("queued", "running"),
        ("queued", "failed"),
        ("queued", "cancelled"),
        ("running", "succeeded"),
        ("running", "failed"),
        ("running", "timed_out"),
        ("running", "cancelled"),
    }
    assert {state for state in STATES if not TRANSITIONS[state]} == TERMINAL
    assert sorted(WAKE_STATES) == ["failed", "succeeded", "timed_out"]
    check_move("queued", "running")
    with pytest.raises(ValueError, match="cannot go from succeeded to running"):
        check_move("succeeded", "running")
    with pytest.raises(ValueError, match="cannot go from queued to timed_out"):
        check_move("queued", "timed_out")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (envelope("Short.", "Long text."), Envelope("Short.", "Long text.")),
        (
            "Here you go:\n<subagent_background_result><summary>\n  S \n</summary>"
            "<full_result>\nF\n</full_result></subagent_background_result>\nThanks.",
            Envelope("S", "F"),
        ),
        (
            "<SUBAGENT_BACKGROUND_RESULT >\n<Summary>S</Summary >\n<full_result>F</full_result>"
            "</subagent_background_result>",
            Envelope("S", "F"),
        ),
        (
            "<subagent_background_result><full_result>F</full_result><summary>S</summary>"
            "</subagent_background_result>",
            Envelope("S", "F"),
        ),
        (
            envelope("S", "quoting </full_result> inside"),
            Envelope("S", "quoting </full_result> inside"),
        ),
        (envelope("old", "first") + envelope("new", "second"), Envelope("new", "second")),
        (envelope("", "F"), Envelope("", "F")),
        (envelope("S", "line 1\n\nline 2"), Envelope("S", "line 1\n\nline 2")),
    ],
)
def test_parse_envelope(text: str, expected: Envelope) -> None:
    assert parse_envelope(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Just an answer.",
        "<subagent_background_result><summary>S</summary><full_result>F</full_result>",
        "<subagent_background_result><summary>S</summary></subagent_background_result>",
        "<subagent_background_result><full_result>F</full_result></subagent_background_result>",
        "<subagent_background_result><summary>S<full_result>F</full_result>"
        "</subagent_background_result>",
        "<summary>S</summary><full_result>F</full_result>",
    ],
)
def test_parse_envelope_finds_none(text: str) -> None:
    assert parse_envelope(text) is None


def test_artifact_ids_and_record_paths() -> None:
    first = artifact_id("root-sub-1")
    assert re.fullmatch(r"subagent_[0-9a-f]{24}", first)
    assert artifact_id("root-sub-1") == first
    assert artifact_id("root-sub-2") != first
    assert record_path("root-sub-1") == "/status/root-sub-1"


def test_a_full_read_of_a_success() -> None:
    payload = result_payload(
        session_id="s-1", category="researcher", lifecycle="succeeded", output="The answer."
    )
    assert payload == {
        "status": "success",
        "session_id": "s-1",
        "category": "researcher",
        "lifecycle_status": "succeeded",
        "read_method": "full",
        "artifact_id": artifact_id("s-1"),
        "record_path": "/status/s-1",
        "inline_content": "The answer.",
        "error": None,
    }
    assert list(payload) == SEED_FIELDS


def test_a_full_read_gives_the_envelopes_full_result() -> None:
    payload = result_payload(
        session_id="s", category="c", lifecycle="succeeded", output=envelope("S", "Full.")
    )
    assert payload["inline_content"] == "Full."


def test_inline_content_holds_at_most_8192_bytes() -> None:
    def inline(text: str) -> object:
        payload = result_payload(session_id="s", category="c", lifecycle="succeeded", output=text)
        assert payload["status"] == "success"
        assert payload["artifact_id"] is not None
        return payload["inline_content"]

    assert INLINE_LIMIT == 8192
    assert inline("a" * 8192) == "a" * 8192
    assert inline("a" * 8193) is None
    assert inline("é" * 4096) == "é" * 4096  # 8192 bytes, 4096 characters
    assert inline("é" * 4096 + "a") is None
    assert inline(envelope("S", "b" * 8193)) is None


def test_a_summary_read() -> None:
    payload = result_payload(
        session_id="s",
        category="c",
        lifecycle="succeeded",
        read_method="summary",
        output=envelope("Short.", "x" * 10_000),
    )
    assert (payload["status"], payload["read_method"], payload["inline_content"]) == (
        "success",
        "summary",
        "Short.",
    )
    assert list(payload) == SEED_FIELDS


@pytest.mark.parametrize("output", ["No envelope here.", envelope("  ", "Full.")])
def test_a_summary_read_without_a_summary_is_an_error(output: str) -> None:
    payload = result_payload(
        session_id="s", category="c", lifecycle="succeeded", read_method="summary", output=output
    )
    assert payload == {
        "status": "error",
        "session_id": "s",
        "category": "c",
        "lifecycle_status": "succeeded",
        "read_method": "summary",
        "artifact_id": artifact_id("s"),
        "record_path": "/status/s",
        "inline_content": None,
        "error": "No cached summary: the subagent's output has no summary envelope. "
        'Call subagent_result(session_id="s") for the full result',
    }


@pytest.mark.parametrize(
    ("lifecycle", "error", "expected"),
    [
        ("failed", "boom", "boom"),
        ("failed", None, "The subagent failed"),
        ("timed_out", None, "The subagent timed out"),
        ("cancelled", None, "The subagent was cancelled"),
        (
            "running",
            None,
            "Session s is still running: call subagent_wait, or subagent_result with a "
            "timeout, to wait for it",
        ),
        ("succeeded", None, "The subagent succeeded but its output is missing"),
    ],
)
def test_payloads_of_sessions_without_an_output(
    lifecycle: Lifecycle, error: str | None, expected: str
) -> None:
    payload = result_payload(session_id="s", category="c", lifecycle=lifecycle, error=error)
    assert list(payload) == SEED_FIELDS
    assert payload["status"] == "error"
    assert payload["lifecycle_status"] == lifecycle
    assert (payload["artifact_id"], payload["record_path"], payload["inline_content"]) == (
        None,
        None,
        None,
    )
    assert payload["error"] == expected


def test_queue_position_only_while_queued() -> None:
    payload = result_payload(session_id="s", category="c", lifecycle="queued", queue_position=0)
    assert list(payload) == [*SEED_FIELDS, "queue_position"]
    assert payload["queue_position"] == 0
    assert payload["status"] == "error"
    assert payload["error"] == (
        "Session s is still queued: call subagent_wait, or subagent_result with a timeout, "
        "to wait for it"
    )
    with pytest.raises(ValueError, match="queue_position is given exactly when"):
        result_payload(session_id="s", category="c", lifecycle="queued")
    with pytest.raises(ValueError, match="queue_position is given exactly when"):
        result_payload(session_id="s", category="c", lifecycle="running", queue_position=1)


def test_excluded_fields_never_appear() -> None:
    for lifecycle in STATES:
        position = 3 if lifecycle == "queued" else None
        payload = result_payload(
            session_id="s", category="c", lifecycle=lifecycle, output="x", queue_position=position
        )
        excluded = {"created_at", "updated_at", "started_at", "finished_at", "result_excerpt"}
        assert not excluded & set(payload)
        assert set(payload) - set(SEED_FIELDS) <= {"queue_position"}


def test_status_payloads() -> None:
    assert status_payload(session_id="s", category="c", lifecycle="queued", queue_position=2) == {
        "session_id": "s",
        "category": "c",
        "lifecycle_status": "queued",
        "queue_position": 2,
    }
    assert status_payload(session_id="s", category="c", lifecycle="running") == {
        "session_id": "s",
        "category": "c",
        "lifecycle_status": "running",
    }
    failed = status_payload(session_id="s", category="c", lifecycle="failed", error="boom")
    assert failed["error"] == "boom"
    timed_out = status_payload(session_id="s", category="c", lifecycle="timed_out")
    assert timed_out["error"] == "The subagent timed out"
    with pytest.raises(ValueError, match="queue_position"):
        status_payload(session_id="s", category="c", lifecycle="queued")


def test_notice_text_is_one_message_in_the_seeds_wording() -> None:
    text = notice_text(
        [
            Update("session-abc", "succeeded"),
            Update("s-2", "cancelled"),
            Update("s-3", "failed", error="Model error:\n  rate   limited"),
            Update("s-4", "timed_out"),
            Update("s-5", "succeeded", has_summary=False),
            Update("s-6", "running"),
            Update("s-7", "failed"),
        ]
    )
    assert text == (
        "Background subagent updates:\n"
        '- session-abc succeeded. Call subagent_result(session_id="session-abc") for the full '
        'result or subagent_result(session_id="session-abc", read_method="summary") for the '
        "cached summary.\n"
        '- s-3 failed: Model error: rate limited. Call subagent_result(session_id="s-3") for '
        "details.\n"
        '- s-4 timed out. Call subagent_result(session_id="s-4") for details.\n'
        '- s-5 succeeded. Call subagent_result(session_id="s-5") for the full result.\n'
        '- s-7 failed. Call subagent_result(session_id="s-7") for details.'
    )


def test_notice_text_shortens_a_long_error_and_has_nothing_to_say_of_cancels() -> None:
    text = notice_text([Update("s", "failed", error="x" * 1000)])
    assert text is not None
    assert len(text.splitlines()[1]) < 400
    assert "…" in text
    assert notice_text([Update("s", "cancelled")]) is None
    assert notice_text([]) is None


def test_status_table() -> None:
    assert status_table([]) == "No background subagent sessions."
    table = status_table(
        [
            StatusRow("s-1", "researcher", "queued", queue_position=0),
            StatusRow("s-2", "odd|name", "running"),
            StatusRow("s-3", "writer", "succeeded", queue_position=4),
        ]
    )
    assert table == (
        "| session_id | category | lifecycle_status | queue_position |\n"
        "| --- | --- | --- | --- |\n"
        "| s-1 | researcher | queued | 0 |\n"
        "| s-2 | odd\\|name | running | - |\n"
        "| s-3 | writer | succeeded | - |"
    )

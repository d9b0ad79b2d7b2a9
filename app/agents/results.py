"""What a delegated subagent's end looks like to the parent's model, as pure functions: the
lifecycle and its legal moves, the summary envelope, the `subagent_result` payload (exactly the
seed's fields), the batched notice of ended background sessions and the status table.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from pydantic import JsonValue

Lifecycle: TypeAlias = Literal["queued", "running", "succeeded", "failed", "timed_out", "cancelled"]
"""Where a background subagent session is: waiting for a slot, running, or ended one way."""
ReadMethod: TypeAlias = Literal["full", "summary"]
"""How `subagent_result` reads an output: all of it, or the summary the subagent gave."""

TERMINAL: frozenset[Lifecycle] = frozenset({"succeeded", "failed", "timed_out", "cancelled"})
"""The states a session never leaves."""
WAKE_STATES: frozenset[Lifecycle] = frozenset({"succeeded", "failed", "timed_out"})
"""The ends the parent hears of in a notice; a cancel is the parent's own doing."""
TRANSITIONS: dict[Lifecycle, frozenset[Lifecycle]] = {
    # A queued session can fail without running (its child cannot be built, its tree stops);
    # its timeout bounds the run, not the wait for a slot, so it cannot time out.
    "queued": frozenset({"running", "failed", "cancelled"}),
    "running": frozenset({"succeeded", "failed", "timed_out", "cancelled"}),
    "succeeded": frozenset(),
    "failed": frozenset(),
    "timed_out": frozenset(),
    "cancelled": frozenset(),
}
"""The legal moves between lifecycle states."""

INLINE_LIMIT = 8192
"""The most UTF-8 bytes of full output a payload carries inline."""

ENVELOPE_INSTRUCTIONS = (
    "When your answer is long, give a short summary with it, in exactly this form:\n"
    "<subagent_background_result>\n<summary>two or three sentences</summary>\n"
    "<full_result>the complete answer</full_result>\n</subagent_background_result>"
)
"""Prompt text asking a subagent for the summary envelope."""


def can_move(current: Lifecycle, new: Lifecycle) -> bool:
    """Whether a session may go from `current` to `new`."""
    return new in TRANSITIONS[current]


def check_move(current: Lifecycle, new: Lifecycle) -> None:
    """Raise `ValueError` unless a session may go from `current` to `new` (a runtime bug)."""
    if not can_move(current, new):
        raise ValueError(f"A subagent session cannot go from {current} to {new}")


@dataclass(frozen=True, slots=True)
class Envelope:
    """A subagent's final text split into its summary and its full result."""

    summary: str
    full_result: str


_OUTER = re.compile(
    r"<subagent_background_result\s*>(.*?)</subagent_background_result\s*>", re.S | re.I
)
_SUMMARY = re.compile(r"<summary\s*>(.*?)</summary\s*>", re.S | re.I)
# Greedy: a full result may quote a closing tag; the envelope's own is the last one.
_FULL = re.compile(r"<full_result\s*>(.*)</full_result\s*>", re.S | re.I)


def parse_envelope(text: str) -> Envelope | None:
    """The envelope in `text` (its last one, stripped), or None when there is none or it lacks
    its summary or its full result."""
    blocks = _OUTER.findall(text)
    if not blocks:
        return None
    block = blocks[-1]
    summary, full = _SUMMARY.search(block), _FULL.search(block)
    if summary is None or full is None:
        return None
    return Envelope(summary.group(1).strip(), full.group(1).strip())


def artifact_id(session_id: str) -> str:
    """The durable id of a session's output: `subagent_` and 24 hex digits, from the id."""
    return "subagent_" + hashlib.sha256(session_id.encode()).hexdigest()[:24]


def record_path(session_id: str) -> str:
    """Where the full output can be read over HTTP."""
    return f"/status/{session_id}"


def _fits_inline(text: str) -> bool:
    return len(text.encode("utf-8")) <= INLINE_LIMIT


def _default_error(lifecycle: Lifecycle, session_id: str) -> str | None:
    if lifecycle in ("queued", "running"):
        return (
            f"Session {session_id} is still {lifecycle}: call subagent_wait, or "
            "subagent_result with a timeout, to wait for it"
        )
    if lifecycle == "failed":
        return "The subagent failed"
    if lifecycle == "timed_out":
        return "The subagent timed out"
    if lifecycle == "cancelled":
        return "The subagent was cancelled"
    return None


def result_payload(
    *,
    session_id: str,
    category: str,
    lifecycle: Lifecycle,
    read_method: ReadMethod = "full",
    output: str | None = None,
    error: str | None = None,
    queue_position: int | None = None,
) -> dict[str, JsonValue]:
    """`subagent_result`'s answer, with exactly the seed's fields.

    `output` is the child's final text (JSON text for a typed child); when it holds the summary
    envelope, its full result is the full output and its summary the summary. Only a
    `succeeded` session with its output is a success; `artifact_id` and `record_path` name an
    output that exists. `inline_content` is the full output when it fits in `INLINE_LIMIT`
    bytes, or the summary; a summary read of an output without one is an error.
    `queue_position` is there only for a queued session, and then required.
    """
    if (lifecycle == "queued") != (queue_position is not None):
        raise ValueError("queue_position is given exactly when the session is queued")
    inline: str | None = None
    has_output = lifecycle == "succeeded" and output is not None
    if lifecycle == "succeeded" and output is None and error is None:
        error = "The subagent succeeded but its output is missing"
    elif has_output and error is None:
        assert output is not None
        envelope = parse_envelope(output)
        if read_method == "full":
            full = envelope.full_result if envelope else output
            inline = full if _fits_inline(full) else None
        elif envelope is not None and envelope.summary:
            inline = envelope.summary
        else:
            error = (
                "No cached summary: the subagent's output has no summary envelope. "
                f'Call subagent_result(session_id="{session_id}") for the full result'
            )
    error = error if error is not None else _default_error(lifecycle, session_id)
    payload: dict[str, JsonValue] = {
        "status": "success" if error is None else "error",
        "session_id": session_id,
        "category": category,
        "lifecycle_status": lifecycle,
        "read_method": read_method,
        "artifact_id": artifact_id(session_id) if has_output else None,
        "record_path": record_path(session_id) if has_output else None,
        "inline_content": inline,
        "error": error,
    }
    if queue_position is not None:
        payload["queue_position"] = queue_position
    return payload


def status_payload(
    *,
    session_id: str,
    category: str,
    lifecycle: Lifecycle,
    error: str | None = None,
    queue_position: int | None = None,
) -> dict[str, JsonValue]:
    """`subagent_status`'s answer for one session (also what a background launch answers):
    its lifecycle, its queue position only while queued, its error once it failed."""
    if (lifecycle == "queued") != (queue_position is not None):
        raise ValueError("queue_position is given exactly when the session is queued")
    payload: dict[str, JsonValue] = {
        "session_id": session_id,
        "category": category,
        "lifecycle_status": lifecycle,
    }
    if queue_position is not None:
        payload["queue_position"] = queue_position
    if lifecycle in ("failed", "timed_out"):
        payload["error"] = error or _default_error(lifecycle, session_id)
    return payload


@dataclass(frozen=True, slots=True)
class Update:
    """A background session that ended, for the parent's notice."""

    session_id: str
    lifecycle: Lifecycle
    error: str | None = None
    has_summary: bool = True
    """Whether a summary read will find one; the succeeded line offers it only then."""


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _notice_line(update: Update) -> str | None:
    sid = update.session_id
    full = f'subagent_result(session_id="{sid}")'
    if update.lifecycle == "succeeded":
        if not update.has_summary:
            return f"- {sid} succeeded. Call {full} for the full result."
        return (
            f"- {sid} succeeded. Call {full} for the full result or "
            f'subagent_result(session_id="{sid}", read_method="summary") for the cached summary.'
        )
    if update.lifecycle == "failed":
        reason = f": {_one_line(update.error)}" if update.error else ""
        return f"- {sid} failed{reason}. Call {full} for details."
    if update.lifecycle == "timed_out":
        return f"- {sid} timed out. Call {full} for details."
    return None


def notice_text(updates: Sequence[Update]) -> str | None:
    """ONE system message for the ended sessions a wake delivers, in the seed's wording, in the
    given order; None when none is worth waking for (cancelled and unended ones are not)."""
    lines = [line for update in updates if (line := _notice_line(update)) is not None]
    if not lines:
        return None
    return "\n".join(["Background subagent updates:", *lines])


@dataclass(frozen=True, slots=True)
class StatusRow:
    """One session in the table `subagent_status` shows without a session id."""

    session_id: str
    category: str
    lifecycle: Lifecycle
    queue_position: int | None = None


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def status_table(rows: Sequence[StatusRow]) -> str:
    """The parent's background sessions as a Markdown table, in the given order."""
    if not rows:
        return "No background subagent sessions."
    lines = [
        "| session_id | category | lifecycle_status | queue_position |",
        "| --- | --- | --- | --- |",
    ]
    for row in rows:
        queued = row.lifecycle == "queued" and row.queue_position is not None
        position = str(row.queue_position) if queued else "-"
        lines.append(
            f"| {_cell(row.session_id)} | {_cell(row.category)} | {row.lifecycle} | {position} |"
        )
    return "\n".join(lines)

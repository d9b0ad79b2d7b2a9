"""`WireModel.trusted` and `replaced` build what validation builds, field for field."""

from __future__ import annotations

import pytest

from app.protocol import (
    AssistantMessage,
    OutputChunk,
    SubSessionRef,
    ToolCall,
    ToolEndChunk,
    ToolMessage,
    ToolStartChunk,
    chunk_to_json,
)
from app.protocol._base import WireModel

BASE = {"sequence": 3, "agent_id": "s-1", "agent_type": "a", "step": 2, "timestamp": 1_700_000}
CASES: list[tuple[type[WireModel], dict[str, object]]] = [
    (ToolStartChunk, {**BASE, "tool_call_id": "c", "tool_name": "t", "arguments": {"x": [1]}}),
    (ToolEndChunk, {**BASE, "tool_name": "t", "tool_call_id": "c"}),
    (OutputChunk, {**BASE, "output": {"k": 1.5}}),
    (ToolCall, {"name": "t"}),
    (ToolCall, {"id": "c", "name": "t", "arguments": "raw{"}),
    (AssistantMessage, {"tool_calls": (ToolCall("t", {"a": 1}, "c"),)}),
    (ToolMessage, {"tool_call_id": "c", "tool_name": "t", "error": "no"}),
    (
        SubSessionRef,
        {
            "sub_session_id": "s-1-sub-c",
            "agent_type": "a",
            "parent_tool_call_id": "c",
            "status": "running",
            "started_at": 5,
        },
    ),
]


@pytest.mark.parametrize(("cls", "values"), CASES)
def test_trusted_builds_what_validation_builds(
    cls: type[WireModel], values: dict[str, object]
) -> None:
    validated = cls(**values)
    trusted = cls.trusted(dict(values))
    assert trusted == validated
    assert list(trusted.__dict__) == list(validated.__dict__)
    assert trusted.model_fields_set == validated.model_fields_set
    assert trusted.model_dump_json(by_alias=True) == validated.model_dump_json(by_alias=True)
    assert repr(trusted) == repr(validated)


def test_trusted_chunk_json_is_the_wire_json() -> None:
    values = {**BASE, "tool_call_id": "c", "tool_name": "t", "arguments": {"x": 1}}
    assert chunk_to_json(ToolStartChunk.trusted(dict(values))) == chunk_to_json(
        ToolStartChunk(**values)
    )


def test_trusted_gives_each_instance_its_own_default() -> None:
    first, second = ToolCall.trusted({"name": "t"}), ToolCall.trusted({"name": "t"})
    assert first.arguments == {}
    assert first.arguments is not second.arguments


def test_replaced_is_model_copy() -> None:
    ref = SubSessionRef.trusted(dict(CASES[-1][1]))
    changes = {"status": "completed", "completed_at": 9}
    replaced, copied = ref.replaced(changes), ref.model_copy(update=changes)
    assert replaced == copied
    assert replaced.model_fields_set == copied.model_fields_set
    assert ref.status == "running"


def test_unknown_fields_raise() -> None:
    with pytest.raises(TypeError, match="tool_nam"):
        ToolMessage.trusted({"tool_call_id": "c", "tool_nam": "t"})
    with pytest.raises(TypeError, match="state"):
        SubSessionRef.trusted(dict(CASES[-1][1])).replaced({"state": "x"})

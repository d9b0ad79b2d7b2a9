"""Log lines: the run's fields on every line written inside a run, by our code or a tool; one
line at each run's start and end with its outcome and figures; JSON or readable text."""

from __future__ import annotations

import io
import json
import logging
import sys
from typing import Any

from pydantic import BaseModel

from app import AgentRegistry, AgentRuntime, create_sub_agent_tool, define_agent, define_tool
from app.agents import ToolContext
from app.models import ModelResponse, ScriptedModel, ToolCall
from app.models.base import Usage
from app.observability import logs
from tests.ops.conftest import JsonLines

tool_logger = logging.getLogger("tests.ops.tool")


class Note(BaseModel):
    text: str


class Done(BaseModel):
    noted: str


@define_tool("note", description="Write a note in the log.", input_schema=Note)
async def note(input: Note, ctx: ToolContext[Any]) -> str:
    tool_logger.info("noting %s", input.text)
    return input.text


def registry() -> AgentRegistry:
    child = define_agent(
        "noter",
        tools=[note],
        output_schema=Done,
        model=ScriptedModel(
            [
                ModelResponse(tool_calls=[ToolCall("note", {"text": "hello"})], usage=Usage(10, 2)),
                ModelResponse(
                    tool_calls=[ToolCall("__finish__", {"noted": "hello"})], usage=Usage(15, 3)
                ),
            ]
        ),
    )
    parent = define_agent(
        "boss",
        tools=[create_sub_agent_tool(child, Note)],
        model=ScriptedModel(
            [
                ModelResponse(tool_calls=[ToolCall("subagent__noter", {"text": "hi"}, id="c1")]),
                ModelResponse(text="done"),
            ]
        ),
    )
    return AgentRegistry([parent])


async def test_every_line_inside_a_run_names_the_run(json_logs: JsonLines) -> None:
    async with AgentRuntime(registry()) as runtime:
        handle = await runtime.execute("boss", "go", session_id="b1")
        result = await handle.result()
    assert result.status == "completed"

    [tool_line] = [line for line in json_logs.lines() if line["logger"] == "tests.ops.tool"]
    assert {k: v for k, v in tool_line.items() if k != "time"} == {
        "level": "INFO",
        "logger": "tests.ops.tool",
        "message": "noting hello",
        "session_id": "b1-sub-c1",
        "root_id": "b1",
        "agent_type": "noter",
        "step": 1,
    }
    runs = [line for line in json_logs.lines() if line["logger"] == "app.runs"]
    assert [(line["message"], line["session_id"]) for line in runs] == [
        ("Run started", "b1"),
        ("Run started", "b1-sub-c1"),
        ("Run ended", "b1-sub-c1"),
        ("Run ended", "b1"),
    ]
    child_end = runs[2]
    assert child_end["duration_ms"] >= 0
    assert {k: v for k, v in child_end.items() if k not in ("time", "duration_ms")} == {
        "level": "INFO",
        "logger": "app.runs",
        "message": "Run ended",
        "session_id": "b1-sub-c1",
        "root_id": "b1",
        "agent_type": "noter",
        "step": 2,
        "status": "completed",
        "steps": 2,
        "model_calls": 2,
        "tool_calls": 1,
        "input_tokens": 25,
        "output_tokens": 5,
    }
    assert runs[0]["resumed_at_step"] == 0
    assert runs[1]["parent_session_id"] == "b1"


async def test_a_failed_run_ends_with_its_error(json_logs: JsonLines) -> None:
    agent = define_agent("broken", model=ScriptedModel([]))
    async with AgentRuntime(AgentRegistry([agent])) as runtime:
        handle = await runtime.execute("broken", "go", session_id="x1")
        result = await handle.result()
    assert result.status == "failed"
    [end] = [line for line in json_logs.about("x1") if line["message"] == "Run ended"]
    assert end["status"] == "failed"
    assert end["error"] == result.error


def test_text_lines_are_readable_with_the_run_fields_after_the_message() -> None:
    stream = io.StringIO()
    handler = logs.make_handler("text", stream)
    record = logging.LogRecord("app.runs", logging.INFO, __file__, 1, "Run ended", None, None)
    record.session_id = "s1"
    record.fields = {"status": "completed", "error": "two words"}
    handler.handle(record)
    line = stream.getvalue().strip()
    assert line.endswith(
        "INFO app.runs: Run ended session_id=s1 status=completed error='two words'"
    )


def test_json_lines_carry_exceptions_on_one_line() -> None:
    stream = io.StringIO()
    handler = logs.make_handler("json", stream)
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "app", logging.ERROR, __file__, 1, "failed %s", ("here",), exc_info=True
        )
        record.exc_info = sys.exc_info()
    handler.handle(record)
    [line] = stream.getvalue().splitlines()
    parsed = json.loads(line)
    assert parsed["message"] == "failed here"
    assert parsed["exception"].splitlines()[-1] == "ValueError: boom"

"""Executing one function-tool call: validated input, sync or async, bounded, errors as results.

Whatever goes wrong in a call (bad arguments, an exception, a timeout, an unserialisable result)
becomes a tool error the model reads on its next step; it never fails the run.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, JsonValue, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from app.agents import Tool, ToolContext
from app.protocol.values import clean_json, clean_text


@dataclass(frozen=True, slots=True)
class CallResult:
    """What a call produced: a JSON result, or an error message for the model."""

    result: JsonValue = None
    error: str | None = None


def describe_validation_error(exc: ValidationError) -> str:
    """A compact, model-readable summary of what was wrong with some input."""
    problems = []
    for error in exc.errors(include_url=False, include_context=False):
        where = ".".join(str(part) for part in error["loc"]) or "input"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)


def parse_arguments(
    tool_name: str, schema: type[BaseModel], arguments: dict[str, Any] | str
) -> BaseModel | CallResult:
    """The call's input as a `schema` instance, or the error to give the model."""
    if not isinstance(arguments, dict):
        return CallResult(
            error=f"Invalid arguments for tool {tool_name!r}: expected a JSON object, got "
            f"{str(arguments)[:200]!r}"
        )
    try:
        return schema.model_validate(arguments)
    except ValidationError as exc:
        return CallResult(
            error=f"Invalid arguments for tool {tool_name!r}: {describe_validation_error(exc)}"
        )


def error_message(exc: BaseException) -> str:
    """An exception as one line for a model or a status."""
    text = str(exc)
    return clean_text(text) if text else type(exc).__name__


def to_json(value: object) -> JsonValue:
    """`value` as plain JSON data (pydantic models and dataclasses included), clean enough for
    every store (see `app.protocol.values`)."""
    return clean_json(to_jsonable_python(value))  # type: ignore[no-any-return]


async def execute_tool(tool: Tool, input: BaseModel, ctx: ToolContext[Any]) -> CallResult:
    """Run `tool` on `input`; sync tools run in a worker thread so the loop never blocks."""
    assert tool.execute is not None
    try:
        if tool.timeout is None:
            value = await _invoke(tool, input, ctx)
        else:
            async with asyncio.timeout(tool.timeout):
                value = await _invoke(tool, input, ctx)
    except TimeoutError:
        return CallResult(error=f"Tool {tool.name!r} timed out after {tool.timeout:g}s")
    except Exception as exc:
        return CallResult(error=error_message(exc))
    try:
        return CallResult(result=to_json(value))
    except PydanticSerializationError as exc:
        return CallResult(error=f"Tool {tool.name!r} returned a value that is not JSON: {exc}")


async def _invoke(tool: Tool, input: BaseModel, ctx: ToolContext[Any]) -> Any:
    assert tool.execute is not None
    if tool.is_async:
        return await tool.execute(input, ctx)
    return await asyncio.to_thread(tool.execute, input, ctx)

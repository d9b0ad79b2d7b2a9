"""Tools an agent can call: `define_tool` and the context a tool's `execute` receives."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from app.errors import DefinitionError
from app.models import ToolSpec

RESERVED_PREFIXES = ("subagent__", "companion__", "__")
"""Tool-name prefixes only this library may use."""

TOOL_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
_TOOL_NAME = re.compile(TOOL_NAME_PATTERN)

StateT = TypeVar("StateT")
InputT = TypeVar("InputT", bound=BaseModel)


@dataclass(slots=True)
class ToolContext(Generic[StateT]):
    """What a tool's `execute(input, ctx)` knows about the call."""

    session_id: str
    """The calling session."""
    agent_type: str
    """The calling agent's type."""
    tool_call_id: str
    """This call's id."""
    step: int
    """The calling agent's step."""
    state: StateT
    """The session's custom state (its `state_schema` instance, or a dict); changes are saved."""
    _is_interrupted: Callable[[], bool] = field(repr=False, default=lambda: False)

    @property
    def interrupted(self) -> bool:
        """Whether the session is being interrupted: a long-running tool should stop soon."""
        return self._is_interrupted()


ToolExecute = Callable[[Any, ToolContext[Any]], Any]
"""`execute(input, ctx)`, sync or async, returning anything JSON-serialisable."""


def check_tool_name(name: str, *, library: bool = False) -> None:
    """Raise `DefinitionError` unless `name` is a usable tool name (reserved: only `library`)."""
    if not isinstance(name, str) or not _TOOL_NAME.match(name):
        raise DefinitionError(f"Tool name {name!r} must match {TOOL_NAME_PATTERN}")
    if not library and name.startswith(RESERVED_PREFIXES):
        raise DefinitionError(
            f"Tool name {name!r} uses a reserved prefix ({', '.join(RESERVED_PREFIXES)}): "
            "those names belong to tools this library makes"
        )


def check_schema(owner: str, what: str, schema: object) -> type[BaseModel]:
    """Raise `DefinitionError` unless `schema` is a pydantic model class."""
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise DefinitionError(
            f"{owner}: {what} must be a pydantic BaseModel subclass, got {schema!r}"
        )
    return schema


class Offered:
    """What every kind of tool shares: how a model is offered it, from its name, description
    and input schema."""

    if TYPE_CHECKING:

        @property
        def name(self) -> str: ...

    description: str
    input_schema: type[BaseModel]

    @cached_property
    def spec(self) -> ToolSpec:
        """The tool as offered to a model."""
        return ToolSpec(self.name, self.description, self.input_schema.model_json_schema())


@dataclass(frozen=True, eq=False)
class Tool(Offered):
    """A function tool. Without `execute` it is a client tool: the session pauses for its result.

    A `Tool` is also a decorator: `@define_tool("name", ...)` over a function gives that tool with
    the function as its `execute`.
    """

    name: str
    description: str
    input_schema: type[BaseModel]
    execute: ToolExecute | None = None
    requires_approval: bool = False
    timeout: float | None = None

    def __call__(self, execute: ToolExecute) -> Tool:
        """Use `execute` as this tool's executor (the decorator form)."""
        if self.execute is not None:
            raise DefinitionError(f"Tool {self.name!r} already has an execute function")
        if not callable(execute):
            raise DefinitionError(f"Tool {self.name!r}: execute must be callable")
        return replace(self, execute=execute)

    @property
    def is_client_tool(self) -> bool:
        """Whether the client, not the server, executes this tool."""
        return self.execute is None

    @cached_property
    def is_async(self) -> bool:
        """Whether `execute` is a coroutine function (else it runs in a worker thread)."""
        return inspect.iscoroutinefunction(self.execute)


def define_tool(
    name: str,
    *,
    description: str,
    input_schema: type[BaseModel],
    execute: ToolExecute | None = None,
    requires_approval: bool = False,
    timeout: float | None = None,
) -> Tool:
    """Define a tool the model can call.

    `execute(input, ctx)` may be sync (run in a worker thread) or async; `input` is an instance of
    `input_schema`. Without `execute` the tool is a client tool. `requires_approval=True` pauses the
    session for an approval before the tool runs. `timeout` bounds one call, in seconds.
    """
    check_tool_name(name)
    if not isinstance(description, str):
        raise DefinitionError(f"Tool {name!r}: description must be a string")
    check_schema(f"Tool {name!r}", "input_schema", input_schema)
    if execute is not None and not callable(execute):
        raise DefinitionError(f"Tool {name!r}: execute must be callable")
    if timeout is not None and timeout <= 0:
        raise DefinitionError(f"Tool {name!r}: timeout must be positive, got {timeout}")
    return Tool(name, description, input_schema, execute, requires_approval, timeout)

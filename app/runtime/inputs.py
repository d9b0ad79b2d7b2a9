"""What callers hand a run: its first message and input, and the answers that resume a paused
session (client tool results and approvals, checked against what it waits for, so a body that
does not fit changes nothing)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from app.agents import AgentConfig, Tool
from app.agents.subagent import input_to_message
from app.errors import InvalidRequestError
from app.protocol import Message, ToolCall, ToolMessage
from app.protocol.api import ApprovalBody, ToolResultBody
from app.runtime.calls import describe_validation_error, to_json

REJECTED = "The user did not approve this call."
"""The tool error a model reads for a call whose approval was refused."""

_RESULTS: TypeAdapter[list[ToolResultBody]] = TypeAdapter(list[ToolResultBody])
_APPROVALS: TypeAdapter[list[ApprovalBody]] = TypeAdapter(list[ApprovalBody])


@dataclass(frozen=True, slots=True)
class Answers:
    """What a client sent to resume a paused session."""

    results: dict[str, Any]
    approvals: dict[str, bool]

    @property
    def empty(self) -> bool:
        """Whether nothing was sent."""
        return not self.results and not self.approvals

    @classmethod
    def parse(
        cls,
        tool_results: Sequence[ToolResultBody | Mapping[str, Any]] | None,
        approvals: Sequence[ApprovalBody | Mapping[str, Any]] | None,
    ) -> Answers:
        """Read the answers (objects or mappings with camelCase or snake_case keys)."""
        try:
            results = _RESULTS.validate_python(list(tool_results or ()))
            decisions = _APPROVALS.validate_python(list(approvals or ()))
        except ValidationError as exc:
            raise InvalidRequestError(f"Invalid answers: {describe_validation_error(exc)}") from exc
        for kind, ids in (
            ("toolResults", [r.tool_call_id for r in results]),
            ("approvals", [a.tool_call_id for a in decisions]),
        ):
            twice = sorted({i for i in ids if ids.count(i) > 1})
            if twice:
                raise InvalidRequestError(f"{kind} answers {', '.join(twice)} more than once")
        return cls(
            {r.tool_call_id: to_json(r.result) for r in results},
            {a.tool_call_id: a.approved for a in decisions},
        )

    def apply(
        self, agent: AgentConfig, pending: Sequence[ToolCall]
    ) -> tuple[list[Message], frozenset[str]]:
        """The tool messages the answers add, and the approved call ids; every client call must
        get a result and every call awaiting approval a decision."""
        client, gated = set(), set()
        for call in pending:
            tool = agent.tool_map.get(call.name)
            if isinstance(tool, Tool) and tool.is_client_tool:
                client.add(call.id)
            elif isinstance(tool, Tool) and tool.requires_approval:
                gated.add(call.id)
        _check("toolResults", set(self.results), client, "a client tool's result")
        _check("approvals", set(self.approvals), gated, "an approval")
        messages: list[Message] = []
        for call in pending:
            assert call.id is not None
            if call.id in self.results:
                messages.append(
                    ToolMessage(
                        tool_call_id=call.id, tool_name=call.name, result=self.results[call.id]
                    )
                )
            elif self.approvals.get(call.id) is False:
                messages.append(
                    ToolMessage(tool_call_id=call.id, tool_name=call.name, error=REJECTED)
                )
        approved = frozenset(i for i, ok in self.approvals.items() if ok)
        return messages, approved


def _check(kind: str, given: set[str], waiting: set[str | None], what: str) -> None:
    unknown = sorted(given - waiting)
    if unknown:
        raise InvalidRequestError(
            f"{kind}: no call awaiting {what} has the id {', '.join(unknown)} (waiting: "
            f"{', '.join(sorted(str(i) for i in waiting)) or 'none'})"
        )
    missing = sorted(str(i) for i in waiting - given)
    if missing:
        raise InvalidRequestError(f"{kind}: {what} is missing for {', '.join(missing)}")


def json_input(input: Any) -> JsonValue:
    """`input` as JSON data, or `InvalidRequestError`."""
    if input is None:
        return None
    try:
        return to_json(input)
    except PydanticSerializationError as exc:
        raise InvalidRequestError(f"input is not JSON-serialisable: {exc}") from exc


def first_message(message: str | None, input: JsonValue) -> str:
    """A run's first user message: `message`, else derived from `input`."""
    if message is not None:
        if not isinstance(message, str):
            raise InvalidRequestError("message must be a string")
        return message
    if isinstance(input, dict):
        return input_to_message(input)
    if input is not None:
        return json.dumps(input, ensure_ascii=False)
    raise InvalidRequestError("A run needs a message or an input")

"""What callers hand a run: its first message and input, and the answers that resume a paused
session (client tool results and approvals, checked against what it waits for, so a body that
does not fit changes nothing)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, JsonValue, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from app.agents import AgentConfig
from app.agents.subagent import input_to_message
from app.errors import InvalidInputError, InvalidRequestError
from app.protocol.api import ApprovalBody, ToolResultBody
from app.protocol.values import clean_text
from app.runtime.calls import describe_validation_error, to_json

REJECTED = "The user did not approve this call."
"""The tool error a model reads for a call whose approval was refused."""

_RESULTS: TypeAdapter[list[ToolResultBody]] = TypeAdapter(list[ToolResultBody])
_APPROVALS: TypeAdapter[list[ApprovalBody]] = TypeAdapter(list[ApprovalBody])


@dataclass(frozen=True, slots=True)
class Answers:
    """What a client sent to resume a paused tree: results and decisions, each for a call of a
    session (None: the resumed session itself)."""

    results: dict[tuple[str | None, str], Any]
    approvals: dict[tuple[str | None, str], bool]
    repeated: str | None = None
    """What was answered twice, if anything: refused once the answers are for a paused
    session (to another session, answers are a conflict whatever they hold)."""

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
        """Read the answers (objects or mappings with camelCase or snake_case keys; a result
        may be anything `to_json` turns into JSON a store can hold)."""
        try:
            results = _RESULTS.validate_python(
                [_jsonable_result(item) for item in tool_results or ()], by_name=True
            )
            decisions = _APPROVALS.validate_python(list(approvals or ()), by_name=True)
        except ValidationError as exc:
            raise InvalidRequestError(f"Invalid answers: {describe_validation_error(exc)}") from exc
        repeated = None
        for kind, keys in (
            ("toolResults", [(r.session_id, r.tool_call_id) for r in results]),
            ("approvals", [(a.session_id, a.tool_call_id) for a in decisions]),
        ):
            twice = sorted({call for key in keys if keys.count(key) > 1 for call in key[1:]})
            if twice and repeated is None:
                repeated = f"{kind} answers {', '.join(twice)} more than once"
        return cls(
            {(r.session_id, r.tool_call_id): to_json(r.result) for r in results},
            {(a.session_id, a.tool_call_id): a.approved for a in decisions},
            repeated,
        )


def _jsonable_result(
    item: ToolResultBody | Mapping[str, Any],
) -> ToolResultBody | Mapping[str, Any]:
    if isinstance(item, Mapping) and "result" in item:
        try:
            return {**item, "result": to_json(item["result"])}
        except PydanticSerializationError as exc:
            raise InvalidRequestError(f"A tool result is not JSON-serialisable: {exc}") from exc
    return item


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
        return clean_text(message)
    if isinstance(input, dict):
        return input_to_message(input)
    if input is not None:
        return json.dumps(input, ensure_ascii=False)
    raise InvalidRequestError("A run needs a message or an input")


def _details(exc: ValidationError, where: str) -> list[dict[str, Any]]:
    return [
        {"loc": [where, *(str(part) for part in error["loc"])], "msg": error["msg"]}
        for error in exc.errors(include_url=False, include_context=False, include_input=False)
    ]


def fitted_input(schema: type[BaseModel] | None, input: JsonValue) -> JsonValue:
    """`input` validated against the agent's published input `schema` (what `GET /agents`
    shows), as JSON with the schema's defaults filled in, like a sub-agent call's input; as it
    is when the agent publishes none. `InvalidInputError` with the problems otherwise."""
    if schema is None or input is None:
        return input
    try:
        return schema.model_validate(input).model_dump(mode="json")
    except ValidationError as exc:
        raise InvalidInputError(
            f"input does not fit the input schema of the agent: {describe_validation_error(exc)}",
            details=_details(exc, "input"),
        ) from exc


def seed_state(agent: AgentConfig, input: JsonValue) -> dict[str, Any]:
    """The custom state a new session of `agent` starts with, as JSON (see
    `AgentConfig.initial_state`); `InvalidInputError` when an input field the state schema
    declares does not fit it."""
    try:
        state = agent.initial_state(input)
    except ValidationError as exc:
        raise InvalidInputError(
            f"input does not fit the state schema of the agent: {describe_validation_error(exc)}",
            details=_details(exc, "input"),
        ) from exc
    return state if isinstance(state, dict) else state.model_dump(mode="json")

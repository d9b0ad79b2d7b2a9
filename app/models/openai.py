"""Reach real LLMs through OpenAI-compatible chat completions (OpenAI, Ollama, vLLM, llama.cpp).

`OpenAIChatModel` streams one chat completion per step over the official `openai` SDK and turns it
into the `Model` events: text deltas as they arrive, then whole tool calls, then usage (its chunks
folded by app/models/openai_stream.py). Provider and transport failures are translated here,
once: what is worth retrying becomes a `TransientModelError`, a refusal a `ProviderError`. The SDK
retries nothing itself; `RetryingModel` does, and `openai_model_from_env` wires both from the
environment.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from email.utils import parsedate_to_datetime
from typing import assert_never

import openai
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)

from app.errors import DefinitionError, ModelError, ProviderError, TransientModelError
from app.models.base import Model, ModelEvent, ModelRequest, TextDelta, ToolCallReady
from app.models.openai_stream import MalformedChunkError, ResponseAssembler
from app.models.retry import RetryingModel
from app.protocol import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

logger = logging.getLogger(__name__)

__all__ = ["OpenAIChatModel", "openai_model_from_env"]

# Local OpenAI-compatible servers (Ollama, vLLM, llama.cpp) need no key, but the SDK refuses to
# start without one. For a custom base URL we send this placeholder rather than falling back to
# OPENAI_API_KEY, which would hand an OpenAI key to whatever server the URL names.
_NO_KEY = "no-key"

# 408, 409 (OpenAI's lock timeout) and 425 are worth another try like 429 and 5xx; every other
# 4xx (400, 401, 403, 404, 413, 422, context length exceeded, ...) fails the same way again.
_TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})


class OpenAIChatModel(Model):
    """A model served over OpenAI-compatible chat completions, streamed.

    `base_url` is the API root (for example `http://localhost:11434/v1` for Ollama); None means
    OpenAI itself (or the SDK's `OPENAI_BASE_URL`). `api_key` is sent as a bearer token; None means
    the SDK's `OPENAI_API_KEY` for OpenAI, and no key for a custom `base_url`. `timeout` bounds the
    connection and each wait for the next streamed bytes, in seconds. `headers` are added to every
    request. The SDK's own retries are off: wrap the model in `RetryingModel` to retry.

    The model owns an HTTP connection pool bound to the event loop that first uses it; close it
    with `aclose()` (or `async with`) when done.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not model:
            raise DefinitionError("OpenAIChatModel needs a model name")
        if timeout <= 0:
            raise DefinitionError(f"timeout must be > 0, got {timeout}")
        if api_key is None and base_url is not None:
            api_key = _NO_KEY
        try:
            self._client = openai.AsyncOpenAI(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                max_retries=0,
                default_headers=dict(headers) if headers else None,
            )
        except openai.OpenAIError as exc:
            raise DefinitionError(f"OpenAIChatModel({model!r}): {exc}") from exc
        self.model = model
        """The provider's model name, sent with every request."""

    @property
    def name(self) -> str:
        """The model's name, as its errors (which reach `/status` and `error` chunks) call it;
        where it is served stays in the server's log."""
        return f"OpenAIChatModel({self.model})"

    @property
    def base_url(self) -> str:
        """Where the model is served (in the log, never in an error a client reads)."""
        return str(self._client.base_url)

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one chat completion for `request`.

        Text deltas are yielded as they arrive; the tool calls, assembled from their deltas, once
        the provider has finished; usage last. Cancelling the iteration closes the HTTP response
        at once.
        """
        body: dict[str, object] = {
            "model": self.model,
            "messages": chat_messages(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        # Some servers reject an empty tool list, so none is sent when no tool is offered.
        if request.tools:
            body["tools"] = chat_tools(request)
        try:
            # The SDK's own endpoint call, auth, errors and SSE decoding, but chunks kept as
            # parsed JSON: building its typed chunk models costs ~0.25 ms of CPU per chunk,
            # three times all the rest a chunk costs (bench/openai_adapter.py --words 300).
            chunks = await self._client.post(
                "/chat/completions",
                body=body,
                cast_to=object,
                stream=True,
                stream_cls=openai.AsyncStream[object],
                options={"security": {"bearer_auth": True}},
            )
        except openai.OpenAIError as exc:
            raise self._translate(exc, request) from exc
        response = ResponseAssembler()
        try:
            async for chunk in chunks:
                text = response.feed(chunk)
                if text:
                    yield TextDelta(text)
        except openai.OpenAIError as exc:
            raise self._translate(exc, request) from exc
        except (json.JSONDecodeError, MalformedChunkError) as exc:
            raise ModelError(f"{self.name} sent a malformed stream chunk: {exc}") from exc
        finally:
            await chunks.close()
        if response.finish_reason is None:
            raise TransientModelError(
                f"{self.name}: the response stream ended before the response finished"
            )
        for call in response.tool_calls():
            yield ToolCallReady(call)
        if response.usage is not None:
            yield response.usage

    def _translate(self, exc: openai.OpenAIError, request: ModelRequest) -> ModelError:
        """The project error for an SDK error, named after this model; the SDK's own account,
        with the server's URL, goes to the log with the session."""
        logger.warning(
            "Session %s: %s at %s failed: %s: %s",
            request.session_id,
            self.name,
            self.base_url,
            type(exc).__name__,
            exc,
        )
        if isinstance(exc, openai.APITimeoutError):
            return TransientModelError(f"{self.name} timed out")
        if isinstance(exc, openai.APIConnectionError):
            # The cause's kind only: its text may name the host (it is in the log above).
            cause = type(exc.__cause__ or exc).__name__
            return TransientModelError(f"{self.name}: connection failed or was lost ({cause})")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            detail = _provider_message(exc)
            if status in _TRANSIENT_STATUSES or status >= 500:
                return TransientModelError(
                    f"{self.name} answered HTTP {status}: {detail}",
                    retry_after=retry_after_seconds(exc.response.headers),
                )
            return ProviderError(f"{self.name} refused the request (HTTP {status}): {detail}")
        if isinstance(exc, openai.APIError):
            # An error event inside a 200 stream: the provider broke off its own response.
            return TransientModelError(f"{self.name} failed mid-response: {_provider_message(exc)}")
        return ModelError(f"{self.name}: {exc}")


def chat_messages(request: ModelRequest) -> list[ChatCompletionMessageParam]:
    """The system prompt and the conversation as chat-completion messages."""
    messages: list[ChatCompletionMessageParam] = []
    if request.system_prompt:
        messages.append({"role": "system", "content": request.system_prompt})
    # The model's own ids, where the runtime renamed a call (see `ToolCall.original_id`).
    original: dict[str, str] = {}
    for message in request.messages:
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                if call.original_id is not None and call.id is not None:
                    original[call.id] = call.original_id
        messages.append(_chat_message(message, original))
    return messages


def _chat_message(message: Message, original: Mapping[str, str]) -> ChatCompletionMessageParam:
    if isinstance(message, UserMessage):
        return {"role": "user", "content": message.content}
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.content}
    if isinstance(message, AssistantMessage):
        if not message.tool_calls:
            return {"role": "assistant", "content": message.content}
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [_chat_tool_call(call) for call in message.tool_calls],
        }
    if isinstance(message, ToolMessage):
        content = (
            message.error
            if message.error is not None
            else json.dumps(message.result, ensure_ascii=False)
        )
        call_id = original.get(message.tool_call_id, message.tool_call_id)
        return {"role": "tool", "tool_call_id": call_id, "content": content}
    assert_never(message)


def _chat_tool_call(call: ToolCall) -> ChatCompletionMessageFunctionToolCallParam:
    if call.id is None:
        raise ModelError(
            f"The conversation holds a call to tool {call.name!r} without an id; the runtime "
            f"assigns one before it stores an assistant message"
        )
    arguments = (
        call.arguments
        if isinstance(call.arguments, str)
        else json.dumps(call.arguments, ensure_ascii=False)
    )
    return {
        "id": call.original_id or call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def chat_tools(request: ModelRequest) -> list[ChatCompletionFunctionToolParam]:
    """The offered tools as chat-completion function tools."""
    tools: list[ChatCompletionFunctionToolParam] = []
    for tool in request.tools:
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
        )
    return tools


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds a provider asked us to wait: `retry-after-ms`, or `retry-after` (seconds or date)."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return max(float(milliseconds) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(moment.timestamp() - time.time(), 0.0)


def _provider_message(exc: openai.APIError) -> str:
    """The provider's own words from an error body, with its error code when it gave one."""
    body = exc.body
    message: str | None = None
    if isinstance(body, Mapping):
        found = body.get("message")
        if isinstance(found, str) and found:
            message = found
    elif isinstance(body, str) and body:
        message = body[:500]
    if message is None:
        message = exc.message
    return f"{message} ({exc.code})" if exc.code else message


def openai_model_from_env(environ: Mapping[str, str]) -> Model | None:
    """The configured real model: `MODEL_NAME` at `MODEL_BASE_URL` with `MODEL_API_KEY`, retried.

    None when none of the three is set (the caller falls back to a scripted model). Any of them
    set without `MODEL_NAME` is a `DefinitionError`.
    """
    base_url = environ.get("MODEL_BASE_URL") or None
    api_key = environ.get("MODEL_API_KEY") or None
    name = environ.get("MODEL_NAME") or None
    if base_url is None and api_key is None and name is None:
        return None
    if name is None:
        raise DefinitionError(
            "MODEL_NAME must name the model when MODEL_BASE_URL or MODEL_API_KEY is set"
        )
    return RetryingModel(OpenAIChatModel(name, base_url=base_url, api_key=api_key))

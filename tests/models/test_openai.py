"""OpenAIChatModel against a real local HTTP server: what it sends, what it yields, how it fails."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from app.errors import DefinitionError, ModelError, ProviderError, TransientModelError
from app.models import (
    ModelEvent,
    ModelRequest,
    RetryStarted,
    TextDelta,
    ToolCall,
    ToolCallReady,
    ToolSpec,
    Usage,
)
from app.models.openai import OpenAIChatModel, openai_model_from_env, retry_after_seconds
from app.models.retry import RetryingModel
from app.protocol import AssistantMessage, Message, ToolMessage, UserMessage
from tests.models.fake_openai import (
    MODEL,
    ErrorReply,
    FakeOpenAI,
    FakeToolCall,
    StreamReply,
    completion_chunks,
)

ADD = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
FINISH = ToolSpec(
    name="__finish__",
    description="Finish with the final output.",
    parameters={"type": "object", "properties": {"answer": {"type": "integer"}}},
)
QUESTION = UserMessage(content="What is 2 + 3?")

ADD_TOOL_JSON = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def make_request(
    messages: Sequence[Message] = (QUESTION,),
    tools: Sequence[ToolSpec] = (ADD,),
    system_prompt: str = "You add numbers.",
) -> ModelRequest:
    return ModelRequest(
        session_id="s1",
        agent_type="adder",
        system_prompt=system_prompt,
        messages=messages,
        tools=tools,
        step=1,
    )


async def collect(
    events: AsyncIterator[ModelEvent], *, into: list[ModelEvent] | None = None
) -> list[ModelEvent]:
    received = [] if into is None else into
    async for event in events:
        received.append(event)
    return received


@pytest.fixture
async def model(fake_openai: FakeOpenAI) -> AsyncIterator[OpenAIChatModel]:
    async with OpenAIChatModel(MODEL, base_url=fake_openai.base_url, api_key="sk-test") as opened:
        yield opened


@pytest.fixture
async def retrying(model: OpenAIChatModel) -> RetryingModel:
    return RetryingModel(model, base_delay=0.01)


# -- streaming --------------------------------------------------------------------------------


async def test_text_only(fake_openai: FakeOpenAI, model: OpenAIChatModel) -> None:
    fake_openai.script(StreamReply(completion_chunks("Two plus three is five.", usage=(30, 6))))

    events = await collect(model.stream(make_request(tools=())))

    assert events == [
        TextDelta("Two "),
        TextDelta("plus "),
        TextDelta("three "),
        TextDelta("is "),
        TextDelta("five."),
        Usage(input_tokens=30, output_tokens=6),
    ]
    [sent] = fake_openai.requests
    assert sent.body == {
        "model": MODEL,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "You add numbers."},
            {"role": "user", "content": "What is 2 + 3?"},
        ],
    }
    assert sent.headers["authorization"] == "Bearer sk-test"


async def test_parallel_tool_calls_with_arguments_split_across_deltas(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    calls = [
        FakeToolCall("call_a", "add", '{"a": 2, "b": 3}'),
        FakeToolCall("call_b", "add", '{"a": 40, "b": 2}'),
        FakeToolCall("call_c", "add", '{"a": -1, "b": 1}'),
    ]
    fake_openai.script(
        StreamReply(
            completion_chunks("Adding three pairs.", calls, argument_piece=3, interleave=True)
        )
    )

    events = await collect(model.stream(make_request()))

    assert events == [
        TextDelta("Adding "),
        TextDelta("three "),
        TextDelta("pairs."),
        ToolCallReady(ToolCall("add", {"a": 2, "b": 3}, id="call_a")),
        ToolCallReady(ToolCall("add", {"a": 40, "b": 2}, id="call_b")),
        ToolCallReady(ToolCall("add", {"a": -1, "b": 1}, id="call_c")),
        Usage(input_tokens=21, output_tokens=9),
    ]
    [sent] = fake_openai.requests
    assert sent.body["tools"] == [ADD_TOOL_JSON]


async def test_finish_call(fake_openai: FakeOpenAI, model: OpenAIChatModel) -> None:
    fake_openai.script(
        StreamReply(completion_chunks("", [FakeToolCall("call_f", "__finish__", '{"answer": 5}')]))
    )

    events = await collect(model.stream(make_request(tools=(ADD, FINISH))))

    assert events == [
        ToolCallReady(ToolCall("__finish__", {"answer": 5}, id="call_f")),
        Usage(input_tokens=21, output_tokens=9),
    ]
    [sent] = fake_openai.requests
    assert [tool["function"]["name"] for tool in sent.body["tools"]] == ["add", "__finish__"]


async def test_no_usage_event_when_the_provider_reports_none(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake_openai.script(StreamReply(completion_chunks("Five.", usage=None)))

    assert await collect(model.stream(make_request())) == [TextDelta("Five.")]


async def test_invalid_tool_call_json_is_passed_on_raw(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    calls = [
        FakeToolCall("call_1", "add", '{"a": 2, "b": '),
        FakeToolCall("call_2", "add", "[2, 3]"),
        FakeToolCall("call_3", "__finish__", ""),
    ]
    fake_openai.script(StreamReply(completion_chunks("", calls)))

    events = await collect(model.stream(make_request(tools=(ADD, FINISH))))

    assert events == [
        ToolCallReady(ToolCall("add", '{"a": 2, "b": ', id="call_1")),
        ToolCallReady(ToolCall("add", "[2, 3]", id="call_2")),
        ToolCallReady(ToolCall("__finish__", {}, id="call_3")),
        Usage(input_tokens=21, output_tokens=9),
    ]


async def test_tolerates_servers_that_number_nothing_and_repeat_names(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    def part(call_id: str | None, arguments: str) -> dict[str, object]:
        delta: dict[str, object] = {"function": {"name": "add", "arguments": arguments}}
        if call_id is not None:
            delta["id"] = call_id
        return {"choices": [{"delta": {"tool_calls": [delta]}}]}

    chunks: list[dict[str, object] | bytes] = [
        {"choices": [{"delta": {"role": "assistant", "content": "Sure."}}]},
        part("c1", '{"a": 1,'),
        part(None, ' "b": 2}'),
        part("c2", '{"a": 3, "b": 4}'),
        part("c2", ""),
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
    ]
    fake_openai.script(StreamReply(chunks))

    assert await collect(model.stream(make_request())) == [
        TextDelta("Sure."),
        ToolCallReady(ToolCall("add", {"a": 1, "b": 2}, id="c1")),
        ToolCallReady(ToolCall("add", {"a": 3, "b": 4}, id="c2")),
    ]


async def test_conversation_is_mapped_to_chat_messages(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    conversation: list[Message] = [
        UserMessage(content="What are 2 + 3 and 4 + 5?"),
        AssistantMessage(
            content="Let me add.",
            tool_calls=(
                ToolCall("add", {"a": 2, "b": 3}, id="call_1"),
                ToolCall("add", '{"a": 4, "b":', id="call_2"),
            ),
        ),
        ToolMessage(tool_call_id="call_1", tool_name="add", result={"sum": 5}),
        ToolMessage(
            tool_call_id="call_2", tool_name="add", error="Invalid arguments: not valid JSON"
        ),
        AssistantMessage(tool_calls=(ToolCall("add", {"a": 4, "b": 5}, id="call_3"),)),
        ToolMessage(tool_call_id="call_3", tool_name="add", result="9 (é)"),
        AssistantMessage(content="5 and 9."),
        UserMessage(content="Thanks!"),
    ]
    fake_openai.script(StreamReply(completion_chunks("You're welcome.")))

    await collect(model.stream(make_request(conversation)))

    [sent] = fake_openai.requests
    assert sent.body["messages"] == [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": "What are 2 + 3 and 4 + 5?"},
        {
            "role": "assistant",
            "content": "Let me add.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 4, "b":'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sum": 5}'},
        {"role": "tool", "tool_call_id": "call_2", "content": "Invalid arguments: not valid JSON"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_3",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 4, "b": 5}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_3", "content": '"9 (é)"'},
        {"role": "assistant", "content": "5 and 9."},
        {"role": "user", "content": "Thanks!"},
    ]


async def test_no_system_message_for_an_empty_prompt_and_custom_headers(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(StreamReply(completion_chunks("Hi.")))
    async with OpenAIChatModel(
        MODEL, base_url=fake_openai.base_url, headers={"X-Tenant": "acme"}
    ) as model:
        await collect(model.stream(make_request(system_prompt="", tools=())))

    [sent] = fake_openai.requests
    assert sent.body["messages"] == [{"role": "user", "content": "What is 2 + 3?"}]
    assert sent.headers["x-tenant"] == "acme"
    # No key was given for a custom base URL: a placeholder, never the ambient OPENAI_API_KEY.
    assert sent.headers["authorization"] == "Bearer no-key"


# -- retries over HTTP ------------------------------------------------------------------------

SUCCESS_CALL = FakeToolCall("call_ok", "add", '{"a": 2, "b": 3}')
SUCCESS_EVENTS: list[ModelEvent] = [
    TextDelta("Two "),
    TextDelta("plus "),
    TextDelta("three."),
    ToolCallReady(ToolCall("add", {"a": 2, "b": 3}, id="call_ok")),
    Usage(input_tokens=21, output_tokens=9),
]


def success() -> StreamReply:
    return StreamReply(completion_chunks("Two plus three.", [SUCCESS_CALL]))


@pytest.mark.parametrize(
    ("header", "value", "cap", "lowest", "highest"),
    [
        ("Retry-After", "1", 0.2, 0.2, 0.9),
        ("retry-after-ms", "150", 60.0, 0.15, 0.9),
    ],
)
async def test_429_waits_the_providers_retry_after_capped_then_succeeds(
    fake_openai: FakeOpenAI,
    model: OpenAIChatModel,
    header: str,
    value: str,
    cap: float,
    lowest: float,
    highest: float,
) -> None:
    fake_openai.script(
        ErrorReply(429, "Rate limit reached", code="rate_limit_exceeded", headers={header: value}),
        success(),
    )
    retrying = RetryingModel(model, base_delay=0.01, max_retry_after=cap)

    assert await collect(retrying.stream(make_request())) == SUCCESS_EVENTS
    first, second = fake_openai.requests
    assert lowest <= second.at - first.at < highest
    assert first.body == second.body


async def test_429_is_transient_with_retry_after(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    headers = {"Retry-After": "7"}
    fake_openai.script(
        ErrorReply(429, "Rate limit reached", code="rate_limit_exceeded", headers=headers)
    )

    with pytest.raises(TransientModelError) as caught:
        await collect(model.stream(make_request()))

    assert caught.value.message == (
        f"{model.name} answered HTTP 429: Rate limit reached (rate_limit_exceeded)"
    )
    assert caught.value.retry_after == 7.0


async def test_503_then_success(fake_openai: FakeOpenAI, retrying: RetryingModel) -> None:
    fake_openai.script(ErrorReply(503, "The server is overloaded."), success())

    assert await collect(retrying.stream(make_request())) == SUCCESS_EVENTS
    assert len(fake_openai.requests) == 2


async def test_connection_dropped_mid_stream_then_success(
    fake_openai: FakeOpenAI, retrying: RetryingModel
) -> None:
    fake_openai.script(
        StreamReply(completion_chunks("Two plus three.", [SUCCESS_CALL]), drop_after=3), success()
    )

    events = await collect(retrying.stream(make_request()))

    # The first attempt's deltas were already streamed live when its connection dropped; the
    # restart is announced so the consumer drops them, then the retried call streams it all.
    assert events[:2] == [TextDelta("Two "), TextDelta("plus ")]
    restart = events[2]
    assert isinstance(restart, RetryStarted)
    assert restart.attempt == 2
    assert restart.error.startswith(f"{retrying.model.name}: connection failed or was lost (")
    assert events[3:] == SUCCESS_EVENTS
    assert len(fake_openai.requests) == 2


async def test_connection_dropped_mid_stream_is_transient(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake_openai.script(StreamReply(completion_chunks("Two plus three."), drop_after=3))
    received: list[ModelEvent] = []

    with pytest.raises(TransientModelError) as caught:
        await collect(model.stream(make_request()), into=received)

    assert received == [TextDelta("Two "), TextDelta("plus ")]
    assert caught.value.message.startswith(f"{model.name}: connection failed or was lost (")


async def test_401_fails_at_once(fake_openai: FakeOpenAI, retrying: RetryingModel) -> None:
    fake_openai.script(ErrorReply(401, "Incorrect API key provided.", code="invalid_api_key"))

    with pytest.raises(ProviderError) as caught:
        await collect(retrying.stream(make_request()))

    assert caught.value.message == (
        f"{retrying.name} refused the request (HTTP 401): "
        f"Incorrect API key provided. (invalid_api_key)"
    )
    assert len(fake_openai.requests) == 1


@pytest.mark.parametrize(
    ("status", "message", "code"),
    [
        (400, "This model's maximum context length is 8192 tokens.", "context_length_exceeded"),
        (403, "Project does not have access to model.", None),
        (404, "The model `gpt-fake-1` does not exist.", "model_not_found"),
        (422, "Unprocessable entity.", None),
    ],
)
async def test_refusals_are_provider_errors(
    fake_openai: FakeOpenAI, retrying: RetryingModel, status: int, message: str, code: str | None
) -> None:
    fake_openai.script(ErrorReply(status, message, code=code))

    with pytest.raises(ProviderError) as caught:
        await collect(retrying.stream(make_request()))

    detail = f"{message} ({code})" if code else message
    assert caught.value.message == f"{retrying.name} refused the request (HTTP {status}): {detail}"
    assert len(fake_openai.requests) == 1


async def test_a_plain_text_error_body_is_quoted(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake_openai.script(ErrorReply(502, "upstream connect error", plain=True))

    with pytest.raises(TransientModelError) as caught:
        await collect(model.stream(make_request()))

    assert caught.value.message == f"{model.name} answered HTTP 502: upstream connect error"


async def test_a_stored_tool_call_without_id_is_refused_before_any_request(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    conversation: list[Message] = [
        QUESTION,
        AssistantMessage(tool_calls=(ToolCall("add", {"a": 1, "b": 2}),)),
    ]

    with pytest.raises(ModelError, match="call to tool 'add' without an id"):
        await collect(model.stream(make_request(conversation)))

    assert fake_openai.requests == []


async def test_gives_up_after_max_attempts(fake_openai: FakeOpenAI, model: OpenAIChatModel) -> None:
    fake_openai.script(*[ErrorReply(502, "Bad gateway.")] * 3)
    retrying = RetryingModel(model, max_attempts=3, base_delay=0.01)

    with pytest.raises(TransientModelError) as caught:
        await collect(retrying.stream(make_request()))

    assert caught.value.message == (
        f"{model.name} gave up after 3 attempts; last error: "
        f"{model.name} answered HTTP 502: Bad gateway."
    )
    assert len(fake_openai.requests) == 3


# -- interrupts -------------------------------------------------------------------------------


async def test_cancelling_a_slow_stream_closes_the_connection(
    fake_openai: FakeOpenAI, retrying: RetryingModel
) -> None:
    fake_openai.script(StreamReply(completion_chunks("word " * 200), delay=0.05))
    received: list[ModelEvent] = []
    first = asyncio.Event()

    async def consume() -> None:
        async for event in retrying.stream(make_request()):
            received.append(event)
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    loop = asyncio.get_running_loop()
    cancelled_at = loop.time()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    await asyncio.wait_for(fake_openai.disconnected.wait(), 2)
    assert fake_openai.disconnected_at is not None
    assert fake_openai.disconnected_at - cancelled_at < 0.5
    assert fake_openai.disconnects == 1
    assert len(fake_openai.requests) == 1
    assert received[0] == TextDelta("word ")


async def test_abandoning_the_iteration_closes_the_connection(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake_openai.script(StreamReply(completion_chunks("word " * 200), delay=0.05))
    events = model.stream(make_request())

    assert await anext(events) == TextDelta("word ")
    await events.aclose()  # type: ignore[attr-defined]

    await asyncio.wait_for(fake_openai.disconnected.wait(), 2)
    assert fake_openai.disconnects == 1


class _RetryLogged(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.set()


async def test_cancelling_during_backoff_is_not_retried(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake_openai.script(ErrorReply(503, "Overloaded.", headers={"Retry-After": "30"}), success())
    retrying = RetryingModel(model, base_delay=0.01)
    logged = _RetryLogged()
    logging.getLogger("app.models.retry").addHandler(logged)
    try:
        task = asyncio.create_task(collect(retrying.stream(make_request())))
        await asyncio.wait_for(logged.seen.wait(), 5)
    finally:
        logging.getLogger("app.models.retry").removeHandler(logged)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    assert len(fake_openai.requests) == 1


# -- transport failures -----------------------------------------------------------------------


async def test_read_timeout_is_transient(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(StreamReply(completion_chunks("Too slow."), delay=1.0))
    async with OpenAIChatModel(MODEL, base_url=fake_openai.base_url, timeout=0.2) as model:
        with pytest.raises(TransientModelError) as caught:
            await collect(model.stream(make_request()))

    assert caught.value.message == f"{model.name} timed out"


async def test_connection_refused_is_transient() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with OpenAIChatModel(MODEL, base_url=f"http://127.0.0.1:{port}/v1") as model:
        with pytest.raises(TransientModelError) as caught:
            await collect(model.stream(make_request()))

    assert caught.value.message.startswith(f"{model.name}: connection failed or was lost (")


async def test_error_event_inside_the_stream_is_transient(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    error = {"error": {"message": "The server had an error.", "type": "server_error"}}
    broken = [*completion_chunks("Two plus three.")[:2], error]
    fake_openai.script(StreamReply(broken))

    with pytest.raises(TransientModelError) as caught:
        await collect(model.stream(make_request()))

    assert caught.value.message == f"{model.name} failed mid-response: The server had an error."


async def test_stream_ending_before_the_finish_is_transient(
    fake_openai: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake_openai.script(StreamReply(completion_chunks("Two plus three.")[:3]))

    with pytest.raises(TransientModelError) as caught:
        await collect(model.stream(make_request()))

    assert caught.value.message == (
        f"{model.name}: the response stream ended before the response finished"
    )


@pytest.mark.parametrize("garbage", [b"data: {not json\n\n", b"data: [1, 2]\n\n"])
async def test_malformed_chunk_is_a_model_error(
    fake_openai: FakeOpenAI, model: OpenAIChatModel, garbage: bytes
) -> None:
    fake_openai.script(StreamReply([completion_chunks("Two.")[0], garbage]))

    with pytest.raises(ModelError) as caught:
        await collect(model.stream(make_request()))

    assert type(caught.value) is ModelError
    assert caught.value.message.startswith(f"{model.name} sent a malformed stream chunk: ")


# -- configuration ----------------------------------------------------------------------------


def test_retry_after_header_forms() -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)

    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "2"}) == 0.25
    assert 28 < (retry_after_seconds({"retry-after": later}) or 0) <= 30
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_model_from_env_is_none_when_unset() -> None:
    assert openai_model_from_env({}) is None
    assert openai_model_from_env({"MODEL_NAME": "", "OTHER": "x"}) is None


def test_model_from_env_needs_a_model_name() -> None:
    with pytest.raises(DefinitionError, match="MODEL_NAME"):
        openai_model_from_env({"MODEL_BASE_URL": "http://127.0.0.1:1/v1"})


async def test_model_from_env_streams_from_the_configured_server(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(ErrorReply(500, "Oops."), success())
    model = openai_model_from_env(
        {"MODEL_BASE_URL": fake_openai.base_url, "MODEL_API_KEY": "sk-env", "MODEL_NAME": MODEL}
    )
    assert isinstance(model, RetryingModel)
    assert isinstance(model.model, OpenAIChatModel)
    model.base_delay = 0.01
    try:
        assert await collect(model.stream(make_request())) == SUCCESS_EVENTS
    finally:
        await model.aclose()

    assert [request.headers["authorization"] for request in fake_openai.requests] == [
        "Bearer sk-env",
        "Bearer sk-env",
    ]


def test_invalid_configuration_is_a_definition_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(DefinitionError, match="Missing credentials"):
        OpenAIChatModel(MODEL)
    with pytest.raises(DefinitionError):
        OpenAIChatModel("")
    with pytest.raises(DefinitionError):
        OpenAIChatModel(MODEL, base_url="http://127.0.0.1:1/v1", timeout=0)

"""RetryingModel over in-memory models: what is retried, how long it waits, what passes through."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from app.errors import DefinitionError, ProviderError, ScriptExhaustedError, TransientModelError
from app.models import (
    Model,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    RetryStarted,
    ScriptedModel,
    TextDelta,
    ToolCall,
    ToolCallReady,
    Usage,
)
from app.models.retry import RetryingModel
from app.protocol import UserMessage

REQUEST = ModelRequest(
    session_id="s1",
    agent_type="adder",
    system_prompt="",
    messages=(UserMessage(content="Hi"),),
    tools=(),
    step=1,
)

Attempt = Callable[[], AsyncIterator[ModelEvent]]


class AttemptsModel(Model):
    """Plays one scripted attempt per call and records which attempts were closed."""

    def __init__(self, *attempts: Attempt) -> None:
        self.attempts = list(attempts)
        self.calls = 0
        self.closed: list[int] = []

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.calls += 1
        return self._play(self.calls, self.attempts[self.calls - 1])

    async def _play(self, number: int, attempt: Attempt) -> AsyncIterator[ModelEvent]:
        try:
            async for event in attempt():
                yield event
        finally:
            self.closed.append(number)


def fails_after(events: list[ModelEvent], error: Exception) -> Attempt:
    async def attempt() -> AsyncIterator[ModelEvent]:
        for event in events:
            yield event
        raise error

    return attempt


def answers(events: list[ModelEvent]) -> Attempt:
    async def attempt() -> AsyncIterator[ModelEvent]:
        for event in events:
            yield event

    return attempt


ANSWER: list[ModelEvent] = [
    TextDelta("Five."),
    ToolCallReady(ToolCall("add", {"a": 2, "b": 3}, id="c1")),
    Usage(3, 2),
]


async def collect(model: Model) -> list[ModelEvent]:
    return [event async for event in model.stream(REQUEST)]


async def test_passes_a_successful_call_through() -> None:
    inner = AttemptsModel(answers(ANSWER))

    assert await collect(RetryingModel(inner, base_delay=0.01)) == ANSWER
    assert inner.calls == 1


async def test_retries_a_transient_failure_before_and_during_the_stream() -> None:
    inner = AttemptsModel(
        fails_after([], TransientModelError("503")),
        fails_after([TextDelta("Fi")], TransientModelError("dropped")),
        answers(ANSWER),
    )

    events = await collect(RetryingModel(inner, base_delay=0.01))

    # Only the attempt that had streamed something is announced as restarted.
    assert events == [TextDelta("Fi"), RetryStarted(3, "dropped"), *ANSWER]
    assert inner.calls == 3
    assert inner.closed == [1, 2, 3]


async def test_retries_a_transient_error_raised_when_the_call_starts() -> None:
    class RefusesOnce(Model):
        calls = 0

        def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            self.calls += 1
            if self.calls == 1:
                raise TransientModelError("not yet")
            return answers(ANSWER)()

    inner = RefusesOnce()

    assert await collect(RetryingModel(inner, base_delay=0.01)) == ANSWER
    assert inner.calls == 2


async def test_gives_up_naming_the_attempts_and_the_last_error() -> None:
    inner = AttemptsModel(
        fails_after([], TransientModelError("first")),
        fails_after([], TransientModelError("second", retry_after=3.0)),
    )
    retrying = RetryingModel(inner, max_attempts=2, base_delay=0.01, max_retry_after=0.01)

    with pytest.raises(TransientModelError) as caught:
        await collect(retrying)

    assert caught.value.message == "AttemptsModel gave up after 2 attempts; last error: second"
    assert caught.value.retry_after == 3.0
    assert isinstance(caught.value.__cause__, TransientModelError)


@pytest.mark.parametrize(
    "error",
    [ProviderError("HTTP 401: bad key"), ScriptExhaustedError(), ValueError("a bug")],
)
async def test_other_errors_pass_through_at_once(error: Exception) -> None:
    inner = AttemptsModel(fails_after([TextDelta("x")], error), answers(ANSWER))

    with pytest.raises(type(error)) as caught:
        await collect(RetryingModel(inner, base_delay=0.01))

    assert caught.value is error
    assert inner.calls == 1


async def test_scripted_model_errors_raised_on_call_pass_through() -> None:
    retrying = RetryingModel(ScriptedModel([]), base_delay=0.01)

    with pytest.raises(ScriptExhaustedError):
        await collect(retrying)


async def test_cancellation_mid_stream_is_not_retried() -> None:
    started = asyncio.Event()

    async def slow() -> AsyncIterator[ModelEvent]:
        yield TextDelta("a")
        started.set()
        await asyncio.sleep(30)
        yield TextDelta("b")

    inner = AttemptsModel(slow, answers(ANSWER))
    task = asyncio.create_task(collect(RetryingModel(inner, base_delay=0.01)))
    await asyncio.wait_for(started.wait(), 5)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    assert inner.calls == 1
    assert inner.closed == [1]


async def test_abandoning_the_stream_closes_the_inner_one() -> None:
    inner = AttemptsModel(answers([TextDelta("a"), TextDelta("b")]))
    events = RetryingModel(inner).stream(REQUEST)

    assert await anext(events) == TextDelta("a")
    await events.aclose()  # type: ignore[attr-defined]

    assert inner.closed == [1]


def test_backoff_is_exponential_jittered_and_bounded() -> None:
    retrying = RetryingModel(ScriptedModel([]), base_delay=0.5, max_delay=4.0)

    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 4.0), (9, 4.0)]:
        waits = [retrying.delay(attempt, None) for _ in range(200)]
        assert all(ceiling / 2 <= wait <= ceiling for wait in waits)
        assert len(set(waits)) > 1


def test_retry_after_is_honoured_up_to_its_cap() -> None:
    retrying = RetryingModel(ScriptedModel([]), base_delay=0.5, max_retry_after=20.0)

    assert retrying.delay(1, 7.0) == 7.0
    assert retrying.delay(1, 0.0) == 0.0
    assert retrying.delay(3, 120.0) == 20.0


@pytest.mark.parametrize(
    "options",
    [{"max_attempts": 0}, {"base_delay": -1.0}, {"max_delay": -1.0}, {"max_retry_after": -1.0}],
)
def test_invalid_options_are_definition_errors(options: dict[str, float]) -> None:
    with pytest.raises(DefinitionError):
        RetryingModel(ScriptedModel([ModelResponse("x")]), **options)  # type: ignore[arg-type]

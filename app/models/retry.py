"""Retry a transiently failed model call, so a 429, a 503 or a dropped stream does not end a run.

`RetryingModel` wraps any `Model`. On a `TransientModelError`, raised before or during the stream,
it waits (jittered exponential backoff, or the provider's `retry_after`, both bounded) and makes
the whole call again. Every other error, and a cancellation (an interrupt), passes through at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from app.backoff import backoff_delay
from app.errors import DefinitionError, TransientModelError
from app.models.base import Model, ModelEvent, ModelRequest, RetryStarted, close_stream

__all__ = ["RetryingModel"]

logger = logging.getLogger(__name__)


class RetryingModel(Model):
    """Makes a call to `model` again, from scratch, when it fails transiently.

    Attempt `n` (from 1) that fails waits about `base_delay * 2 ** (n - 1)` seconds, at most
    `max_delay`, jittered between half and all of it; a `retry_after` the provider gave is
    honoured instead, up to `max_retry_after`. After `max_attempts` the call fails with a
    `TransientModelError` naming the attempts and the last error.

    When an attempt fails after it yielded events, `RetryStarted` is yielded before the next
    attempt, so the consumer drops what it had (the runtime commits only the last attempt's
    response; deltas already in the live stream stay there).
    """

    def __init__(
        self,
        model: Model,
        *,
        max_attempts: int = 4,
        base_delay: float = 0.5,
        max_delay: float = 8.0,
        max_retry_after: float = 60.0,
    ) -> None:
        if max_attempts < 1:
            raise DefinitionError(f"max_attempts must be >= 1, got {max_attempts}")
        if base_delay < 0 or max_delay < 0 or max_retry_after < 0:
            raise DefinitionError("base_delay, max_delay and max_retry_after must be >= 0")
        self.model = model
        """The wrapped model."""
        self.max_attempts = max_attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.max_retry_after = max_retry_after

    @property
    def name(self) -> str:
        """The wrapped model's name."""
        return self.model.name

    async def aclose(self) -> None:
        """Close the wrapped model when it holds resources (an HTTP connection pool)."""
        aclose = getattr(self.model, "aclose", None)
        if aclose is not None:
            await aclose()

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed attempt `attempt` (from 1)."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        return backoff_delay(attempt, self.base_delay, self.max_delay)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the wrapped model's answer, starting it again after a transient failure."""
        streamed = False
        for attempt in range(1, self.max_attempts + 1):
            events: AsyncIterator[ModelEvent] | None = None
            try:
                events = self.model.stream(request)
                async for event in events:
                    streamed = True
                    yield event
                return
            except TransientModelError as exc:
                if attempt == self.max_attempts:
                    raise TransientModelError(
                        f"{self.name} gave up after {_attempts(attempt)}; "
                        f"last error: {exc.message}",
                        retry_after=exc.retry_after,
                    ) from exc
                wait = self.delay(attempt, exc.retry_after)
                failure = exc.message
                logger.warning(
                    "%s failed (attempt %d of %d), retrying in %.2fs: %s",
                    self.name,
                    attempt,
                    self.max_attempts,
                    wait,
                    exc.message,
                )
            finally:
                await close_stream(events)
            await asyncio.sleep(wait)
            if streamed:
                streamed = False
                yield RetryStarted(attempt + 1, failure)
        raise AssertionError("unreachable")  # pragma: no cover


def _attempts(count: int) -> str:
    return f"{count} attempt" if count == 1 else f"{count} attempts"

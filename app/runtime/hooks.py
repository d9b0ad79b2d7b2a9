"""Calling lifecycle hooks: sync or async, and never able to fail the run they observe."""

from __future__ import annotations

import inspect
import logging
from typing import Any

from app.agents.agent import Hook

logger = logging.getLogger(__name__)


async def fire(hook: Hook | None, *args: Any) -> None:
    """Call `hook(*args)` if it is set; an exception in it is logged and swallowed."""
    if hook is None:
        return
    try:
        result = hook(*args)
        if inspect.isawaitable(result):
            await result
    except Exception:
        logger.exception("Lifecycle hook %s raised", getattr(hook, "__name__", hook))

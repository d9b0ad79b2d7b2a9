"""LLM models: the streaming `Model` interface, the deterministic test models and real adapters."""

from typing import TYPE_CHECKING

from app.models.base import (
    Model,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    RetryStarted,
    TextDelta,
    ToolCallReady,
    ToolSpec,
    Usage,
)
from app.models.retry import RetryingModel
from app.models.testing import FunctionModel, ScriptedModel
from app.protocol import ToolCall

if TYPE_CHECKING:
    from app.models.openai import OpenAIChatModel, openai_model_from_env


def __getattr__(name: str) -> object:
    # The openai SDK takes about half a second to import: load it only when a real model is used.
    if name in ("OpenAIChatModel", "openai_model_from_env"):
        from app.models import openai

        return getattr(openai, name)
    raise AttributeError(f"module 'app.models' has no attribute {name!r}")


__all__ = [
    "FunctionModel",
    "Model",
    "ModelEvent",
    "ModelRequest",
    "ModelResponse",
    "OpenAIChatModel",
    "RetryStarted",
    "RetryingModel",
    "ScriptedModel",
    "TextDelta",
    "ToolCall",
    "ToolCallReady",
    "ToolSpec",
    "Usage",
    "openai_model_from_env",
]

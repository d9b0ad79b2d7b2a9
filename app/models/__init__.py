"""LLM models: the streaming `Model` interface, the deterministic test models and real adapters."""

from app.models.base import (
    Model,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCallReady,
    ToolSpec,
    Usage,
)
from app.models.testing import FunctionModel, ScriptedModel
from app.protocol import ToolCall

__all__ = [
    "FunctionModel",
    "Model",
    "ModelEvent",
    "ModelRequest",
    "ModelResponse",
    "ScriptedModel",
    "TextDelta",
    "ToolCall",
    "ToolCallReady",
    "ToolSpec",
    "Usage",
]

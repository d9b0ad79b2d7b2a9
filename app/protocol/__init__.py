"""Wire shapes only, no I/O: messages, stream chunks, session references and API bodies.

This package sits at the bottom of the import graph and imports nothing else of ours.
"""

from app.protocol.chunks import (
    CHUNK_ADAPTER,
    BaseChunk,
    Chunk,
    ErrorChunk,
    InterruptedChunk,
    OutputChunk,
    RedoReason,
    StepRedoChunk,
    SubagentEndChunk,
    SubagentStartChunk,
    TextDeltaChunk,
    ToolEndChunk,
    ToolPendingChunk,
    ToolStartChunk,
    chunk_from_json,
    chunk_to_json,
)
from app.protocol.messages import (
    MESSAGE_ADAPTER,
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from app.protocol.session import (
    STOPPED_STATUSES,
    RefMode,
    RemoteRef,
    SessionStatus,
    SubSessionRef,
)

__all__ = [
    "CHUNK_ADAPTER",
    "MESSAGE_ADAPTER",
    "STOPPED_STATUSES",
    "AssistantMessage",
    "BaseChunk",
    "Chunk",
    "ErrorChunk",
    "InterruptedChunk",
    "Message",
    "OutputChunk",
    "RedoReason",
    "RefMode",
    "RemoteRef",
    "SessionStatus",
    "StepRedoChunk",
    "SubSessionRef",
    "SubagentEndChunk",
    "SubagentStartChunk",
    "SystemMessage",
    "TextDeltaChunk",
    "ToolCall",
    "ToolEndChunk",
    "ToolMessage",
    "ToolPendingChunk",
    "ToolStartChunk",
    "UserMessage",
    "chunk_from_json",
    "chunk_to_json",
]

"""Transports to other agent servers, for remote sub-agents."""

from app.transport.http import HttpRemoteAgentTransport

__all__ = ["HttpRemoteAgentTransport"]

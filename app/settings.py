"""Server settings, read from the environment (DESIGN.md section 4) with documented defaults."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./data/agent-server.db"
DEFAULT_AGENT_MODULE = "app.demo:registry"


class Settings(BaseSettings):
    """Everything the server reads from its environment. Names are the upper-cased fields."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", frozen=True)

    database_url: str = DEFAULT_DATABASE_URL
    """SQLAlchemy async URL of the store (`sqlite+aiosqlite:///...`, `postgresql+asyncpg://...`,
    or `memory://` for a throwaway in-process store)."""
    agent_module: str = DEFAULT_AGENT_MODULE
    """`package.module:attribute` naming the `AgentRegistry` to serve."""
    api_key: SecretStr | None = None
    """When set, every endpoint but health needs `Authorization: Bearer <key>`."""
    server_id: str | None = None
    """This server's name in session leases; keep it across restarts to resume at once."""
    lease_seconds: float = Field(15.0, gt=0)
    """How long a session's lease lasts without renewal before another server may take it."""
    takeover_interval: float = Field(5.0, gt=0)
    """How often to look for sessions whose owner is gone."""
    stream_heartbeat: float = Field(15.0, gt=0)
    """Seconds an SSE stream may stay quiet before it sends a comment heartbeat."""
    stream_poll: float = Field(1.0, gt=0)
    """Longest wait for a stream's wake-up before re-reading the store."""
    flush_delay: float = Field(0.005, ge=0)
    """Longest time a chunk waits before it is committed (group commit)."""
    max_body_bytes: int = Field(1_048_576, gt=0)
    """Largest request body accepted."""
    chunk_retention_hours: float = Field(168.0, gt=0)
    """How long the chunks of finished streams are kept."""
    retention_interval: float = Field(3600.0, gt=0)
    """How often finished streams older than the retention are cleaned up."""

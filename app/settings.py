"""Server settings, read from the environment with documented defaults (see the README)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./data/agent-server.db"
DEFAULT_AGENT_MODULE = "app.demo:registry"

_SCHEMES = {
    "postgres": "postgresql+asyncpg",
    "postgresql": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
}


def normalise_database_url(url: str) -> str:
    """`url` in the form the store takes: the `postgres://` and `postgresql://` URLs platforms
    hand out become `postgresql+asyncpg://` (libpq's `sslmode` becomes asyncpg's `ssl`), and
    `sqlite://` becomes `sqlite+aiosqlite://`. Anything else but `memory://` is refused with a
    `ValueError` that says what is accepted."""
    if url.startswith("memory:"):
        return url
    scheme = url.partition("://")[0]
    driver = _SCHEMES.get(scheme.lower())
    if driver is None:
        raise ValueError(
            f"unsupported database URL scheme {scheme!r}: use postgresql://user:password@host/db "
            "(or postgres://, postgresql+asyncpg://), sqlite+aiosqlite:///path/to/file.db "
            "or memory://"
        )
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ValueError(f"invalid database URL: {exc}") from exc
    parsed = parsed.set(drivername=driver)
    if driver == "postgresql+asyncpg" and "sslmode" in parsed.query:
        query = dict(parsed.query)
        query.setdefault("ssl", query.pop("sslmode"))
        parsed = parsed.set(query=query)
    if parsed == make_url(url):
        return url  # as given: no rendering that could change it
    return parsed.render_as_string(hide_password=False)


class Settings(BaseSettings):
    """Everything the server reads from its environment. Names are the upper-cased fields."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", frozen=True)

    database_url: str = DEFAULT_DATABASE_URL
    """SQLAlchemy async URL of the store (`sqlite+aiosqlite:///...`, `postgresql+asyncpg://...`,
    or `memory://` for a throwaway in-process store); `postgres://` and `postgresql://` URLs are
    taken as `postgresql+asyncpg://`."""
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
    background_concurrency: int = Field(5, ge=1, le=10_000)
    """How many background `subagent` sessions run at once, across every server on the store
    (give every replica the same value)."""
    background_poll: float = Field(0.5, gt=0)
    """How often a server with background sessions waiting for a slot looks for one that
    another server freed."""
    subagent_timeout: float | None = Field(None, gt=0)
    """Seconds a `subagent` child may run when neither its call nor its agent says."""
    stream_heartbeat: float = Field(15.0, gt=0)
    """Seconds an SSE stream may stay quiet before it sends a comment heartbeat."""
    stream_poll: float = Field(1.0, gt=0)
    """Longest wait for a stream's wake-up before re-reading the store."""
    flush_delay: float = Field(0.005, ge=0)
    """Longest time a chunk waits before it is committed (group commit)."""
    database_timeout: float = Field(15.0, gt=0)
    """Seconds a PostgreSQL statement may run before it is cancelled (a dead or partitioned
    database fails writes and requests within about this long instead of hanging them)."""
    database_connect_timeout: float = Field(5.0, gt=0)
    """Seconds to open a PostgreSQL connection."""
    shutdown_timeout: float = Field(10.0, gt=0)
    """Seconds a stopping server waits for open requests (SSE streams included) to end, and
    then again for its runs to stop and its writes to land."""
    max_body_bytes: int = Field(1_048_576, gt=0)
    """Largest request body accepted."""
    chunk_retention_hours: float = Field(168.0, gt=0)
    """How long the chunks of finished streams are kept."""
    retention_interval: float = Field(3600.0, gt=0)
    """How often finished streams older than the retention are cleaned up."""
    cors_origins: str = ""
    """Origins whose pages may call the API from a browser, comma-separated (`*` for any);
    empty: no cross-origin access."""
    cors_allow_credentials: bool = False
    """Whether cross-origin requests may carry cookies (not needed for the bearer key or stream
    tokens; refused with `CORS_ORIGINS=*`)."""
    stream_token_seconds: float = Field(600.0, gt=0, le=86_400)
    """How long a stream token (`POST /stream/{streamId}/token`) opens its stream for."""

    @property
    def cors_origin_list(self) -> list[str]:
        """`cors_origins` as a list of origins."""
        return [origin.strip() for origin in self.cors_origins.split(",") if origin.strip()]

    log_format: Literal["text", "json"] = "text"
    """How the server writes log lines: readable text, or one JSON object per line."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    """The least severe log lines written."""
    web_concurrency: int = Field(1, ge=1)
    """Worker processes `python -m app.serve` runs (several need PostgreSQL)."""

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        return normalise_database_url(value)

    @field_validator("log_format", "log_level", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        lowered = value.strip().lower()
        return lowered if lowered in ("text", "json") else lowered.upper()

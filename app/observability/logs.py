"""Log lines an operator can search: readable by default, one JSON object per line on demand.

Every record written inside a run gets the run's `session_id`, `root_id`, `agent_type`, `step`
and `trace_id` (from `context.current_run`), whoever logs it. Figures a line carries (a run's
duration, tokens, ...) go in `extra={"fields": {...}}`: JSON lines hold them as keys, readable
lines as `key=value` after the message.

`configure_logging` is for the server process (`app.main`, `app.serve`), not for a library
user's `create_app`: it owns the root logger's handler, and in JSON mode uvicorn's too, so that
every line the process writes is JSON.
"""

from __future__ import annotations

import datetime
import logging
import sys
from typing import Any, Literal

import orjson

from app.observability.context import current_run

LogFormat = Literal["text", "json"]
"""How log lines are written."""

UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")
QUIET_LOGGERS = ("alembic.runtime.plugins",)
"""Loggers whose INFO lines say nothing to an operator (alembic's plugin set-up, per start)."""
_CONTEXT_FIELDS = ("session_id", "root_id", "agent_type", "step", "trace_id")
_HANDLER_NAME = "agent-server"


class RunContextFilter(logging.Filter):
    """Stamps a record with the fields of the run it was written in (nothing outside runs).
    On the handler, so it costs nothing for records no handler writes."""

    def filter(self, record: logging.LogRecord) -> bool:
        scope = current_run.get()
        if scope is not None and not hasattr(record, "session_id"):
            for name, value in scope.fields().items():
                setattr(record, name, value)
        return True


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name in _CONTEXT_FIELDS:
        value = getattr(record, name, None)
        if value is not None:
            fields[name] = value
    extra = getattr(record, "fields", None)
    if isinstance(extra, dict):
        fields.update((name, value) for name, value in extra.items() if value is not None)
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the run's
    fields, the line's own fields, and the exception's traceback as one string."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(_fields(record))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=str).decode()


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message key=value ...` (local time), the run's fields first."""

    def format(self, record: logging.LogRecord) -> str:
        # Built directly rather than through a `%` format and `formatTime` (strftime): a third
        # of the cost of a line, and a server writes two per run.
        moment = datetime.datetime.fromtimestamp(record.created)
        line = (
            f"{moment.isoformat(sep=' ', timespec='milliseconds')} {record.levelname} "
            f"{record.name}: {record.getMessage()}"
        )
        fields = _fields(record)
        if fields:
            line += " " + " ".join(f"{name}={_text(value)}" for name, value in fields.items())
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


def _text(value: object) -> str:
    text = str(value)
    return repr(text) if (" " in text or not text) else text


def make_handler(log_format: LogFormat, stream: Any = None) -> logging.Handler:
    """A stream handler (stderr by default) writing `log_format` lines with the run's fields."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(RunContextFilter())
    return handler


def configure_logging(
    log_format: LogFormat = "text", level: str | int = "INFO", *, stream: Any = None
) -> None:
    """Write this process's log lines (ours, the agents' and, as JSON, uvicorn's) to stderr (or
    `stream`) in `log_format`, at `level` and above. Calling it again replaces what it set up."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = make_handler(log_format, stream)
    root.addHandler(handler)
    # The logging HOWTO's optimisations: no line shows the caller's file and line, the thread
    # or the process, so records need not look them up (a third of a run line's cost).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    root.setLevel(level.upper() if isinstance(level, str) else level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(root.level, logging.WARNING))
    if log_format == "json":
        # uvicorn's own loggers do not propagate: give them the JSON handler in place of theirs.
        for name in UVICORN_LOGGERS:
            logger = logging.getLogger(name)
            if logger.handlers or not logger.propagate:
                logger.handlers = [handler]


def fatal_line(message: str, log_format: str | None = None) -> str:
    """The single line a configuration mistake prints before the process exits."""
    if log_format == "json":
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        line = {"time": now, "level": "CRITICAL", "logger": "app", "message": message}
        return orjson.dumps(line).decode()
    return f"agent-server: {message}"

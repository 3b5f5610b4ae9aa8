"""structlog set-up: readable in a terminal, one JSON object per line everywhere else.

Under systemd (``JOURNAL_STREAM`` set) or when stderr is not a TTY, logs are JSON so that journald
and log shippers can parse them; in a terminal they are coloured key=value lines. ``log.format``
forces either. Secrets never reach a log: the processor below masks any key that looks like one.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog

_SECRET_KEYS = ("password", "secret", "token", "credential")
_debug = False


def debug_enabled() -> bool:
    """Hot paths skip building debug events entirely unless debug logging is on."""
    return _debug


def _mask_secrets(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    for key in list(event):
        if any(word in key.lower() for word in _SECRET_KEYS):
            event[key] = "***"
    return event


def _drop_connection_tracebacks(record: logging.LogRecord) -> bool:
    """Drop the driver's tracebacks for "could not connect": casque reports that itself, in one line."""
    if not record.name.startswith("cassandra") or not record.exc_info:
        return True
    from cassandra.cluster import NoHostAvailable

    return not isinstance(record.exc_info[1], (NoHostAvailable, OSError))


def use_json(fmt: str = "auto", stream: Any = None) -> bool:
    """JSON unless the format is 'console', or 'auto' on a TTY outside systemd."""
    if fmt in ("json", "console"):
        return fmt == "json"
    stream = stream or sys.stderr
    return bool(os.environ.get("JOURNAL_STREAM")) or not stream.isatty()


def configure_logging(level: str = "info", fmt: str = "auto", stream: Any = None) -> None:
    """Configure structlog (and stdlib logging, which the Cassandra driver uses) once per process."""
    global _debug
    stream = stream or sys.stderr
    numeric = logging.getLevelName(level.upper())
    _debug = numeric <= logging.DEBUG
    # Any: structlog types its renderers and exception processors as distinct protocols, and both branches
    # below pick one of each; the processor lists are plain callables to it
    renderer: Any
    exc: Any
    if use_json(fmt, stream):
        renderer = structlog.processors.JSONRenderer()
        exc = structlog.processors.format_exc_info
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty())
        exc = structlog.dev.set_exc_info
    shared: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _mask_secrets,
    ]
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, *shared, exc, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    # Third-party stdlib logging (the Cassandra driver) goes through the same renderer, so that
    # under systemd every line is JSON with a level, not a stray traceback.
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, exc, renderer],
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        )
    )
    handler.addFilter(_drop_connection_tracebacks)
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(max(numeric, logging.WARNING))
    # The driver logs every failed connection attempt with a traceback; casque reports the same
    # failure as one line naming the fix, so only the driver's errors get through.
    logging.getLogger("cassandra").setLevel(logging.ERROR)


def get_logger(name: str = "casque", **bound: Any) -> Any:
    """A lazy logger: safe at import time, it picks up configure_logging() on first use."""
    return structlog.get_logger(name, **bound)

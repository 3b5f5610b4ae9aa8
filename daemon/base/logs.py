"""structlog set-up: readable in a terminal, one JSON object per line everywhere else.

Under systemd (``JOURNAL_STREAM`` set) or when stderr is not a TTY, logs are JSON so that journald
and log shippers can parse them; in a terminal they are coloured key=value lines. ``log.format``
forces either. Secrets never reach a log: the processor below masks any key that looks like one.

That is for casque's own processes: every ``casque`` command calls ``configure_logging`` first.
Used as a library (``Casque.connect()`` in someone else's process), casque configures nothing:
until structlog is configured, ``get_logger``'s loggers hand each event to the standard library's
``logging``, as a record of the logger of the same name (``casque.hints``, ``casque.consumer``, ...)
whose message is the event and its key=value pairs. So the host's logging configuration decides
what is shown and where, and with none nothing below WARNING is printed (Python's last-resort
handler prints warnings and errors to stderr). Importing casque sets no structlog configuration
and no logging handler or level in the host.
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
    """Hot paths skip building debug events entirely unless debug logging is on (as a library:
    unless the host's logging lets casque's debug records through)."""
    if structlog.is_configured():
        return _debug
    return logging.getLogger("casque").isEnabledFor(logging.DEBUG)


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


def _as_stdlib_call(_: Any, __: str, event: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The event as the arguments of one stdlib logging call: the message ``event key=value ...``;
    a traceback or stack goes as ``exc_info``/``stack_info``, for the host's formatter to render."""
    call = {"exc_info": event.pop("exc_info", None), "stack_info": event.pop("stack_info", False)}
    words = [str(event.pop("event", ""))]
    for key, value in event.items():
        plain = isinstance(value, str) and value and not any(c.isspace() or c in "='\"" for c in value)
        words.append(f"{key}={value if plain else repr(value)}")
    return (" ".join(words),), call


# As a library: the host's logging level decides first (so a dropped debug event costs one check),
# then the same context and masking as configure_logging's, then one stdlib call.
_LIBRARY_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,
    structlog.contextvars.merge_contextvars,
    _mask_secrets,
    _as_stdlib_call,
]


class _Logger:
    """What ``get_logger`` returns: safe at import time, it decides at each use where events go.
    Once structlog is configured (``configure_logging`` in casque's commands; also a host that
    configures structlog itself, or ``structlog.testing.capture_logs``), through that configuration;
    until then through stdlib ``logging``'s logger of the same name (the module docstring)."""

    __slots__ = ("_configured", "_library", "_name", "_values")

    def __init__(self, name: str, values: dict[str, Any]) -> None:
        self._name = name
        self._values = values
        self._configured = structlog.get_logger(name, **values)  # structlog's lazy proxy: reads the config per use
        self._library: Any = None

    def __reduce__(self) -> tuple[Any, tuple[str, dict[str, Any]]]:
        """Pickled by name (Spark ships the pipeline's functions, and the loggers they close over, to its workers)."""
        return _Logger, (self._name, self._values)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # a slot not set yet, or a protocol lookup (copy, pickle): never the logger's
            raise AttributeError(attr)
        if structlog.is_configured():
            return getattr(self._configured, attr)
        if self._library is None:
            self._library = structlog.stdlib.BoundLogger(
                logging.getLogger(self._name), _LIBRARY_PROCESSORS, dict(self._values)
            )
        return getattr(self._library, attr)


def get_logger(name: str = "casque", **bound: Any) -> Any:
    """A lazy logger: safe at import time, it picks up configure_logging() on first use, and
    logs through stdlib ``logging`` under ``name`` where nothing configured structlog."""
    return _Logger(name, bound)

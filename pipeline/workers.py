"""One connected casque client per Python process, for code that runs inside Spark tasks.

Jobs that must behave exactly like the engine (load, the live-row reads of stats, the purge of
archive) run the engine's own code on the executors, and that code talks to Cassandra through the
Python driver. Connecting costs a second or so, and Spark reuses its Python workers across tasks
(``spark.python.worker.reuse``, on by default), so each worker process connects once and keeps the
client, with one event loop to run its coroutines on. The driver process uses the same cache.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from daemon.base.config import Settings
from daemon.base.logs import configure_logging
from daemon.engine.client import Casque

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_clients: dict[str, Casque] = {}


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on this process's loop (tasks run one at a time per worker)."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
        loop = _loop
    return loop.run_until_complete(coro)


def client(settings: Settings) -> Casque:
    """This process's client for ``settings`` (connected on first use, then kept)."""
    key = _identity(settings)
    found = _clients.get(key)
    if found is None:
        if not _clients:
            configure_logging(settings.log.level, settings.log.format)
        found = run(Casque.connect(settings))
        _clients[key] = found
    return found


def close_all() -> None:
    """Close every cached client (the driver calls this when a job ends)."""
    while _clients:
        _, cq = _clients.popitem()
        run(cq.close())


def _identity(settings: Settings) -> str:
    c = settings.cassandra
    return f"{','.join(c.contact_points)}:{c.port}/{c.keyspace}/{c.username}/{c.consistency}"

"""Starting a process that serves from Cassandra (``casque run``, ``casque serve``): one way for both.

Connecting, preparing the statements and the first reads are one attempt. While Cassandra does not answer (down,
a node frozen, a timeout) the attempt is logged in one line (``cassandra_unavailable``) and made again with capped
exponential backoff, until it succeeds or the process is asked to stop. A configuration Cassandra refuses
(``StorageRefused``: credentials, a keyspace missing or older than the code) is raised at once: the CLI prints it
and exits 5, and the restart that follows reads the fixed configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from daemon.base.clock import SYSTEM_CLOCK, Clock
from daemon.base.config import Settings
from daemon.base.errors import CasqueError, StorageRefused, StorageUnavailable
from daemon.base.logs import get_logger
from daemon.engine.client import Casque
from daemon.service.sdnotify import Notifier

log = get_logger("casque.startup")
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0


async def start_when_ready(
    settings: Settings,
    first: Callable[[Casque], Awaitable[None]],
    stop: asyncio.Event,
    notifier: Notifier,
    clock: Clock = SYSTEM_CLOCK,
) -> Casque | None:
    """A connected client on which ``first`` (the process's first reads) has succeeded; None if ``stop`` was set
    while waiting for Cassandra. A failed attempt's client is closed before the next."""
    delay = BACKOFF_FIRST_S
    while True:
        try:
            return await _attempt(settings, clock, first)
        except StorageRefused:
            raise
        except StorageUnavailable as exc:
            log.error("cassandra_unavailable", error=str(exc), retry_in=delay)
            notifier.status(f"waiting for Cassandra: {exc}")
        try:
            await asyncio.wait_for(stop.wait(), timeout=delay)
            return None
        except TimeoutError:
            delay = min(delay * 2, BACKOFF_MAX_S)


async def _attempt(settings: Settings, clock: Clock, first: Callable[[Casque], Awaitable[None]]) -> Casque:
    cq = await Casque.connect(settings, clock=clock)
    try:
        await first(cq)
    except BaseException:
        with contextlib.suppress(CasqueError):  # the attempt's own error is the one to report
            await cq.close()
        raise
    return cq

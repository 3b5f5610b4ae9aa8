"""Per-queue marks written in the background, at most once per interval per process.

Sends and receives tell Cassandra "this process used that queue lately" on their hot path: the idle-expiry
activity mark (engine/cluster/activity.py). It may not cost a round trip per call, so it goes through this: a mark
is written only when this process has not written it for the caller's interval, the write is not
awaited by the caller (a lost mark only makes the queue look unused a little earlier, and the next
call after the interval tries again), and at most ``MAX_PENDING`` writes are in flight at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from daemon.base.logs import get_logger
from daemon.base.lru import Lru

log = get_logger("casque.marks")
MAX_PENDING = 256  # mark writes in flight at once; beyond that a mark is skipped (the next call writes)


class ThrottledMarks:
    def __init__(
        self, write: Callable[[str, int], Awaitable[None]], what: str, keep_s: float, limit: int = 10_000
    ) -> None:
        self._write = write
        self._what = what  # named in the warning a failed write logs
        # queue -> when this process last wrote its mark; kept ``keep_s`` (the longest interval), however many: a
        # mark forgotten sooner would be written again at the next call
        self._written: Lru[str, int] = Lru(limit, keep_s=keep_s)
        self._pending: set[asyncio.Task[None]] = set()
        self.writes = 0

    def mark(self, queue: str, now: int, every_ms: int) -> None:
        """Write ``queue``'s mark (at ``now``) unless this process wrote it less than ``every_ms`` ago."""
        last = self._written.get(queue)
        if (last is not None and now - last < every_ms) or len(self._pending) >= MAX_PENDING:
            return
        self._written.put(queue, now)
        task = asyncio.ensure_future(self._run(queue, now))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def last(self, queue: str) -> int | None:
        """When this process last wrote ``queue``'s mark (None: not lately, or the write failed)."""
        return self._written.peek(queue)

    async def _run(self, queue: str, now: int) -> None:
        try:
            await self._write(queue, now)
            self.writes += 1
        except Exception as exc:  # the next call after the interval tries again
            self._written.pop(queue)
            log.warning(f"{self._what}_mark_failed", queue=queue, error=str(exc))

    async def flush(self) -> None:
        """Wait for the marks being written (tests, shutdown)."""
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

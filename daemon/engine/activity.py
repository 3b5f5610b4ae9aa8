"""Marking queues active, cheaply, for idle expiry (engine/expiry.py).

A queue created with ``expire_after`` has a row in ``queue_expiry`` whose ``active_at`` says when
it was last used. Every send and receive calls ``touch``; it writes only when this process has not
written that queue's mark for ``min(5 min, expire_after / 4)``, so a busy queue costs at most one
write per few minutes per process, and a queue without expiry costs nothing (its settings are
already cached by the send or receive that touched it; no read is made here). The write is not
awaited by the caller: a lost mark only lets the queue look idle a little earlier, and the sweeper
needs ``expire_after`` without one before it acts.
"""

from __future__ import annotations

import asyncio

from daemon.base.clock import Clock
from daemon.base.logs import get_logger
from daemon.base.lru import Lru
from daemon.engine.db import Database
from daemon.engine.queues import QueueStore

log = get_logger("casque.activity")
MARK_EVERY_MS = 300_000
MAX_PENDING = 256  # mark writes in flight at once; beyond that a touch is skipped (the next one writes)


class ActivityMarks:
    def __init__(self, db: Database, keyspace: str, queues: QueueStore, clock: Clock, limit: int = 10_000) -> None:
        self.db = db
        self.queues = queues
        self.clock = clock
        self._mark = db.prepare(f"UPDATE {keyspace}.queue_expiry SET active_at = ? WHERE name = ?")
        self._written: Lru[str, int] = Lru(limit)  # queue -> when this process last wrote its mark
        self._pending: set[asyncio.Task[None]] = set()
        self.writes = 0

    def touch(self, queue: str) -> None:
        """``queue`` was used now: write its mark if this process has not done so lately."""
        qs = self.queues.cached(queue)
        if qs is None or not qs.expire_after_s or len(self._pending) >= MAX_PENDING:
            return
        now = self.clock.now_ms()
        last = self._written.get(queue)
        if last is not None and now - last < min(MARK_EVERY_MS, qs.expire_after_s * 250):
            return
        self._written.put(queue, now)
        task = asyncio.ensure_future(self._write(queue, now))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _write(self, queue: str, now: int) -> None:
        try:
            await self.db.run(self._mark, [now, queue])
            self.writes += 1
        except Exception as exc:  # the next touch after the interval tries again
            self._written.pop(queue)
            log.warning("activity_mark_failed", queue=queue, error=str(exc))

    async def flush(self) -> None:
        """Wait for the marks being written (tests, shutdown)."""
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

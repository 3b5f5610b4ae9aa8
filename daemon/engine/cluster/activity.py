"""Marking queues active, cheaply, for idle expiry (engine/cluster/reaper.py).

A queue created with ``expire_after`` has a row in ``queue_expiry`` whose ``active_at`` says when
it was last used. Every send and receive calls ``touch``; it writes only when this process has not
written that queue's mark for ``min(5 min, expire_after / 4)``, so a busy queue costs at most one
write per few minutes per process, and a queue without expiry costs nothing (its settings are
already cached by the send or receive that touched it; no read is made here). The write is not
awaited by the caller: a lost mark only lets the queue look idle a little earlier, and the sweeper
needs ``expire_after`` without one before it acts.
"""

from __future__ import annotations

from daemon.base.clock import Clock
from daemon.engine.cluster.marks import ThrottledMarks
from daemon.engine.queues.store import QueueStore
from daemon.engine.storage.db import Database

MARK_EVERY_MS = 300_000


class ActivityMarks:
    def __init__(self, db: Database, keyspace: str, queues: QueueStore, clock: Clock, limit: int = 10_000) -> None:
        self.queues = queues
        self.clock = clock
        self._mark = db.prepare(f"UPDATE {keyspace}.queue_expiry SET active_at = ? WHERE name = ?")
        self.db = db
        self.marks = ThrottledMarks(self._write, "activity", limit)

    @property
    def writes(self) -> int:
        return self.marks.writes

    def touch(self, queue: str) -> None:
        """``queue`` was used now: write its mark if this process has not done so lately."""
        qs = self.queues.cached(queue)
        if qs is None or not qs.expire_after_s:
            return
        self.marks.mark(queue, self.clock.now_ms(), min(MARK_EVERY_MS, qs.expire_after_s * 250))

    async def _write(self, queue: str, now: int) -> None:
        await self.db.run(self._mark, [now, queue])

    async def flush(self) -> None:
        """Wait for the marks being written (tests, shutdown)."""
        await self.marks.flush()

"""Marking queues active, cheaply, for idle expiry (engine/operations/reaper.py).

A queue created with ``expire_after`` has a row in ``queue_expiry`` whose ``active_at`` says when
it was last used. Every send and receive calls ``touch``; it writes only when this process has not
written that queue's mark for ``min(5 min, expire_after / 4)``, so a busy queue costs at most one
write per few minutes per process, and a queue without expiry costs nothing (its settings are
already cached by the send or receive that touched it; no read is made here). The write is not
awaited by the caller: a lost mark only lets the queue look idle a little earlier, and the sweeper
needs ``expire_after`` without one before it acts.

Every queue touched, expiring or not, is also written to ``active_queues`` (the hour and one of 16
partitions by its name) at most every ``ACTIVE_EVERY_MS`` per process: the small index of the
queues used lately that the queue gauges read (``recent``) instead of listing queues that exist, and
that ``casque serve``'s sweep reads (``hours``) to learn which of the queues it let rest another
process used since (engine/consume/sweep.py ``PulledSweeps``).
Its statements are prepared on first use, so a keyspace without the table still serves (the marks
fail and are logged until ``casque schema apply``).
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Any

from daemon.base.clock import Clock
from daemon.engine.cluster.marks import ThrottledMarks
from daemon.engine.queues.store import QueueStore
from daemon.engine.storage.db import Database
from daemon.engine.storage.paging import pages

MARK_EVERY_MS = 300_000
ACTIVE_EVERY_MS = 600_000  # a queue in use is in the current or the previous hour's partitions
HOUR_MS = 3_600_000
ACTIVE_PARTS = 16  # partitions per hour: a busy hour's rows spread over 16 replicas' worth of keys
TURN_MS = 300_000  # ``hours`` reads the previous hour too for this long after the hour turns


class ActivityMarks:
    def __init__(self, db: Database, keyspace: str, queues: QueueStore, clock: Clock) -> None:
        self.queues = queues
        self.clock = clock
        self._mark = db.prepare(f"UPDATE {keyspace}.queue_expiry SET active_at = ? WHERE name = ?")
        self.db = db
        self.marks = ThrottledMarks(self._write, "activity", MARK_EVERY_MS / 1000)
        self.active = ThrottledMarks(self._write_active, "active_queue", ACTIVE_EVERY_MS / 1000)
        self._active_table = f"{keyspace}.active_queues"
        self._statements: dict[str, Any] = {}

    @property
    def writes(self) -> int:
        return self.marks.writes

    def touch(self, queue: str) -> None:
        """``queue`` was used now: write its marks if this process has not done so lately."""
        now = self.clock.now_ms()
        self.active.mark(queue, now, ACTIVE_EVERY_MS)
        qs = self.queues.cached(queue)
        if qs is None or not qs.expire_after_s:
            return
        self.marks.mark(queue, now, min(MARK_EVERY_MS, qs.expire_after_s * 250))

    async def _write(self, queue: str, now: int) -> None:
        await self.db.run(self._mark, [now, queue])

    async def _prepared(self, cql: str) -> Any:
        stmt = self._statements.get(cql)
        if stmt is None:
            text = cql.format(t=self._active_table)
            stmt = self._statements[cql] = await asyncio.to_thread(self.db.prepare, text)
        return stmt

    async def _write_active(self, queue: str, now: int) -> None:
        stmt = await self._prepared("INSERT INTO {t} (hour, part, name) VALUES (?, ?, ?)")
        await self.db.run(stmt, [now // HOUR_MS, part_of(queue), queue])

    async def recent(self, limit: int) -> list[str]:
        """Up to ``limit`` queues used in this hour or the previous one, anywhere in the cluster: a
        read of 32 partitions (a page per 1,000 rows), whatever the number of queues that exist."""
        hour = self.clock.now_ms() // HOUR_MS
        stmt = await self._prepared("SELECT name FROM {t} WHERE hour IN ? AND part IN ?")
        names: dict[str, None] = {}
        async for rows in pages(self.db, stmt, [[hour, hour - 1], list(range(ACTIVE_PARTS))]):
            names.update(dict.fromkeys(r.name for r in rows))
            if len(names) >= limit:
                break
        return list(names)[:limit]

    async def hours(self, names: list[str], since: int | None = None) -> dict[str, set[int]]:
        """Of these queues, the hours with an entry: this one, and the previous one unless ``since`` (the
        hour of the caller's last read) is this one and the hour turned more than ``TURN_MS`` ago. One
        request per partition of the hour that holds any of them (``name IN``), at most 16 whatever the
        number of names, so the sweep reads the index once for every queue it keeps (16 partition
        reads, 32 near an hour's turn)."""
        if not names:
            return {}
        now = self.clock.now_ms()
        hour = now // HOUR_MS
        # the previous hour too while a clock a little behind ours may still write there (its first 5 minutes)
        fresh = since is not None and since >= hour and now % HOUR_MS >= TURN_MS
        wanted = [hour] if fresh else [hour, hour - 1]
        stmt = await self._prepared("SELECT hour, name FROM {t} WHERE hour IN ? AND part = ? AND name IN ?")
        by_part: dict[int, list[str]] = {}
        for name in names:
            by_part.setdefault(part_of(name), []).append(name)
        results = await asyncio.gather(*(self.db.run(stmt, [wanted, part, chunk]) for part, chunk in by_part.items()))
        out: dict[str, set[int]] = {}
        for rows in results:
            for r in rows:
                out.setdefault(r.name, set()).add(r.hour)
        return out

    def marked_hour(self, queue: str) -> int | None:
        """The hour of the last ``active_queues`` entry this process wrote for ``queue`` (None: none lately)."""
        at = self.active.last(queue)
        return None if at is None else at // HOUR_MS

    async def flush(self) -> None:
        """Wait for the marks being written (tests, shutdown)."""
        await self.marks.flush()
        await self.active.flush()


def part_of(queue: str) -> int:
    """The partition of a queue's row within an hour: a stable hash of its name (crc32, not ``hash``,
    which differs between processes)."""
    return zlib.crc32(queue.encode()) % ACTIVE_PARTS

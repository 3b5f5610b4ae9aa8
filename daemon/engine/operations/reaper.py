"""Idle expiry: delete queues created with ``expire_after`` once nobody has used them that long.

Like SQS's inactivity deletion or the per-user queue blog's TTL buckets, for the many small queues
that come and go with their users. What it rests on:
  - a pass reads only the candidates now due from the expiry index (engine/queues/expiry_index.py:
    one bounded slice since the last pass, about one read a minute when nothing is due), never
    ``queue_expiry`` whole nor the ``queues`` table; so it costs in proportion to the queues that
    fall due or were used, not to the queues that exist;
  - ``active_at`` is written by sends and receives at most once per ``min(5 min, expire_after/4)``
    per process (engine/cluster/activity.py), so a queue in use is never ``expire_after`` behind;
  - one process per cluster reaps: the holder of the ``queue_expiry`` lease (engine/cluster/lease.py);
  - before deleting, the reaper re-reads the queue's ``queue_expiry`` row (a candidate is only the
    earliest the queue could expire); a queue used since gets its candidate moved to its new due
    time, and is deleted with partition tombstones only (engine/operations/queue_actions.py ``delete_queue``).
A send racing the very pass that deletes its queue may be lost with the queue, as with any queue
deleted while in use: choose ``expire_after`` far above the gaps of a queue that still matters.
"""

from __future__ import annotations

import asyncio
from typing import Any

from cassandra import InvalidRequest

from daemon.base.errors import CasqueError, QueueNotFound
from daemon.base.logs import get_logger
from daemon.engine.operations.queue_actions import delete_queue
from daemon.engine.queues.expiry_index import DAY_MS, LOOKBACK_DAYS, MARKER_EVERY_MS, ExpiryIndex, real_due
from daemon.engine.stores import Stores

log = get_logger("casque.expiry")
LEASE = "queue_expiry"


class QueueReaper:
    def __init__(self, st: Stores, holder: str, interval_ms: int = 60_000, lease: str = LEASE) -> None:
        self.st = st
        self.interval_ms = interval_ms
        ks = st.settings.cassandra.keyspace
        self.lease = st.lease(lease, holder, ttl_s=3 * interval_ms / 1000)
        self.index = ExpiryIndex(st.db, ks, marker=lease)
        self.backfilled = 0  # candidates this reaper wrote from queue_expiry (the one full read)
        self._one = st.db.prepare(f"SELECT expire_after_s, active_at FROM {ks}.queue_expiry WHERE name = ?")
        self._forget = st.db.prepare(f"DELETE FROM {ks}.queue_expiry WHERE name = ?")
        self.deleted = 0
        self.swept_to: int | None = None  # every candidate due up to here was handled (ms); None: not yet
        self._marked_at: int | None = None

    async def run(self) -> None:
        """Every interval: reap while holding the lease (the others only bid for it)."""
        try:
            while True:
                await self.tick()
                await asyncio.sleep(self.interval_ms / 1000)
        finally:
            await asyncio.shield(self.lease.release())

    async def tick(self) -> list[str] | None:
        """One turn: reap if this process holds the lease (the queues deleted), else None."""
        if not await self.lease.hold():
            return None
        try:
            return await self.reap()
        except (CasqueError, InvalidRequest) as exc:  # tried again next interval (InvalidRequest: no index table yet)
            log.warning("expiry_sweep_failed", error=str(exc))
            return []

    async def reap(self) -> list[str]:
        """Delete every queue idle past its ``expire_after``; returns their names. Reads the candidates
        due since the last pass (on the first, ``LOOKBACK_DAYS`` back, after a backfill if no reaper
        swept that lately)."""
        now = self.st.clock.now_ms()
        if self.swept_to is None:
            if not await self.index.swept_lately():
                self.backfilled += await self.index.backfill(now)
                log.info("expiry_index_backfilled", candidates=self.backfilled)
            self.swept_to = now - LOOKBACK_DAYS * DAY_MS
        gone: list[str] = []
        async for due_at, name in self.index.due(self.swept_to, now):
            if await self._settle(name, due_at):
                gone.append(name)
        self.swept_to = now
        if self._marked_at is None or now - self._marked_at >= MARKER_EVERY_MS:
            await self.index.mark_swept()
            self._marked_at = now
        return gone

    async def _settle(self, name: str, due_at: int) -> bool:
        """One candidate: delete its queue if idle past its ``expire_after``, else move the candidate
        to when it can next expire; either way this candidate is done. True if the queue was deleted."""
        fresh = await self.st.db.run(self._one, [name])
        expired = False
        if fresh and self._idle(fresh[0]):
            expired = await self._expire(name, fresh[0])
        elif fresh and fresh[0].expire_after_s:
            await self.index.schedule(name, real_due(fresh[0]))  # before the drop: a crash leaves two, not none
        await self.index.drop(name, due_at)
        return expired

    def _idle(self, r: Any) -> bool:
        return bool(r.expire_after_s) and (r.active_at or 0) + r.expire_after_s * 1000 <= self.st.clock.now_ms()

    async def _expire(self, name: str, fresh: Any) -> bool:
        try:
            tombstones = await delete_queue(self.st, name)
        except QueueNotFound:  # deleted by hand, or a mark written after the delete: drop the mark
            await self.st.db.run(self._forget, [name])
            return False
        self.deleted += 1
        idle_s = (self.st.clock.now_ms() - (fresh.active_at or 0)) // 1000
        log.info("queue_expired", queue=name, idle_s=idle_s, tombstones=tombstones)
        return True

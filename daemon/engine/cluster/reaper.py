"""Idle expiry: delete queues created with ``expire_after`` once nobody has used them that long.

Like SQS's inactivity deletion or the per-user queue blog's TTL buckets, for the many small queues
that come and go with their users. What it rests on:
  - only queues created with ``expire_after`` have a row in ``queue_expiry``, so a pass pages
    through those rows (one bounded read per page), never the whole ``queues`` table;
  - ``active_at`` is written by sends and receives at most once per ``min(5 min, expire_after/4)``
    per process (engine/cluster/activity.py), so a queue in use is never ``expire_after`` behind;
  - one process per cluster reaps: the holder of the ``queue_expiry`` lease (engine/cluster/lease.py);
  - before deleting, the reaper re-reads the queue's row (its mark may have moved since the page
    was read), and deletes with partition tombstones only (engine/queues/admin.py ``delete_queue``).
A send racing the very pass that deletes its queue may be lost with the queue, as with any queue
deleted while in use: choose ``expire_after`` far above the gaps of a queue that still matters.
"""

from __future__ import annotations

import asyncio
from typing import Any

from daemon.base.errors import CasqueError, QueueNotFound
from daemon.base.logs import get_logger
from daemon.engine.queues.admin import delete_queue
from daemon.engine.storage.paging import pages
from daemon.engine.stores import Stores

log = get_logger("casque.expiry")
LEASE = "queue_expiry"


class QueueReaper:
    def __init__(self, st: Stores, holder: str, interval_ms: int = 60_000, lease: str = LEASE) -> None:
        self.st = st
        self.interval_ms = interval_ms
        ks = st.settings.cassandra.keyspace
        self.lease = st.lease(lease, holder, ttl_s=3 * interval_ms / 1000)
        self._all = f"SELECT name, expire_after_s, active_at FROM {ks}.queue_expiry"
        self._one = st.db.prepare(f"SELECT expire_after_s, active_at FROM {ks}.queue_expiry WHERE name = ?")
        self._forget = st.db.prepare(f"DELETE FROM {ks}.queue_expiry WHERE name = ?")
        self.deleted = 0

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
        except CasqueError as exc:  # tried again next interval
            log.warning("expiry_sweep_failed", error=str(exc))
            return []

    async def reap(self) -> list[str]:
        """Delete every queue idle past its ``expire_after``; returns their names."""
        gone: list[str] = []
        async for rows in pages(self.st.db, self._all):
            for r in rows:
                if self._idle(r) and await self._expire(r.name):
                    gone.append(r.name)
        return gone

    def _idle(self, r: Any) -> bool:
        return bool(r.expire_after_s) and (r.active_at or 0) + r.expire_after_s * 1000 <= self.st.clock.now_ms()

    async def _expire(self, name: str) -> bool:
        fresh = await self.st.db.run(self._one, [name])
        if not fresh or not self._idle(fresh[0]):
            return False
        try:
            tombstones = await delete_queue(self.st, name)
        except QueueNotFound:  # deleted by hand, or a mark written after the delete: drop the mark
            await self.st.db.run(self._forget, [name])
            return False
        self.deleted += 1
        idle_s = (self.st.clock.now_ms() - (fresh[0].active_at or 0)) // 1000
        log.info("queue_expired", queue=name, idle_s=idle_s, tombstones=tombstones)
        return True

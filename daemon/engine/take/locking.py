"""The shard-row lock: lock columns written on the very row they protect (Astyanax's protocol).

Step by step (docs/design.md has the argument for why each step is there):

1. Write a lock column ``(kind=0, due=now, id=random)`` with state PENDING and a TTL.
2. Read the row's live lock columns (only those younger than lock TTL + clock tolerance: the slice
   starts there, so old lock tombstones are never scanned).
3. Busy if any *foreign* column is ACQUIRED, or if ours is not the earliest live column.
4. Overwrite our column with state ACQUIRED.
5. Re-check, and only then read the messages: a foreign ACQUIRED column means two consumers got
   past step 3 (possible when clocks are skewed, since "earliest" compares client clocks); then we
   back off. Each consumer writes its ACQUIRED column before reading the others', so of two racers
   at least one sees the other, or sees it gone because its take committed -- and then a message
   read that starts after the re-check sees that take's deletes too: never both take.
6. The consumer's take is one single-partition batch that also deletes our lock column.

Steps 1-3 only make it rare that two racers both back off; steps 4-5 alone keep two takes apart.
So a row with no contention seen since its last take is locked *directly* (``acquire_direct``):
step 4 at once, then step 5's read, which also gives the cursors. Two round trips instead of four.
A direct lock backs off on any foreign ACQUIRED column, so two direct racers that see each other
both back off; the row is then contended, and its next take goes the long way, where the earliest
column wins.

A dead consumer's lock expires with its TTL, so a shard is never blocked for longer than that.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from daemon.base.clock import Clock
from daemon.base.model import QueueSettings
from daemon.engine.queues.store import lock_change_settled_ms
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import LOCK_ACQUIRED, LOCK_PENDING, MessageTable, lock_ttl_seconds

#: A take is abandoned when less than this is left of its lock's life.
EXPIRY_MARGIN_MS = 1000


def settling_ttl_ms(qs: QueueSettings, now_ms: int) -> int | None:
    """The lock TTL before its last change while that change settles (processes that have not re-read the
    settings may still use it), else None."""
    if qs.lock_ttl_before_ms and now_ms < lock_change_settled_ms(qs):
        return qs.lock_ttl_before_ms
    return None


def lock_read_back_ms(qs: QueueSettings, now_ms: int) -> int:
    """How far back step 2 reads lock columns: the lock TTL, or the TTL before its last change while that change
    settles, if longer. A holder that has not re-read the settings yet keeps columns written under the old TTL:
    consumers reading back only to a shorter new one would not see them (docs/design.md, "Held rows")."""
    return max(qs.lock_ttl_ms, settling_ttl_ms(qs, now_ms) or 0)


def lock_life_ms(qs: QueueSettings, lock_ttl_ms: int, now_ms: int) -> int:
    """How long a lock column written with ``lock_ttl_ms`` keeps every other consumer out: no longer than it lives,
    nor than consumers on the queue's settings read lock columns back (its TTL now), nor, while a change of the TTL
    settles, than consumers that have not re-read the settings yet read them back (the TTL before the change)."""
    return min(lock_ttl_ms, qs.lock_ttl_ms, settling_ttl_ms(qs, now_ms) or lock_ttl_ms)


@dataclass
class HeldLock:
    queue: str
    bucket: int
    shard: int
    lock_due: int
    lock_id: uuid.UUID
    started_ms: int  # Clock.elapsed_ms() before the lock column was written
    ttl_ms: int  # the queue's lock TTL when the column was written: the column lives at least this long
    cursors: dict[int, int] = field(default_factory=dict)


class ShardLocker:
    def __init__(self, db: Database, table: MessageTable, clock: Clock, tolerance_ms: int) -> None:
        self.db = db
        self.table = table
        self.clock = clock
        self.tolerance_ms = tolerance_ms

    async def acquire(self, qs: QueueSettings, bucket: int, shard: int) -> HeldLock | None:
        """Steps 1-4. Returns the held lock, or None if the row is busy (the caller moves on)."""
        now = self.clock.now_ms()
        lock = HeldLock(qs.name, bucket, shard, now, uuid.uuid4(), self.clock.elapsed_ms(), qs.lock_ttl_ms)
        ttl = lock_ttl_seconds(qs)
        await self.db.run(self.table.lock_write, [qs.name, bucket, shard, now, lock.lock_id, LOCK_PENDING, ttl])
        rows = await self._read_locks(qs, lock)
        if not self._first_and_alone(rows, lock):
            await self.release(lock)
            return None
        lock.cursors = dict(rows[0].cursors or {}) if rows else {}
        await self.db.run(self.table.lock_write, [qs.name, bucket, shard, now, lock.lock_id, LOCK_ACQUIRED, ttl])
        return lock

    async def acquire_direct(self, qs: QueueSettings, bucket: int, shard: int) -> HeldLock | None:
        """Steps 4-5 without 1-3: write our ACQUIRED column, then re-check. The held lock is already
        re-checked (its message read may start at once); None if another consumer holds the row, our
        column deleted. What keeps two takes apart is all here: each racer writes ACQUIRED before it
        reads the others', so of two that both pass at least one saw the other's column, or saw it
        gone with its take committed (the classic path's steps 4-5 are the same write and read)."""
        now = self.clock.now_ms()
        lock = HeldLock(qs.name, bucket, shard, now, uuid.uuid4(), self.clock.elapsed_ms(), qs.lock_ttl_ms)
        ttl = lock_ttl_seconds(qs)
        await self.db.run(self.table.lock_write, [qs.name, bucket, shard, now, lock.lock_id, LOCK_ACQUIRED, ttl])
        rows = await self._read_locks(qs, lock)
        if self._foreign_acquired(rows, lock):
            await self.release(lock)
            return None
        lock.cursors = dict(rows[0].cursors or {}) if rows else {}
        return lock

    async def recheck(self, qs: QueueSettings, lock: HeldLock) -> bool:
        """Step 5: True if no other consumer holds an ACQUIRED column on this row."""
        return not self._foreign_acquired(await self._read_locks(qs, lock), lock)

    @staticmethod
    def _foreign_acquired(rows: list[Any], lock: HeldLock) -> bool:
        return any(r.state == LOCK_ACQUIRED and r.id != lock.lock_id for r in rows)

    def release_statement(self, lock: HeldLock) -> Any:
        return self.table.lock_delete.bind([lock.queue, lock.bucket, lock.shard, lock.lock_due, lock.lock_id])

    async def release(self, lock: HeldLock) -> None:
        await self.db.run(self.release_statement(lock))

    def expired(self, qs: QueueSettings, lock: HeldLock, margin_ms: int = EXPIRY_MARGIN_MS) -> bool:
        """True when the lock is too close to its TTL to commit a take safely. The age counts from
        before the lock column was written, on a monotonic clock; the column itself lives at least
        the TTL it was written with (``lock.ttl_ms``, table.lock_ttl_seconds), so ``margin_ms`` is left
        for the take batch to reach the replicas and for the replicas' clocks to disagree with the
        coordinator's.

        The life counted is ``lock_life_ms``. A kept lock (a hold, holds.py) outlives settings re-reads:
        counted by the new TTL after the queue's lock timeout was raised, a column written under the old one
        would be taken for valid after Cassandra expired it, and while the change settles, processes that
        have not re-read it still read lock columns back only to the old TTL (tests/test_holds.py)."""
        return self.clock.elapsed_ms() - lock.started_ms > self.life_ms(qs, lock) - margin_ms

    def life_ms(self, qs: QueueSettings, lock: HeldLock) -> int:
        return lock_life_ms(qs, lock.ttl_ms, self.clock.now_ms())

    async def _read_locks(self, qs: QueueSettings, lock: HeldLock) -> list[Any]:
        window = lock.lock_due - lock_read_back_ms(qs, lock.lock_due) - self.tolerance_ms
        return await self.db.run(self.table.lock_read, [qs.name, lock.bucket, lock.shard, window])

    @staticmethod
    def _first_and_alone(rows: list[Any], lock: HeldLock) -> bool:
        live = [r for r in rows if r.id is not None]
        if any(r.state == LOCK_ACQUIRED and r.id != lock.lock_id for r in live):
            return False
        if not live:
            return False  # our own column is not visible yet: treat as contention, try later
        first = min(live, key=lambda r: (r.due, r.id.bytes))
        return bool(first.id == lock.lock_id)

"""The row lock (``RowLock``): lock columns written on the very row they protect (Astyanax's protocol).

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
So ``acquire`` locks a row with no contention seen since its last take *directly*: step 4 at once,
then step 5's read, which also gives the cursors. Two round trips instead of four. A direct lock
backs off on any foreign ACQUIRED column, so two direct racers that see each other both back off;
the row is then contended, and its next take goes the long way, where the earliest column wins.

A lock is kept past its take by one of two policies (holds.py): *held*, renewed (``renew``) until
released, or *lingering*, kept for one next take within ``holds.LINGER_MS``. Whatever the path,
how long a lock may be committed under is ``expired`` / ``life_ms``, here and nowhere else.

A dead consumer's lock expires with its TTL, so a shard is never blocked for longer than that.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from daemon.base.clock import Clock
from daemon.base.model import QueueSettings
from daemon.engine.queues.store import lock_change_settled_ms
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import LOCK_ACQUIRED, LOCK_PENDING, MessageTable, lock_ttl_seconds
from daemon.engine.take.row_state import trip

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


@dataclass
class HeldLock:
    """One acquired lock column of a row: what a take commits under, and what a kept lock keeps."""

    queue: str
    bucket: int
    shard: int
    lock_due: int
    lock_id: uuid.UUID
    started_ms: int  # Clock.elapsed_ms() before the lock column was written
    ttl_ms: int  # the queue's lock TTL when the column was written: the column lives at least this long
    cursors: dict[int, int] = field(default_factory=dict)


class RowLock:
    """Acquire, renew, release a row's lock, and say how long it is valid. Holds no state of its own: which locks
    are kept, and for how long, is holds.py's."""

    def __init__(self, db: Database, table: MessageTable, clock: Clock, tolerance_ms: int) -> None:
        self.db = db
        self.table = table
        self.clock = clock
        self.tolerance_ms = tolerance_ms

    async def acquire(self, qs: QueueSettings, bucket: int, shard: int, contended: bool = False) -> HeldLock | None:
        """The row's lock, re-checked: its message read may start at once. None if another consumer holds the row
        (our column deleted; the caller moves on). ``contended``: the row was found busy since its last take, or
        the lock is to be held: the long way (steps 1-5), where the earliest column wins; else directly (4-5)."""
        now = self.clock.now_ms()
        lock = HeldLock(qs.name, bucket, shard, now, uuid.uuid4(), self.clock.elapsed_ms(), qs.lock_ttl_ms)
        ttl = lock_ttl_seconds(qs)
        if contended:
            trip(3)  # lock write, lock read, acquired write
            await self.db.run(self.table.lock_write, [qs.name, bucket, shard, now, lock.lock_id, LOCK_PENDING, ttl])
            rows = await self._read_locks(qs, lock)
            if not self._first_and_alone(rows, lock):
                await self.release(lock)
                return None
            lock.cursors = dict(rows[0].cursors or {}) if rows else {}  # step 2's read gives the cursors
            await self.db.run(self.table.lock_write, [qs.name, bucket, shard, now, lock.lock_id, LOCK_ACQUIRED, ttl])
            trip()
            try:
                rows = await self._read_locks(qs, lock)
            # A re-check that did not answer: the long way deletes its column at once, while the direct way leaves
            # it to its TTL (no extra request where a node just failed one). Two habits kept as they were; one
            # would do, but choosing is a change of behaviour, not this refactor's.
            except BaseException:
                await asyncio.shield(self.release_quietly(lock))
                raise
        else:
            trip(2)  # acquired write, re-check
            await self.db.run(self.table.lock_write, [qs.name, bucket, shard, now, lock.lock_id, LOCK_ACQUIRED, ttl])
            rows = await self._read_locks(qs, lock)
            lock.cursors = dict(rows[0].cursors or {}) if rows else {}
        if any(r.state == LOCK_ACQUIRED and r.id != lock.lock_id for r in rows):
            await self.release(lock)
            return None
        return lock

    async def renew(self, qs: QueueSettings, lock: HeldLock) -> HeldLock:
        """A new ACQUIRED column for a held lock (due now, new id): others read only lock columns younger than
        lock TTL + tolerance, so the old one's ``due`` would fall out of their window. Raises if the write failed
        or timed out (in doubt: the old column still counts until it lapses)."""
        fresh = replace(
            lock,
            lock_due=self.clock.now_ms(),
            lock_id=uuid.uuid4(),
            started_ms=self.clock.elapsed_ms(),
            ttl_ms=qs.lock_ttl_ms,
        )
        await self.db.run(
            self.table.lock_write,
            [qs.name, lock.bucket, lock.shard, fresh.lock_due, fresh.lock_id, LOCK_ACQUIRED, lock_ttl_seconds(qs)],
        )
        return fresh

    def release_statement(self, lock: HeldLock) -> Any:
        return self.table.lock_delete.bind([lock.queue, lock.bucket, lock.shard, lock.lock_due, lock.lock_id])

    async def release(self, lock: HeldLock) -> None:
        await self.db.run(self.release_statement(lock))

    async def release_quietly(self, lock: HeldLock) -> None:
        """Release after a failure: if this fails too, the lock's TTL frees the row anyway."""
        try:
            await self.release(lock)
        except Exception:
            pass

    def expired(self, qs: QueueSettings, lock: HeldLock, margin_ms: int = EXPIRY_MARGIN_MS) -> bool:
        """True when the lock is too close to its TTL to commit a take safely. The age counts from
        before the lock column was written, on a monotonic clock; the column itself lives at least
        the TTL it was written with (``lock.ttl_ms``, table.lock_ttl_seconds), so ``margin_ms`` is left
        for the take batch to reach the replicas and for the replicas' clocks to disagree with the
        coordinator's.

        The life counted is ``life_ms``. A kept lock (holds.py) outlives settings re-reads:
        counted by the new TTL after the queue's lock timeout was raised, a column written under the old one
        would be taken for valid after Cassandra expired it, and while the change settles, processes that
        have not re-read it still read lock columns back only to the old TTL (tests/test_holds.py)."""
        return self.age_ms(lock) > self.life_ms(qs, lock) - margin_ms

    def life_ms(self, qs: QueueSettings, lock: HeldLock) -> int:
        """How long the lock's column keeps every other consumer out: no longer than it lives, nor than consumers
        on the queue's settings read lock columns back (its TTL now), nor, while a change of the TTL settles, than
        consumers that have not re-read the settings yet read them back (the TTL before the change)."""
        return min(lock.ttl_ms, qs.lock_ttl_ms, settling_ttl_ms(qs, self.clock.now_ms()) or lock.ttl_ms)

    def age_ms(self, lock: HeldLock) -> int:
        """Since before the lock's column was written, on the monotonic clock."""
        return self.clock.elapsed_ms() - lock.started_ms

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

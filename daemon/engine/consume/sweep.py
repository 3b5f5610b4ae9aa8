"""The low-watermark sweep: find messages left below a row's cursor and put them back within reach.

Reads start at a row's cursor (docs/design.md, "Cursors"), and nothing is written behind a cursor
while clocks and write latency stay within ``clock_tolerance``. When they don't -- a write that
spent longer than that in flight, a consumer host whose clock runs fast and stored a cursor ahead
of true time, a datacenter that received a write late -- the message would wait below the cursor,
unread, until its TTL. The sweep is the backstop that finds it.

Per row and priority lane, each pass reads the stretch from this process's low watermark up to
``min(cursor, now - lag)``, then moves the watermark there: every stretch is read once per process
(so each tombstone is scanned once more, not on every poll), ``lag`` after it fell due. What it
finds is re-read under the row lock, together with the cursors *in the same read* (so a take that
is half-way to the replicas can't pass for a stray message), and moved to ``max(now, cursor)`` in one
batch timestamped after the row it replaces. Each find is logged (``message_below_cursor``) and
counted (``casque_swept``).

A message written more than ``lag`` after its due time, farther back than the first stretch a
process sweeps, is not found; ``lag`` (60 s) bounds how far beyond the tolerance clocks and writes
may stray.

The same pass keeps a backlog from vanishing: every write carries a TTL of (due - now) + retention,
so a message still waiting ``retention`` after it fell due would be dropped by Cassandra without a
trace. A message that has waited longer than ``retention - expiry_margin`` is moved to the poison
queue instead (reason "not consumed within retention"), where ``casque poison replay`` can bring it
back; it is counted in ``casque_poisoned`` and logged (``message_expiring_poisoned``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from daemon.base import metrics
from daemon.base.errors import CasqueError, QueueNotFound
from daemon.base.logs import get_logger
from daemon.base.model import Message, QueueSettings
from daemon.engine.consume.consumer import Consumer
from daemon.engine.storage.table import after, all_rows, message_from_row

log = get_logger("casque.sweep")
SWEEP_LAG_MS = 60_000
SWEEP_EVERY_S = 30.0
SWEEP_LIMIT = 500


def expiry_margin_ms(qs: QueueSettings) -> int:
    """How long before its TTL a waiting message is poisoned: half the retention, at most an hour
    (retention is at least 60 s: with a pass every 30 s, 60 s is the tightest case)."""
    return min(qs.retention_s * 1000 // 2, 3_600_000)


class Sweeper:
    """Sweeps the rows of one consumer's queue; one per process and queue."""

    def __init__(self, consumer: Consumer, lag_ms: int = SWEEP_LAG_MS) -> None:
        self.consumer = consumer
        self.lag_ms = lag_ms
        self.marks: dict[tuple[int, int, int], int] = {}  # (bucket, shard, rank) -> swept up to
        self.found = 0

    async def sweep(self) -> int:
        """One pass over every row of the queue; returns how many messages were put back."""
        c = self.consumer
        qs = await c.queues.get(c.queue)
        moved = 0
        for bucket, shard in all_rows(qs):
            moved += await self._row(qs, bucket, shard)
        self.found += moved
        return moved

    async def _row(self, qs: QueueSettings, bucket: int, shard: int) -> int:
        c = self.consumer
        static = await c.db.run(c.table.read_cursors, [qs.name, bucket, shard])
        cursors = dict(static[0].cursors or {}) if static else {}
        now = c.clock.now_ms()
        await self._expiring(qs, bucket, shard, cursors, now)
        stretches: dict[int, tuple[int, int]] = {}
        for rank, cursor in cursors.items():
            upper = min(cursor, now - self.lag_ms)
            low = self.marks.get((bucket, shard, rank), upper - self.lag_ms)
            if upper > low:
                stretches[rank] = (low, upper)
        moved = 0
        for rank, (low, upper) in stretches.items():
            if await self._strays(qs, bucket, shard, rank, low, upper):
                repaired = await self._repair(qs, bucket, shard, rank, low, upper)
                moved += repaired or 0
                if repaired is None or repaired >= SWEEP_LIMIT:
                    continue  # the row was busy, or there may be more: the watermark stays
            self.marks[(bucket, shard, rank)] = upper
        return moved

    async def _expiring(self, qs: QueueSettings, bucket: int, shard: int, cursors: dict[int, int], now: int) -> None:
        """Poison what has waited so long that its TTL is near. A lane whose cursor is younger than
        the horizon holds nothing that old, and costs no read."""
        horizon = now - (qs.retention_s * 1000 - expiry_margin_ms(qs))
        c = self.consumer
        for rank in qs.ranks():
            start = cursors.get(rank, 0)
            if start >= horizon:
                continue
            if not await c.db.run(c.table.read_due, [qs.name, bucket, shard, rank, start, horizon, 1]):
                continue
            lock = await c.locker.acquire(qs, bucket, shard)
            if lock is None:
                continue  # busy: someone is taking from this row; the next pass looks again
            try:
                rows = await c.db.run(
                    c.table.read_due,
                    [qs.name, bucket, shard, rank, max(start, lock.cursors.get(rank, 0)), horizon, SWEEP_LIMIT],
                )
                doomed = [message_from_row(qs.name, bucket, shard, r) for r in rows]
                for m in doomed:  # into the poison queue before the batch removes them from the row
                    await c.poison.add(
                        m,
                        f"not consumed within retention ({qs.retention_s} s): poisoned before its TTL would drop it",
                        "Expired",
                        m.last_error or "",
                        "",
                        now,
                        qs.retention_s,
                    )
                batch = c.db.batch()
                batch.add(c.locker.release_statement(lock))
                for m in doomed:
                    batch.add(c.table.delete_message(m, m.due_ms))
                await c.db.run(batch, timestamp=after(*(m.write_ts for m in doomed), now_us=c.db.next_timestamp()))
            except BaseException:
                await c.locker.release(lock)
                raise
            for m in doomed:
                metrics.POISONED.labels(qs.name, m.task).inc()
                log.error(
                    "message_expiring_poisoned",
                    queue=qs.name,
                    id=str(m.id),
                    task=m.task,
                    waited_s=(now - m.due_ms) // 1000,
                    retention_s=qs.retention_s,
                    fix="consumers are too slow for this queue: add daemons or consumers, then 'casque poison replay'",
                )

    async def _strays(self, qs: QueueSettings, bucket: int, shard: int, rank: int, low: int, upper: int) -> list[Any]:
        """Rows of [low, upper) that lie below the cursor read with them."""
        c = self.consumer
        rows = await c.db.run(c.table.read_below, [qs.name, bucket, shard, rank, low, upper, SWEEP_LIMIT])
        return [r for r in rows if r.due < dict(r.cursors or {}).get(rank, 0)]

    async def _repair(self, qs: QueueSettings, bucket: int, shard: int, rank: int, low: int, upper: int) -> int | None:
        """Under the row lock: re-read the strays and move them to max(now, cursor), one batch."""
        c = self.consumer
        lock = await c.locker.acquire(qs, bucket, shard)
        if lock is None:
            return None
        try:
            strays = await self._strays(qs, bucket, shard, rank, low, upper)
            now = c.clock.now_ms()
            batch = c.db.batch()
            batch.add(c.locker.release_statement(lock))
            moved: list[tuple[Message, int, int]] = []
            for r in strays:
                m = message_from_row(qs.name, bucket, shard, r)
                old_due, cursor = m.due_ms, dict(r.cursors or {}).get(rank, 0)
                m.due_ms = max(now, cursor)
                batch.add(c.table.delete_message(m, old_due))
                batch.add(c.table.insert_message(m, now, qs.retention_s))
                moved.append((m, old_due, cursor))
            await c.db.run(batch, timestamp=after(*(m.write_ts for m, _, _ in moved), now_us=c.db.next_timestamp()))
        except BaseException:
            await c.locker.release(lock)
            raise
        for m, old_due, cursor in moved:
            c.expect(bucket, shard, m.due_ms)
            metrics.SWEPT.labels(qs.name).inc()
            log.warning(
                "message_below_cursor",
                queue=qs.name,
                id=str(m.id),
                task=m.task,
                bucket=bucket,
                shard=shard,
                due=old_due,
                behind_ms=cursor - old_due,
                moved_to=m.due_ms,
                fix="a write landed behind a cursor: check the hosts' clocks (NTP) and worker.clock_tolerance",
            )
        return len(moved)


class PulledSweeps:
    """The sweep of a process that only pulls (``casque serve``): every ``SWEEP_EVERY_S``, one
    pass over each queue it received from lately (its pull consumers, an LRU of ``cache.consumers``),
    as a daemon sweeps the queues it serves. Without it, a message written behind a cursor of a
    queue that no daemon serves waited, unread, until its TTL. The first pass comes after a random
    part of the interval, so servers started together (a deploy) spread their passes; each
    ``Sweeper`` keeps its low watermarks, so every stretch is read once per process, as in a
    daemon. What a pass puts back wakes this process's parked long polls (``notify``)."""

    def __init__(
        self,
        consumers: Callable[[], list[Consumer]],
        notify: Callable[[str, int], None],
        every_s: float = SWEEP_EVERY_S,
    ) -> None:
        self.consumers = consumers
        self.notify = notify
        self.every_s = every_s
        self._sweepers: dict[str, Sweeper] = {}

    async def run(self) -> None:
        await asyncio.sleep(random.uniform(0, self.every_s))
        while True:
            await self.once()
            await asyncio.sleep(self.every_s)

    async def once(self) -> int:
        """One pass over the queues pulled from lately; returns how many messages were put back."""
        live = {c.queue: c for c in self.consumers()}
        for queue in [q for q, sw in self._sweepers.items() if live.get(q) is not sw.consumer]:
            del self._sweepers[queue]  # evicted from the LRU (or replaced): its watermarks go with it
        moved = 0
        for queue, consumer in live.items():
            sweeper = self._sweepers.setdefault(queue, Sweeper(consumer))
            try:
                found = await sweeper.sweep()
            except QueueNotFound:  # deleted since it was pulled from: nothing to sweep, nothing to warn of
                self._sweepers.pop(queue, None)
                continue
            except CasqueError as exc:
                log.warning("sweep_failed", queue=queue, error=str(exc))
                continue
            if found:
                self.notify(queue, consumer.clock.now_ms())
            moved += found
        return moved

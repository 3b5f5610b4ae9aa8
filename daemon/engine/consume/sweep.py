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

A row this process holds (a daemon's, engine/take/holds.py) is re-read and moved under the hold: its
column refuses every other locker, this sweep's included, so a message behind a held row's cursor was
never swept (a FIFO queue's one row is held for as long as a daemon serves it). The move commits only
while the hold is valid, as a take does, in turn with this process's takes (``RowHolds.turn``: they
share the column, which keeps neither from the other), and a batch in doubt drops the hold. A row
another process holds is left to that process's sweep: every daemon sweeps every queue it serves.

A message written more than ``lag`` after its due time, farther back than the first stretch a
process sweeps, is not found; ``lag`` (60 s) bounds how far beyond the tolerance clocks and writes
may stray.

The same pass keeps a backlog from vanishing: every write carries a TTL of (due - now) + retention,
so a message still waiting ``retention`` after it fell due would be dropped by Cassandra without a
trace. A message that has waited longer than ``retention - expiry_margin`` is moved to the poison
queue instead (reason "not consumed within retention"), where ``casque poison replay`` can bring it
back; it is counted in ``casque_poisoned`` and logged (``message_expiring_poisoned``).

**Settled rows** (``casque serve``'s sweep, ``settle=True``): a pass that finds a row with every lane
swept up to its cursor (the cursor at least ``lag`` old, so no stretch is left), nothing poisoned or
left for a busy lock, and nothing live at or above any cursor (a read per lane; no partition at all:
no read) marks the row *settled*: nothing in it can be found by a sweep until something is written
to it. A queue whose rows are all settled is skipped with no read at all (not even its settings),
until one of these says something may have been written:
  - this process: a send or a wake hint told to the queue's consumer, a take of ours, one of our
    retries or visibility changes coming due (``Consumer.wakes`` and ``ConsumerStats.takes`` moved);
  - another process: an entry of the activity index (``active_queues``, engine/cluster/activity.py)
    for the queue in an hour it had none in at the index's previous read, and not explained by
    this process's own mark for that hour. Every send, receive and daemon serving the queue
    writes it, at most every 10 minutes per process and queue; ``PulledSweeps`` reads it once every
    ``INDEX_EVERY_MS`` (2 min) for all the queues it keeps (at most 16 requests), not per queue. A
    process that starts using a queue after 10 minutes without is seen within that read; one that
    keeps using it, at the latest by its first mark in the next hour (1 h 12 min);
  - the row itself, re-read at the latest ``SETTLED_RECHECK_MS`` (6 h, drawn between a half and the
    whole of it) after it settled, or sooner for a short retention (below). This is the trace of a
    write that left none this process can read: a hintless send or take of a process whose mark
    for that hour was already there (the index has one entry per queue and hour) or was lost (a
    failed or skipped mark write), the Spark loader. Such a write is found at most that late.
Nothing is lost by waiting: the low watermark of a settled row stays at its cursor, so a message
that lands behind a cursor moved meanwhile is still in the next stretch read (split in pieces of
``STRETCH_PIECE_MS``, so a long one does not read every tombstone of it in one request), and a message
written to a settled row is found, and the row swept every pass again, before it nears its TTL: the
recheck comes at most ``retention - expiry_margin - 2 passes`` after the row settled. A row that holds
waiting messages is never settled: it keeps its poison-before-TTL pass every 30 s. A daemon's sweep
(service/worker.py) does not settle: it sweeps the rows it serves every pass, as before.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from daemon.base import metrics
from daemon.base.errors import CasqueError, QueueNotFound
from daemon.base.logs import get_logger
from daemon.base.model import Message, QueueSettings
from daemon.engine.cluster.activity import HOUR_MS, ActivityMarks
from daemon.engine.consume.consumer import Consumer
from daemon.engine.storage.table import after, all_rows, is_entry, message_from_row
from daemon.engine.take.row_lock import HeldLock

log = get_logger("casque.sweep")
SWEEP_LAG_MS = 60_000
SWEEP_EVERY_S = 30.0
SWEEP_LIMIT = 500
#: A settled queue is re-read at the latest this long after it settled (see the module docstring): the bound on
#: finding a write that left no trace, against the idle cost (1,024 queues kept: about 0.16 reads/s).
SETTLED_RECHECK_MS = 6 * 3_600_000
#: How often ``PulledSweeps`` reads the activity index for the queues it keeps.
INDEX_EVERY_MS = 120_000
#: Queues a ``PulledSweeps`` pass sweeps at once. One at a time (each a few sequential reads), a pass over the
#: queues a full-size server keeps lasts far longer than the 30 s between passes, and queues just used wait that
#: long to settle; a few at once keep the node's queue short and the pass brief.
SWEEP_CONCURRENCY = 8
#: A stretch below a cursor is read in pieces of at most this span of due times.
STRETCH_PIECE_MS = 600_000
#: A row found holding messages is peeked for emptiness again only after this, or once its cursors moved.
HELD_REPEEK_MS = 300_000
#: The most check entries a lane may hold for ``Sweeper._spent`` to look at them (more: a busy lane, not settling).
SPENT_LOOK = 20
_END = 1 << 62  # a due time past every message's


def expiry_margin_ms(qs: QueueSettings) -> int:
    """How long before its TTL a waiting message is poisoned: half the retention, at most an hour
    (retention is at least 60 s: with a pass every 30 s, 60 s is the tightest case)."""
    return min(qs.retention_s * 1000 // 2, 3_600_000)


def recheck_ms(qs: QueueSettings, every_s: float) -> int:
    """How long a settled queue may go unread: ``SETTLED_RECHECK_MS``, or less when its retention is
    short, so that a message written to it unseen is still found (and the row swept every pass) before
    its poison window closes. 0: the queue never rests."""
    return max(0, min(SETTLED_RECHECK_MS, qs.retention_s * 1000 - expiry_margin_ms(qs) - int(2000 * every_s)))


@dataclass
class _Under:
    """What a sweep's re-read and move of one row run under (``Sweeper._locked``)."""

    lock: HeldLock
    held: bool  # this process's hold of the row (kept), else a lock of the sweep's own (released by its batch)
    cursors: dict[int, int]  # the row's cursors, read once the lock was ours
    sent: bool = False  # the batch went out


class Sweeper:
    """Sweeps the rows of one consumer's queue; one per process and queue."""

    def __init__(
        self, consumer: Consumer, lag_ms: int = SWEEP_LAG_MS, settle: bool = False, every_s: float = SWEEP_EVERY_S
    ) -> None:
        self.consumer = consumer
        self.lag_ms = lag_ms
        self.marks: dict[tuple[int, int, int], int] = {}  # (bucket, shard, rank) -> swept up to
        self.found = 0
        self.settle = settle  # let settled rows rest (module docstring); a daemon's sweep does not
        self.every_s = every_s
        self.settled: set[tuple[int, int]] = set()
        self.rows: list[tuple[int, int]] | None = None  # the queue's rows at its last pass
        self.recheck_at = 0  # when a settled queue is read again, whatever else says
        self.skipped = 0  # passes skipped with no read (tests, the bench)
        self._said = self._told()
        self._held: dict[tuple[int, int], tuple[int, dict[int, int]]] = {}  # row -> (peeked at, cursors then)

    def _told(self) -> tuple[int, int]:
        """What this process told the queue's consumer so far: wake-ups (sends, hints, our own
        retries and visibility changes coming due) and takes. Unchanged: nothing of ours was written."""
        return self.consumer.wakes(), self.consumer.stats.takes

    def touched(self) -> None:
        """Something may have been written to the queue by another process: read every row next pass."""
        self.settled.clear()

    def resting(self, now: int) -> bool:
        """Every row settled, nothing said since, and the recheck not come: the pass needs no read."""
        if not self.settle or self.rows is None or not self.settled.issuperset(self.rows):
            return False
        if self._told() != self._said or now >= self.recheck_at:
            self.settled.clear()
            return False
        return True

    async def sweep(self) -> int:
        """One pass over every row of the queue (but settled ones); returns how many messages were put back."""
        c = self.consumer
        if self.resting(c.clock.now_ms()):
            self.skipped += 1
            return 0
        self._said = self._told()  # before any read: what is said from now on voids what this pass settles
        rested = self.rows is not None and self.settled.issuperset(self.rows)
        qs = await c.queues.get(c.queue)
        rows = list(all_rows(qs))
        self.settled &= set(rows)
        self.rows = rows
        moved = 0
        for bucket, shard in rows:
            if (bucket, shard) in self.settled:
                continue
            found, settled = await self._row(qs, bucket, shard)
            moved += found
            if settled and self.settle:
                self.settled.add((bucket, shard))
        if not rested and self.settled.issuperset(rows):
            r = recheck_ms(qs, self.every_s)
            self.recheck_at = c.clock.now_ms() + r // 2 + random.randrange(r // 2 + 1)
        self.found += moved
        return moved

    async def _row(self, qs: QueueSettings, bucket: int, shard: int) -> tuple[int, bool]:
        """Sweep one row: (messages put back, whether the row is now settled)."""
        c = self.consumer
        static = await c.db.run(c.table.read_cursors, [qs.name, bucket, shard])
        cursors = dict(static[0].cursors or {}) if static else {}
        now = c.clock.now_ms()
        calm = await self._expiring(qs, bucket, shard, cursors, now) if static else True  # no partition: nothing
        moved = 0
        for rank, cursor in cursors.items():
            upper = min(cursor, now - self.lag_ms)
            low = self.marks.get((bucket, shard, rank), upper - self.lag_ms)
            while upper > low:  # in pieces: a stretch left long (a settled row) never read in one request
                top = min(upper, low + STRETCH_PIECE_MS)
                if await self._strays(qs, bucket, shard, rank, low, top):
                    repaired = await self._repair(qs, bucket, shard, rank, low, top)
                    moved += repaired or 0
                    if repaired is None or repaired >= SWEEP_LIMIT:
                        break  # the row was busy, or there may be more: the watermark stays
                low = self.marks[(bucket, shard, rank)] = top
            calm = calm and self.marks.get((bucket, shard, rank)) == cursor
        if not (self.settle and calm and static):
            return moved, self.settle and calm and not moved
        return moved, not moved and await self._empty(qs, bucket, shard, cursors, now)

    async def _empty(self, qs: QueueSettings, bucket: int, shard: int, cursors: dict[int, int], now: int) -> bool:
        """Nothing live at or above any lane's cursor: a read per lane (a FIFO lane's peek; a standard lane's
        first ``SPENT_LOOK`` rows, which show its check entries). A row found holding something is read again only
        once its cursors moved or ``HELD_REPEEK_MS`` passed (it is swept meanwhile). A standard queue's lane that
        holds only spent check entries (``_spent``) is emptied of them."""
        c = self.consumer
        seen = self._held.get((bucket, shard))
        if seen is not None and seen[1] == cursors and now - seen[0] < HELD_REPEEK_MS:
            return False
        reads = c.table.reads(qs)
        for rank in qs.ranks():
            at = [qs.name, bucket, shard, rank, cursors.get(rank, 0), _END]
            if qs.fifo:
                held = bool(await c.db.run(reads.peek, at))
            else:  # the entries a standard lane may hold are read with it: one request
                rows = await c.db.run(reads.read_due, [*at, SPENT_LOOK])
                held = bool(rows) and not await self._spent(qs, at, rows)
            if held:
                self._held[(bucket, shard)] = (now, cursors)
                return False
        self._held.pop((bucket, shard), None)
        return True

    async def _spent(self, qs: QueueSettings, at: list[Any], rows: list[Any]) -> bool:
        """Whether a standard queue's lane (``at``: queue, bucket, shard, rank, from, to; ``rows``: what it holds there,
        up to ``SPENT_LOOK``) holds nothing but check entries whose ranges hold no message in flight or in backoff (its
        messages all deleted: an entry outlives them until a take reads it, which an idle queue never runs), and if so
        delete them: the row may settle, as it would once its last message was deleted. No lock is needed: a message
        comes into an entry's range only through a take that delivers it, and that take covers it with an entry of its
        own."""
        c = self.consumer
        queue, bucket, shard, rank = at[:4]
        if len(rows) >= SPENT_LOOK or not all(is_entry(r) for r in rows):
            return False
        for e in rows:
            flights = await c.db.run(c.table.count_flights, [queue, bucket, shard, rank, e.moved_to, e.visible_at])
            if any(r.task is not None for r in flights):
                return False
        batch = c.db.batch()
        for e in rows:
            batch.add(c.table.delete_row(queue, bucket, shard, e))
        await c.db.run(batch, timestamp=after(*(e.wt or 0 for e in rows), now_us=c.db.next_timestamp()))
        return True

    async def _expiring(self, qs: QueueSettings, bucket: int, shard: int, cursors: dict[int, int], now: int) -> bool:
        """Poison what has waited so long that its TTL is near. A lane whose cursor is younger than
        the horizon holds nothing that old, and costs no read. False: something was poisoned, or left
        for a busy row (the row does not settle)."""
        horizon = now - (qs.retention_s * 1000 - expiry_margin_ms(qs))
        c = self.consumer
        calm = True
        for rank in qs.ranks():
            start = cursors.get(rank, 0)
            if start >= horizon:
                continue
            if not await c.db.run(c.table.reads(qs).read_due, [qs.name, bucket, shard, rank, start, horizon, 1]):
                continue
            calm = False
            async with self._locked(qs, bucket, shard) as under:
                if under is None:
                    continue  # busy, or another process holds the row (its sweep looks); the next pass looks again
                rows = await c.db.run(
                    c.table.reads(qs).read_due,
                    [qs.name, bucket, shard, rank, max(start, under.cursors.get(rank, 0)), horizon, SWEEP_LIMIT],
                )
                if not self._valid(qs, under):
                    continue
                doomed = [message_from_row(qs.name, bucket, shard, r) for r in rows if r.task is not None]
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
                for m in doomed:
                    batch.add(c.table.delete_message(m, m.due_ms))
                await self._write(under, batch, [m.write_ts for m in doomed])
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
        return calm

    @asynccontextmanager
    async def _locked(self, qs: QueueSettings, bucket: int, shard: int) -> AsyncIterator[_Under | None]:
        """The lock a re-read and move of the row run under, so two sweeps never both move a row, nor a sweep and a
        take. A row this process holds (holds.py): its hold, in turn with our takes (``RowHolds.turn``), and the
        cursors read again (the hold's were read when it was acquired). The hold's column refuses every other
        locker, this sweep's own included: a message behind a held row's cursor waited for its TTL. Else the row
        lock, re-checked. None: the row is busy, or held by another process, whose own sweep moves it (every
        daemon sweeps the queues it serves, service/worker.py); the next pass looks again."""
        c = self.consumer
        row = (bucket, shard)
        if c.holds.valid(qs, row) is not None and not c.holds.lingering(row):  # a lingering one is gone within 50 ms
            async with c.holds.turn(row):
                lock = c.holds.valid(qs, row)
                if lock is None:  # lapsed, or dropped in doubt by the take we waited for
                    yield None
                    return
                static = await c.db.run(c.table.read_cursors, [qs.name, bucket, shard])
                yield _Under(lock, True, dict(static[0].cursors or {}) if static else {})
            return
        lock = await c.row_lock.acquire(qs, bucket, shard)
        if lock is None:
            yield None
            return
        under = _Under(lock, False, lock.cursors)
        try:
            yield under
        except BaseException:
            await c.row_lock.release(lock)
            raise
        if not under.sent:  # given up before its batch: our column goes now, not at its TTL
            await c.row_lock.release(lock)

    def _valid(self, qs: QueueSettings, under: _Under) -> bool:
        """Whether a move may still commit under its lock: the take's check (step.py), on the hold or on our own."""
        c = self.consumer
        if under.held:
            return c.holds.valid(qs, (under.lock.bucket, under.lock.shard)) is not None
        return not c.row_lock.expired(qs, under.lock)

    async def _write(self, under: _Under, batch: Any, written: list[int]) -> None:
        """The move's batch, timestamped after the rows it replaces. A lock of our own goes with it; a hold stays, and
        a batch that failed under it is in doubt: the hold is dropped without its column (holds.py, step 5)."""
        c = self.consumer
        if not under.held:
            batch.add(c.row_lock.release_statement(under.lock))
        under.sent = True
        try:
            await c.db.run(batch, timestamp=after(*written, now_us=c.db.next_timestamp()))
        except BaseException:
            if under.held:
                c.holds.drop((under.lock.bucket, under.lock.shard))
            raise

    async def _strays(self, qs: QueueSettings, bucket: int, shard: int, rank: int, low: int, upper: int) -> list[Any]:
        """Rows of [low, upper) that lie below the cursor read with them."""
        c = self.consumer
        # Messages in flight lie below the cursor too: the read sees only what waits (engine/take/flights.py).
        rows = await c.db.run(c.table.reads(qs).read_below, [qs.name, bucket, shard, rank, low, upper, SWEEP_LIMIT])
        # A row without a task and without a range is a FIFO send's reservation (engine/send/fifo_send.py), left
        # behind by a send that placed its message again: it only lives out its TTL.
        return [r for r in rows if r.due < dict(r.cursors or {}).get(rank, 0) and (r.task is not None or is_entry(r))]

    async def _repair(self, qs: QueueSettings, bucket: int, shard: int, rank: int, low: int, upper: int) -> int | None:
        """Under the row lock: re-read the strays and move them to max(now, cursor), one batch."""
        c = self.consumer
        async with self._locked(qs, bucket, shard) as under:
            if under is None:
                return None
            strays = await self._strays(qs, bucket, shard, rank, low, upper)
            if not self._valid(qs, under):
                return None
            now = c.clock.now_ms()
            batch = c.db.batch()
            moved: list[tuple[Message, int, int]] = []
            entries: list[Any] = []
            for r in strays:
                cursor = dict(r.cursors or {}).get(rank, 0)
                if is_entry(r):  # a standard queue's check entry: moved as it is (engine/take/flights.py)
                    batch.add(c.table.delete_row(qs.name, bucket, shard, r))
                    batch.add(
                        c.table.insert_entry(
                            under.lock, rank, max(now, cursor), r.id, r.moved_to, r.visible_at, now, qs.retention_s
                        )
                    )
                    entries.append(r)
                    continue
                m = message_from_row(qs.name, bucket, shard, r)
                old_due = m.due_ms
                m.due_ms = max(now, cursor)
                batch.add(c.table.delete_message(m, old_due))
                batch.add(c.table.insert_message(m, now, qs.retention_s))
                moved.append((m, old_due, cursor))
            await self._write(under, batch, [m.write_ts for m, _, _ in moved] + [r.wt or 0 for r in entries])
        if entries:
            c.names.expect(bucket, shard, now)
        for m, old_due, cursor in moved:
            c.names.expect(bucket, shard, m.due_ms)
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
    daemon. What a pass puts back wakes this process's parked long polls (``notify``).

    Its sweepers let settled queues rest (the module docstring): an idle server reads nothing for
    them. What another process did to them is learnt from the activity index (``activity``), read
    at most every ``INDEX_EVERY_MS`` for every queue kept, in one go; None (or a failed read): no
    queue is known untouched, and every queue is swept every pass."""

    def __init__(
        self,
        consumers: Callable[[], Iterable[Consumer]],
        notify: Callable[[str, int], None],
        every_s: float = SWEEP_EVERY_S,
        activity: ActivityMarks | None = None,
        index_every_ms: int = INDEX_EVERY_MS,
        concurrency: int = SWEEP_CONCURRENCY,
    ) -> None:
        self.consumers = consumers
        self.concurrency = concurrency
        self.notify = notify
        self.every_s = every_s
        self.activity = activity
        self.index_every_ms = index_every_ms
        self._sweepers: dict[str, Sweeper] = {}
        self._foreign: dict[str, set[int]] = {}  # queue -> hours of index entries not ours, at the last read
        self._index_at: int | None = None  # when the index was last read (monotonic ms)
        self._index_hour: int | None = None  # the hour it was last read in: earlier ones are not read again

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
            self._foreign.pop(queue, None)
        for queue, consumer in live.items():
            if queue not in self._sweepers:
                self._sweepers[queue] = Sweeper(consumer, settle=True, every_s=self.every_s)
        await self._traces()
        queue_order = iter(list(self._sweepers.items()))

        async def worker() -> int:  # ``concurrency`` of these share one iterator: each queue is swept once
            moved = 0
            for queue, sweeper in queue_order:
                moved += await self._sweep_one(queue, sweeper)
                await asyncio.sleep(0)  # a resting queue's turn reads nothing: requests go between queues
            return moved

        return sum(await asyncio.gather(*(worker() for _ in range(self.concurrency))))

    async def _sweep_one(self, queue: str, sweeper: Sweeper) -> int:
        try:
            found = await sweeper.sweep()
        except QueueNotFound:  # deleted since it was pulled from: nothing to sweep, nothing to warn of
            self._sweepers.pop(queue, None)
            return 0
        except CasqueError as exc:
            log.warning("sweep_failed", queue=queue, error=str(exc))
            return 0
        if found:
            self.notify(queue, sweeper.consumer.clock.now_ms())
        return found

    async def _traces(self) -> None:
        """Read the activity index for every queue kept (at most every ``index_every_ms``, and only
        while some queue rests); a queue with an entry in an hour it had none in before, and that
        this process's own mark does not explain, was used by another process: its rows are read."""
        if not any(sw.settled for sw in self._sweepers.values()):
            return
        if self.activity is None:
            for sw in self._sweepers.values():
                sw.touched()
            return
        elapsed = monotonic_ms()
        if self._index_at is not None and elapsed - self._index_at < self.index_every_ms:
            return
        self._index_at = elapsed
        since, self._index_hour = self._index_hour, self.activity.clock.now_ms() // HOUR_MS
        try:
            hours = await self.activity.hours(list(self._sweepers), since)
        except CasqueError as exc:
            log.warning("sweep_index_failed", error=str(exc))
            self._foreign.clear()
            self._index_hour = None
            for sw in self._sweepers.values():
                sw.touched()
            return
        for queue, sweeper in self._sweepers.items():
            foreign = hours.get(queue, set()) - {self.activity.marked_hour(queue)}
            before = self._foreign.get(queue)
            if foreign - (before or set()):
                sweeper.touched()
            self._foreign[queue] = foreign


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)

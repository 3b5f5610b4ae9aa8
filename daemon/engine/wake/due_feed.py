"""The due feed: what finds a message whose wake hint was lost, for every parked long poll of a process at once.

A hint (engine/wake/hints.py) is UDP: it may be lost, or never sent (a listener the sender has not seen yet, a
firewall, ``hints.send = false``). So every announced write (a send, a FIFO group moving on, a visibility change:
engine/wake/announce.py), and every receive at the visibility end of what it took, also writes one row to
``due_queues``: partition = the second its message falls due (``SLOT_MS``), clustering = the
queue and the writing process. A process with long polls parked reads, every ``READ_EVERY_S``, the partitions of the
last ``clock_tolerance`` (one request, ``slot IN``) and tells ``Wakeups.notify`` of each entry of another process
not seen at an earlier read: a parked poll of that queue looks, as the hint would have made it.

A write to a queue's row (its settings, attributes, tags, layout, its delete: ``QueueStore.changed``) enters the
queue too, as a *change* (``changed``): a reader forgets its copy of the row. So a process that has read without a
break (``covered_since``) has been told every entry since, and trusts for a minute what it read since: an empty look
(engine/delivery/idle_look.py), a queue row (engine/queues/store.py).

Bound: a message due at t (its write acknowledged by then) whose hint was lost is received by a parked poll within
``SLOT_MS + READ_EVERY_S`` of t, plus a look. An entry written later than the window (a writer's clock more than the
tolerance behind, a feed write that failed: logged) leaves the message to the owner's next receive, whose look reads
it: within one or two long polls' waits. No guarantee rests on the feed, as none rests on hints: they shorten waits.

Cost: per send, at most one write (one per queue, second of due time and process; the sends of one event-loop turn
share one request per second of due time). Per second, one read per process while any poll is parked, none
otherwise; it returns the queues sent to within the window cluster-wide. Neither grows with the parked owners. An
entry of the last three seconds is told at every read (a send later in the same second writes no new entry), so a poll
parked on a queue another process writes to looks two or three times per such entry.
The statements are prepared on first use: a keyspace without the table still serves (the feed logs its failures
until ``casque schema apply``).
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from daemon.base.clock import Clock
from daemon.base.logs import get_logger
from daemon.engine.storage.db import Database

log = get_logger("casque.due_feed")
SLOT_MS = 1000
READ_EVERY_S = 1.0
KEEP_S = 600  # an entry outlives its slot this long (any reader's window is far shorter)


class DueFeed:
    def __init__(self, db: Database, keyspace: str, clock: Clock, tolerance_ms: int) -> None:
        self.db, self.clock, self.tolerance_ms = db, clock, tolerance_ms
        self._table = f"{keyspace}.due_queues"
        self.me = random.getrandbits(63)  # this process, as a writer: its own entries were announced here
        self._statements: dict[str, Any] = {}
        self._written: dict[int, set[str]] = {}  # slot -> queues this process entered for it
        self._pending: dict[int, set[str]] = {}  # not yet written
        self._flushes: set[asyncio.Task[None]] = set()
        self._seen: dict[int, set[tuple[str, int, bool]]] = {}  # slot -> entries read and told
        self._reader: asyncio.Task[None] | None = None
        self.reads = 0
        self._covered: tuple[int, int] | None = None  # (first, last) read of the unbroken run of reads, clock ms
        #: Told of each queue whose row another process changed (engine/stores.py: forget the cached row).
        self.forget: Callable[[str], None] = lambda queue: None
        #: Started after each read, unless the last one still runs (engine/stores.py: the queue rows in use re-read
        #: before their trust ends); a task of its own, so that it never delays the next read.
        self.after_read: Callable[[], Awaitable[object]] | None = None
        self._after: asyncio.Task[None] | None = None

    # ---- writing ----------------------------------------------------------------------------
    def add(self, queue: str, dues: Iterable[int]) -> None:
        """Something of ``queue`` falls due at each of ``dues`` (ms): enter it, once per second of due time."""
        for due in dues:
            slot = due // SLOT_MS
            if queue in self._written.setdefault(slot, set()):
                continue
            self._written[slot].add(queue)
            if not self._pending:
                asyncio.get_running_loop().call_soon(self._flush)
            self._pending.setdefault(slot, set()).add(queue)

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        now = self.clock.now_ms()
        for slot in [s for s in self._written if s < now // SLOT_MS - 1]:  # a send's due is never in the past
            del self._written[slot]
        for slot, queues in pending.items():
            task = asyncio.ensure_future(self._write(slot, queues, now))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def changed(self, queue: str) -> None:
        """``queue``'s row was written: tell every reader to forget its copy (awaited: the write is announced when
        the caller answers)."""
        now = self.clock.now_ms()
        await self._write(now // SLOT_MS, {queue}, now, changed=True)

    async def _write(self, slot: int, queues: set[str], now: int, changed: bool = False) -> None:
        """One request per slot: the entries share its partition."""
        try:
            if changed:
                stmt = await self._prepared(
                    "INSERT INTO {t} (slot, name, writer, changed) VALUES (?, ?, ?, true) USING TTL ?"
                )
            else:
                stmt = await self._prepared("INSERT INTO {t} (slot, name, writer) VALUES (?, ?, ?) USING TTL ?")
            ttl = max(1, (slot * SLOT_MS - now) // 1000) + KEEP_S
            batch = self.db.batch()
            for queue in queues:
                batch.add(stmt, [slot, queue, self.me, ttl])
            await self.db.run(batch)
        except Exception as exc:  # the owner's next look finds the message: one or two waits later
            self._written.get(slot, set()).difference_update(queues)
            log.warning("due_feed_write_failed", queues=len(queues), error=str(exc))

    # ---- reading ----------------------------------------------------------------------------
    def watch(self, notify: Callable[[str, int], None], parked: Callable[[], bool]) -> None:
        """Read the feed every ``READ_EVERY_S`` while ``parked()``, telling ``notify(queue, due ms)`` what it finds."""
        if self._reader is None or self._reader.done():  # the process's, not the calling request's (its context)
            loop = asyncio.get_running_loop()
            self._reader = loop.create_task(self._read_loop(notify, parked), context=contextvars.Context())

    async def _read_loop(self, notify: Callable[[str, int], None], parked: Callable[[], bool]) -> None:
        while parked():
            try:
                await self.read(notify)
            except Exception as exc:  # a keyspace without the table, a node down: the next read tries again
                log.warning("due_feed_read_failed", error=str(exc))
            if self.after_read is not None and (self._after is None or self._after.done()):
                self._after = asyncio.create_task(self._run_after(self.after_read))
            await asyncio.sleep(READ_EVERY_S)

    async def _run_after(self, after: Callable[[], Awaitable[object]]) -> None:
        try:
            await after()
        except Exception as exc:  # a node down: a row not re-read is read by its next use
            log.warning("queue_rows_refresh_failed", error=str(exc))

    async def read(self, notify: Callable[[str, int], None]) -> None:
        """One read of the window: entries of other processes not told before are told now."""
        now_slot = self.clock.now_ms() // SLOT_MS
        slots = list(range(now_slot - self.tolerance_ms // SLOT_MS - 1, now_slot + 1))
        for slot in [s for s in self._seen if s < slots[0]]:
            del self._seen[slot]
        stmt = await self._prepared("SELECT slot, name, writer, changed FROM {t} WHERE slot IN ?")
        self.reads += 1  # counted as sent, as the Database counts its requests
        at = self.clock.now_ms()
        rows = await self.db.run(stmt, [slots])
        # A writer enters a queue once per second of due time: a second send within that second, after a read told the
        # first, is not entered again. So the entries of the last three seconds are told at every read.
        recent = now_slot - 2
        for r in rows:
            seen = self._seen.setdefault(r.slot, set())
            entry = (r.name, r.writer, bool(r.changed))  # a change entered where a send was is told again
            if r.writer != self.me and (entry not in seen or r.slot >= recent):
                seen.add(entry)
                if r.changed:
                    self.forget(r.name)
                notify(r.name, r.slot * SLOT_MS)
        # The windows of two reads overlap if the second began within a tolerance of the first: nothing entered
        # between them was missed.
        run = self._covered
        self._covered = (run[0], at) if run is not None and at - run[1] < self.tolerance_ms else (at, at)

    def covered_since(self) -> int | None:
        """Since when (clock ms) this process has read the feed without a break, up to a tolerance ago: every entry
        of that time was told (its hint lost or not). None: not reading now."""
        run = self._covered
        if run is None or self.clock.now_ms() - run[1] >= self.tolerance_ms:
            return None
        return run[0]

    async def _prepared(self, cql: str) -> Any:
        stmt = self._statements.get(cql)
        if stmt is None:
            stmt = self._statements[cql] = await asyncio.to_thread(self.db.prepare, cql.format(t=self._table))
        return stmt

    async def flush(self) -> None:
        """Wait for the entries being written (tests, shutdown)."""
        await asyncio.sleep(0)  # the entries of this turn: their requests are sent at the end of it
        if self._flushes:
            await asyncio.gather(*list(self._flushes), return_exceptions=True)

    async def close(self) -> None:
        for task in (self._reader, self._after):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.flush()

"""The take: one row's due messages, taken under its lock in one single-partition batch.

    lock -> re-check -> read (lane by lane, or FIFO group by group) -> keep what fits -> commit

``take`` / ``take_held`` below run it top to bottom; the read and keep are engine/take/read.py's.

A take (under the lock, see row_lock.py) is one single-partition batch: delete our lock column,
mark each taken message in flight where it was sent (attempt + 1, state IN_FLIGHT, ``visible_at`` at now +
timeout: the narrow update, never the payload again), write the check entries that find it once its timeout
passed (flights.py) and move the cursor. Messages that are corrupt or out of attempts go to the poison queue
first, then leave the row in that same batch. A row whose lock this process keeps (holds.py: held, or lingering
after a take) is taken from the same way, the batch keeping the lock column (``take_held``).

Two rules keep a take from losing what it read:
  - the cursor moves (in memory and in the row) only with a take batch that committed: a take that
    fails or is abandoned (lock too old, poison write failed, write timeout) leaves the cursor where
    it was, so what it read is read again;
  - a take is bounded by bytes as well as by count (engine/take/budget.py).

Which row to take from is the consumer's choice (engine/consume/consumer.py); what a take needs besides the row
comes in one value (``TakeOptions``), and what happened goes back as one (``TakeResult``). The
row's ``RowState`` is the one thing a take updates in place: where its reads start (``RowState.start``: cursors
after a commit, skips, frontier), its wake time and rescan time, which the consumer's next choice reads.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Protocol

from daemon.base import metrics
from daemon.base.clock import Clock
from daemon.base.crashpoints import crash_point, pause_point
from daemon.base.logs import get_logger
from daemon.base.model import Message, QueueSettings, out_of_attempts
from daemon.engine.send import chain
from daemon.engine.send.keys import KeyStore
from daemon.engine.storage.db import Database
from daemon.engine.storage.in_flight import into_flight
from daemon.engine.storage.table import STATE_IN_FLIGHT, MessageTable, after, message_from_row
from daemon.engine.take.flights import Flights, check_entries
from daemon.engine.take.holds import RowHolds
from daemon.engine.take.options import TakeOptions, TakeResult
from daemon.engine.take.read import TakeRead, TakeReader
from daemon.engine.take.row_lock import HeldLock, RowLock
from daemon.engine.take.row_state import ConsumerStats, RowState, next_rescan, trip

log = get_logger("casque.consumer")

__all__ = ["Poisoner", "Take", "TakeOptions", "TakeResult", "poison_reason"]


class Poisoner(Protocol):
    """Where a take records a message before dropping it from its row: the poison store
    (engine/delivery/poison.py) or the dead-letter router in front of it (engine/delivery/deadletter.py),
    passed in by whoever builds the consumer."""

    async def add(
        self, m: Message, reason: str, error_type: str, error: str, tb: str, now_ms: int, retention_s: int
    ) -> None: ...


class Take:
    """The take step of one queue's consumer; holds no state of its own besides its stores."""

    def __init__(
        self,
        db: Database,
        table: MessageTable,
        poison: Poisoner,
        keys: KeyStore,
        clock: Clock,
        row_lock: RowLock,
        holds: RowHolds,
        stats: ConsumerStats,
        expect: Callable[[int, int, int], None],
        tolerance_ms: int,
        rescan_ms: int,
        lookahead_ms: int,
    ) -> None:
        self.db, self.table, self.poison, self.keys, self.clock = db, table, poison, keys, clock
        self.row_lock, self.holds, self.stats = row_lock, holds, stats
        self.expect = expect  # a due time this take wrote (a schedule's next occurrence): the consumer's hint
        self.rescan_ms = rescan_ms
        self.reader = TakeReader(db, table, clock, tolerance_ms, rescan_ms, lookahead_ms)
        self.token = uuid.uuid4()  # names this consumer's check entries in place (engine/take/flights.py slot_id)

    async def take(self, qs: QueueSettings, bucket: int, shard: int, state: RowState, opts: TakeOptions) -> TakeResult:
        """Lock the row (directly, or the long way if it was found busy since its last take: row_lock.py), read,
        keep, commit."""
        self.holds.enter((bucket, shard))  # no hold is acquired on the row while we lock it
        try:
            lock = await self.row_lock.acquire(qs, bucket, shard, contended=state.backoff_ms > 0)
            if lock is None:
                self._contended(qs, state)
                return TakeResult(contended=True)
            try:
                return await self._take_locked(qs, state, lock, opts)
            except BaseException:
                await asyncio.shield(self.row_lock.release_quietly(lock))
                raise
        finally:
            self.holds.leave((bucket, shard))

    async def _take_locked(self, qs: QueueSettings, state: RowState, lock: HeldLock, opts: TakeOptions) -> TakeResult:
        """Under a lock that ``acquire`` re-checked: the message read starts only now. Read together with the
        re-check, it could be served before a racer's take batch and the re-check after it (the racer's lock column
        already deleted by that batch): both would take the same messages (tests/test_races.py; docs/design.md,
        "Why two racers never both take")."""
        state.start.caught_up(lock.cursors)
        now = self.clock.now_ms()
        state.took()
        read = await self.reader.read(qs, lock, state, now, opts)
        if read.found:
            pause_point("take.read")
        if self.row_lock.expired(qs, lock):
            log.warning(
                "lock_expired_before_take", queue=qs.name, bucket=lock.bucket, shard=lock.shard, read=len(read.found)
            )
            await self.row_lock.release(lock)
            return TakeResult()
        messages = [message_from_row(qs.name, lock.bucket, lock.shard, r) for r in read.found]
        keep = self._lingers(qs, lock, opts, len(messages))
        taken = await self._commit(qs, state, lock, messages, read.moves, opts, keep_lock=keep, flights=read.flights)
        if keep:
            self.holds.adopt(qs, (lock.bucket, lock.shard), lock)
        self._committed(state, read, opts)
        return TakeResult(taken)

    async def take_held(self, qs: QueueSettings, state: RowState, lock: HeldLock, opts: TakeOptions) -> TakeResult:
        """A take under a lock this process keeps (holds.py: a held row, or a lock lingering after a take): read,
        then one batch that keeps the column (a lingering lock's only while ``_lingers``). Nothing due: the row's
        wake time and cursors come from the same read."""
        row = (lock.bucket, lock.shard)
        async with self.holds.turn(row):  # our sweep may be moving strays under this hold: one at a time
            if not state.start.loaded:
                state.start.loaded_from_store(lock.cursors)  # read with the hold's lock columns
            now = self.clock.now_ms()
            if state.wake <= now + opts.ahead_ms:
                state.wake = RowState.wake
            if qs.fifo and state.fifo.resting(now):
                return TakeResult()
            lingering = self.holds.lingering(row)
            read = await self.reader.read(qs, lock, state, now, opts)
            if not read.anything():
                state.next_check = min(next_rescan(now, self.rescan_ms), state.wake - opts.ahead_ms)
                if lingering:  # drained: nobody waits on this row's lock any more
                    await self.holds.release(qs, row)
                return TakeResult()
            state.next_check = now
            pause_point("take.read")
            pause_point("take.held_read")
            if self.holds.valid(qs, row) is None:  # lapsed meanwhile (a renewal keeps it: the newest column counts)
                log.warning(
                    "hold_expired_before_take",
                    queue=qs.name,
                    bucket=lock.bucket,
                    shard=lock.shard,
                    read=len(read.found),
                    age_ms=self.row_lock.age_ms(lock),
                    life_ms=self.row_lock.life_ms(qs, lock),
                )
                if lingering:  # its column is ours and still lives: gone, so the next take can lock the row
                    await self.holds.release(qs, row)
                return TakeResult()
            messages = [message_from_row(qs.name, lock.bucket, lock.shard, r) for r in read.found]
            keep = not lingering or self._lingers(qs, lock, opts, len(messages))
            try:
                taken = await self._commit(
                    qs, state, lock, messages, read.moves, opts, keep_lock=keep, flights=read.flights
                )
                if lingering and keep:  # kept again for the next take, with a fresh timer
                    self.holds.adopt(qs, row, lock)
                elif lingering:  # the batch deleted its column
                    self.holds.forget(row)
                self._committed(state, read, opts)
                return TakeResult(taken)
            except BaseException:
                self.holds.drop(row)  # in doubt: the batch may still be applied
                raise

    def _lingers(self, qs: QueueSettings, lock: HeldLock, opts: TakeOptions, taken: int) -> bool:
        """Keep this take's lock for our next take: receives wait for it (``opts.linger``), the take filled its limit
        (a take that fell short drained the row: the next would read nothing under the lock, give it up, then look),
        and the lock is young enough (half its TTL) to serve a few more takes; an older one is given up, and the next
        take locks anew."""
        return (
            opts.linger is not None
            and taken >= opts.limit
            and self.row_lock.age_ms(lock) < self.row_lock.life_ms(qs, lock) // 2
            and opts.linger()
        )

    def _committed(self, state: RowState, read: TakeRead, opts: TakeOptions) -> None:
        """A committed take: later reads may start past what it read (skips) and took (frontier)."""
        state.start.skip_to(read.skips, opts.accepts, self.clock.elapsed_ms())
        state.start.advance(read.frontier, read.sealed, self.clock)

    def _contended(self, qs: QueueSettings, state: RowState) -> None:
        self.stats.contention += 1
        metrics.CONTENTION.labels(qs.name).inc()
        state.contended(self.clock.elapsed_ms(), qs.lock_ttl_ms)

    async def _commit(
        self,
        qs: QueueSettings,
        state: RowState,
        lock: HeldLock,
        messages: list[Message],
        moves: dict[int, int],
        opts: TakeOptions,
        keep_lock: bool = False,
        flights: Flights | None = None,
    ) -> list[Message]:
        """The take: one single-partition batch (release lock, mark the taken in flight where they are, remove the
        poisoned, move the cursors). The in-memory cursors follow only once the batch is written.
        ``opts.visibility_ms`` replaces the messages' own timeout (a pulled message's visibility timeout).
        A standard queue's check entries (``flights``: what its scan found, engine/take/flights.py) ride in the same
        batch."""
        now = self.clock.now_ms()
        batch = self.db.batch()
        if not keep_lock:
            batch.add(self.row_lock.release_statement(lock))
        delivered: list[Message] = []
        doomed: list[tuple[Message, str]] = []
        chained: list[tuple[Message, Message]] = []
        for m in messages:
            reason = poison_reason(m, qs)
            if reason:  # a message stays at its position while it lives (engine/take/flights.py)
                batch.add(self.table.delete_message(m, m.due_ms))
            if reason:
                doomed.append((m, reason))
                continue
            nxt = chain.next_occurrence(m, now)
            if nxt is not None:  # written in this same batch: the schedule survives any crash
                batch.add(self.table.insert_message(nxt, now, qs.retention_s))
                chain.record_successor(m, nxt)  # stored with m's timeout column (engine/send/chain.py)
                chained.append((m, nxt))
            self._deliver(qs, m, now, opts)
            if qs.fifo:
                batch.add(self.table.insert_message(m, now, qs.retention_s))
            else:  # the narrow update: never the payload again
                batch.add(self.table.update_in_flight(m, now, qs.retention_s, pulled=opts.visibility_ms is not None))
            m.max_attempts = m.max_attempts or qs.max_attempts  # bound above as stored (0: follow the queue)
            delivered.append(m)
        cursors = state.start.moved(moves)
        for rank, value in cursors.items():
            batch.add(self.table.set_cursor.bind([rank, value, qs.name, lock.bucket, lock.shard]))
        if not state.start.anchored:  # once per row and process: cursor reads stop at it, not at the tombstones
            batch.add(self.table.write_anchor.bind([qs.name, lock.bucket, lock.shard]))
        for m, reason in doomed:  # into the poison queue before the batch removes them from the row
            await self.poison.add(m, reason, "Poisoned", m.last_error or reason, "", now, qs.retention_s)
            self.stats.poisoned += 1
            log.error("message_poisoned", queue=qs.name, task=m.task, id=str(m.id), attempt=m.attempt, reason=reason)
        written = [m.write_ts for m in messages]
        if not qs.fifo:
            spans, token = state.entry_spans, self.token
            written += check_entries(self.table, batch, qs, lock, delivered, flights or Flights(), now, spans, token)
        ts = after(*written, now_us=self.db.next_timestamp())
        trip()
        await self.db.run(batch, timestamp=ts)
        state.start.committed(cursors)  # committed: only now may later reads start past what was read
        for m in delivered:
            m.write_ts = ts
        await self._chain(qs, chained, ts, now)
        self.stats.takes += 1
        self.stats.taken += len(delivered)
        return delivered

    def _deliver(self, qs: QueueSettings, m: Message, now: int, opts: TakeOptions) -> None:
        """Mark ``m`` in flight where it is: attempt + 1, IN_FLIGHT, invisible until its timeout
        (or the pull's visibility) plus the hold."""
        if m.state == STATE_IN_FLIGHT:
            self.stats.timed_out += 1
            log.warning(
                "message_redelivered",
                queue=qs.name,
                task=m.task,
                id=str(m.id),
                attempt=m.attempt + 1,
                reason="timeout passed before an ack",
            )
        invisible_until = now + (m.timeout_ms if opts.visibility_ms is None else opts.visibility_ms) + opts.hold_ms
        into_flight(m, now, invisible_until, pulled=opts.visibility_ms is not None)

    async def _chain(self, qs: QueueSettings, chained: list[tuple[Message, Message]], ts: int, now: int) -> None:
        """After the batch: each schedule's key follows to the next occurrence written with it
        (engine/send/chain.py)."""
        if not chained:
            return
        crash_point("schedule.take_committed")
        for m, nxt in chained:
            nxt.write_ts = ts
            self.expect(nxt.bucket, nxt.shard, nxt.due_ms)  # written after our read: nothing else would tell us
            await chain.move_key(self.db, self.table, self.keys, qs, m, nxt, now)
        crash_point("schedule.key_moved")


def poison_reason(m: Message, qs: QueueSettings) -> str | None:
    """Why a message read for a take must leave the row instead (None: deliver it). Its
    attempts are counted against its own max_attempts, or, if it was sent with 0 ("follow the
    queue", what SQS sends store), against the queue's setting as it is now: a RedrivePolicy
    set, lowered or removed after the send applies, as in SQS. 0 there too: no limit."""
    if m.corrupt:
        return m.corrupt
    limit = m.max_attempts or qs.max_attempts
    if m.state == STATE_IN_FLIGHT and out_of_attempts(m.attempt, limit):
        return f"timed out on its last attempt ({m.attempt} of {limit})"
    return None

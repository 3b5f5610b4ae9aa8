"""The pull API: receive messages with a visibility timeout, then delete them or change it.

    deliveries = await cq.receive("jobs", max=10, wait=20, visibility=30)
    for d in deliveries:
        ...                                   # d.message.payload, d.message.attempt
        await cq.delete(d.receipt)            # or: await cq.change_visibility(d.receipt, 0)

A receive is the engine's take (engine/consume/consumer.py) with the timeout column placed at
``now + visibility``: a pulled message that is not deleted comes back exactly like a handler's that
timed out, with its attempt (= SQS's ApproximateReceiveCount) counted up, and goes to the poison
queue after the queue's ``max_attempts`` deliveries.

Delete and change-visibility locate the delivery from the receipt (engine/delivery/receipts.py) with one
point read: the timeout column at the receipt's position and, in the same read, a "moved" marker
(kind 2) if a visibility change moved that column. A change writes the column at its new position,
deletes the old one and points the marker at the new one, in one single-partition batch; so a
receipt stays valid across any number of changes, as SQS clients expect. A delivery matches only
if its attempt equals the receipt's: a receipt whose visibility expired (the message was taken
again) deletes nothing and can't change anything.

Long polls: see engine/wake/wakeups.py. Within a process a poll returns as soon as a message is sent,
falls due or is made visible again, or a wake hint from another process arrives (``Wakeups.notify``);
while it waits it reads nothing from Cassandra. Only the scout among a queue's parked polls re-reads,
at the slow safety cadence ``sqs.poll_interval`` (15 s), in case a hint was lost; a message made
visible again by another process's visibility change or expiry is found within the consumer's
``rescan_interval`` of the next read (docs/design.md, "Many queues").

Cost of a receive on an idle queue: the first in a process (cold) reads the queue's settings, the
cursors of all its rows in one request per shard, and peeks (per priority lane) the current bucket's
rows and the rows that exist; later ones (warm) peek the current bucket's row of each shard (and a
row whose rescan is due). Measured, idle: 1 x 1 3 cold / 1 warm; 16 x 24 33 / 16
(tests/test_many_queues.py, docs/design.md "Many queues").
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from daemon.base.clock import Clock
from daemon.base.errors import CasqueError, UsageError
from daemon.base.lru import Lru
from daemon.base.model import Message, QueueSettings
from daemon.engine.access.secrets import RECEIPT_KEY, SecretStore
from daemon.engine.consume.consumer import Consumer
from daemon.engine.consume.row_state import RowState
from daemon.engine.delivery.receipts import InvalidReceipt, Receipt, ReceiptSigner
from daemon.engine.delivery.receive_attempts import ReceiveAttempts
from daemon.engine.delivery.received import times
from daemon.engine.queues.store import QueueStore
from daemon.engine.send.keys import KeyStore
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import (
    KIND_MESSAGE,
    KIND_MOVED,
    STATE_IN_FLIGHT,
    MessageTable,
    after,
    message_from_row,
    ttl_for,
)
from daemon.engine.wake.wakeups import Wakeups

MAX_VISIBILITY_S = 12 * 3600
MAX_CONSUMERS = 1024  # config: cache.consumers
FILL_ROUNDS = 3


class NotInFlight(CasqueError):
    """The receipt's delivery is over: the message was deleted, or its visibility expired.
    ``gone``: the message is no longer in its row at all (deleted, or dead-lettered), as opposed
    to one still there but not in flight under this receipt (received again since)."""

    exit_code = 4

    def __init__(self, message: str, gone: bool = False) -> None:
        super().__init__(message)
        self.gone = gone


class VisibilityTooLong(UsageError):
    """A visibility change past ``MAX_VISIBILITY_S`` from the delivery's receive (SQS's 12 h cap)."""


@dataclass
class Delivery:
    """A received message and the receipt handle that deletes it or changes its visibility."""

    message: Message
    receipt: str
    received_ms: int


class Receiver:
    def __init__(
        self,
        db: Database,
        table: MessageTable,
        queues: QueueStore,
        keys: KeyStore,
        secrets: SecretStore,
        wakeups: Wakeups,
        clock: Clock,
        consumer_of: Callable[[str], Consumer],
        poll_interval_s: float = 15.0,
        max_consumers: int = MAX_CONSUMERS,
        touch: Callable[[str], None] | None = None,
        attempts: ReceiveAttempts | None = None,
        unblocked: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self.db = db
        self.table = table
        self.queues = queues
        self.keys = keys
        self.secrets = secrets
        self.wakeups = wakeups
        self.clock = clock
        self.consumer_of = consumer_of
        self.poll_interval_s = poll_interval_s
        self._consumers: Lru[str, Consumer] = Lru(
            max_consumers, self._evicted
        )  # the queues pulled from lately, not every queue
        self._unsubscribe: dict[str, Callable[[], None]] = {}
        self.touch = touch  # records activity for idle expiry (engine/cluster/reaper.py)
        self.attempts = attempts
        #: A FIFO group may move on (a delete, a visibility change to now): tell every process's
        #: consumers of the queue, not only this one's (queue, due ms, placement bits).
        self.unblocked = unblocked
        self._signer: ReceiptSigner | None = None
        self._slots = itertools.count()

    async def signer(self) -> ReceiptSigner:
        if self._signer is None:
            self._signer = ReceiptSigner(await self.secrets.get_or_create(RECEIPT_KEY))
        return self._signer

    # ---- receive ------------------------------------------------------------------------------
    async def receive(
        self,
        queue: str,
        limit: int = 10,
        wait_s: float = 20.0,
        visibility_s: float = 30.0,
        attempt_id: str | None = None,
    ) -> list[Delivery]:
        """Up to ``limit`` messages, waiting up to ``wait_s`` for the first one. ``attempt_id``
        (FIFO queues): a retry with the same id within 5 minutes returns the same deliveries
        while they are in flight (engine/delivery/receive_attempts.py)."""
        _check_number("max", limit, 1, 10_000, int)
        _check_number("wait", wait_s, 0, 3600)
        _check_number("visibility", visibility_s, 0, MAX_VISIBILITY_S)
        qs = await self.queues.get(queue)  # QueueNotFound before any waiting
        if self.touch is not None:
            self.touch(queue)
        if attempt_id is not None and qs.fifo and self.attempts is not None:
            again = await self._attempted(queue, attempt_id)
            if again:
                return again
            got = await self._receive(queue, qs, limit, wait_s, visibility_s)
            if got:
                await self.attempts.put(queue, attempt_id, [d.receipt for d in got])
            return got
        return await self._receive(queue, qs, limit, wait_s, visibility_s)

    async def _attempted(self, queue: str, attempt_id: str) -> list[Delivery]:
        """The deliveries an earlier receive with this attempt id returned, those still in flight."""
        assert self.attempts is not None
        receipts = await self.attempts.get(queue, attempt_id)
        if not receipts:
            return []
        signer = await self.signer()
        out = []
        for handle in receipts:
            m, _, _ = await self._locate(signer.open(handle, queue))
            if m is not None:
                out.append(Delivery(m, handle, self.clock.now_ms()))
        return out

    async def _receive(
        self, queue: str, qs: QueueSettings, limit: int, wait_s: float, visibility_s: float
    ) -> list[Delivery]:
        signer = await self.signer()
        consumer = self._consumer(queue)
        if not consumer.rows:
            await self._warm(consumer, qs)
        waiter = self.wakeups.enter(queue)
        scout = False
        deadline = time.monotonic() + wait_s
        slot = next(self._slots) % 64
        try:
            while True:
                generation = waiter.generation
                taken = await self._fill(consumer, limit, slot, int(visibility_s * 1000))
                if taken:
                    return self._deliveries(queue, consumer, signer, taken)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                coming = consumer.next_due()
                if coming is not None and coming > self.clock.now_ms():
                    waiter.at(coming)
                if not waiter.scouted:
                    waiter.scouted = scout = True
                await waiter.park(generation, min(remaining, self.poll_interval_s) if scout else remaining)
                if waiter.generation == generation and time.monotonic() >= deadline:
                    return []  # timed out, never woken: nothing new to read
        finally:
            if scout:
                waiter.scouted = False
            if not waiter.scouted:  # someone must keep polling: the next parked poll takes over
                waiter.handoff()
            self.wakeups.leave(queue, waiter)

    @staticmethod
    async def _fill(consumer: Consumer, limit: int, slot: int, visibility_ms: int) -> list[Message]:
        """A take from one row, topped up from the next rows while they yield (a few more takes at
        most): a client asking for 10 gets the 3 + 4 + 3 spread over three shards in one answer."""
        taken = await consumer.fetch(limit, slot, visibility_ms=visibility_ms)
        for _ in range(FILL_ROUNDS):
            if not taken or len(taken) >= limit:
                break
            more = await consumer.fetch(limit - len(taken), slot, visibility_ms=visibility_ms)
            if not more:
                break
            taken += more
        return taken

    def _deliveries(
        self, queue: str, consumer: Consumer, signer: ReceiptSigner, taken: list[Message]
    ) -> list[Delivery]:
        now = self.clock.now_ms()
        out = []
        for m in taken:
            due = (
                m.copy_due_ms if m.copy_due_ms is not None else m.due_ms
            )  # where the delivery is (a FIFO message's own position)
            visible = m.visible_at if m.visible_at is not None else due
            consumer.expect(m.bucket, m.shard, visible)  # visible again then, if not deleted by then
            self.wakeups.notify(queue, visible)
            out.append(Delivery(m, signer.issue(Receipt(queue, m.id, m.bucket, m.shard, m.rank, due, m.attempt)), now))
        return out

    def _consumer(self, queue: str) -> Consumer:
        """The queue's consumer, told of every send (a wake-up names the sent message's shard):
        a receive visits the named shards first, as a daemon's fetch does. Without it a take
        that filled its batch named only its own shard, and a backlog there kept the receives
        from every other shard (a message sent to another shard waited until it drained)."""
        c = self._consumers.get(queue)
        if c is None:
            c = self.consumer_of(queue)
            self._consumers.put(queue, c)
            self._unsubscribe[queue] = self.wakeups.subscribe(queue, c.hint)
        return c

    def _evicted(self, queue: str, _: Consumer) -> None:
        unsubscribe = self._unsubscribe.pop(queue, None)
        if unsubscribe is not None:
            unsubscribe()

    async def _warm(self, consumer: Consumer, qs: QueueSettings) -> None:
        """A cold consumer's first look: the cursors of every row of the queue, one request per
        shard (``bucket IN (...)``, read by the coordinator in parallel) instead of one per row
        read one after another as the consumer's visits come round. A row with no partition holds
        nothing: it is treated as one just peeked empty (looked at again at the next rescan, or
        at once if it is the current bucket's), so an idle queue is not peeked row by row."""
        shards, buckets = qs.span()
        results = await asyncio.gather(
            *(
                self.db.run(self.table.read_shard_cursors, [qs.name, list(range(buckets)), shard])
                for shard in range(shards)
            )
        )
        found = {(r.bucket, r.shard): dict(r.cursors or {}) for rows in results for r in rows}
        rescan_at = self.clock.now_ms() + consumer.rescan_ms
        for bucket in range(buckets):
            for shard in range(shards):
                state = consumer.rows.setdefault((bucket, shard), RowState())
                state.loaded = True
                cursors = found.get((bucket, shard))
                if cursors is None:
                    state.next_check = max(state.next_check, rescan_at)
                    continue
                for rank, value in cursors.items():
                    state.cursors[rank] = max(value, state.cursors.get(rank, 0))

    def consumers_cached(self) -> int:
        return len(self._consumers)

    def consumers(self) -> list[Consumer]:
        """The consumers of the queues pulled from lately (what ``casque serve`` sweeps)."""
        return self._consumers.values()

    # ---- delete and change visibility ---------------------------------------------------------
    async def delete(self, receipt: str, queue: str | None = None) -> bool:
        """Delete the delivery ``receipt`` names. True if it was current; False if the receipt is
        stale (already deleted, or its visibility expired): then nothing changes, like SQS."""
        r = (await self.signer()).open(receipt, queue)
        m, marker, _ = await self._locate(r)
        if m is None:
            return False
        if m.visible_at is not None:  # FIFO: in place, see _delete_in_place
            await self._delete_in_place(m)
            return True
        batch = self.db.batch()
        batch.add(self.table.delete_message(m, m.due_ms))
        if marker:
            batch.add(self.table.unmark_moved.bind([r.queue, r.bucket, r.shard, r.rank, r.due_ms, r.id]))
        await self.db.run(batch, timestamp=after(m.write_ts, now_us=self.db.next_timestamp()))
        if m.key:
            await self.keys.release(m.queue, m.key, m.id)
        return True

    async def _delete_in_place(self, m: Message) -> None:
        """A FIFO delivery is its message at its position: deleted with the write timestamp of
        that delivery exactly. A take that received it again meanwhile wrote it later, so this
        can't delete the newer delivery; a tie goes to the delete (Cassandra's rule). Then its
        group may move on: wake this process's and the other processes' consumers."""
        await self.db.run(self.table.delete_message(m, m.due_ms), timestamp=m.write_ts)
        if m.key:
            await self.keys.release(m.queue, m.key, m.id)
        self._unblock(m, self.clock.now_ms())

    def _unblock(self, m: Message, due_ms: int) -> None:
        self._consumer(m.queue).expect(m.bucket, m.shard, due_ms)
        self.wakeups.notify(m.queue, due_ms)
        if self.unblocked is not None:
            self.unblocked(m.queue, due_ms, m.id.int)

    async def change_visibility(self, receipt: str, seconds: float, queue: str | None = None) -> int:
        """Make the delivery visible again ``seconds`` from now (0: at once). Returns the new due
        time (ms). NotInFlight if the receipt's delivery is over."""
        _check_number("visibility", seconds, 0, MAX_VISIBILITY_S)
        r = (await self.signer()).open(receipt, queue)
        m, marker, present = await self._locate(r)
        if m is None:
            raise NotInFlight(
                "the message is not in flight under this receipt: it was deleted, or its visibility timeout expired; "
                "receive it again",
                gone=not present and not await self._still_there(r),
            )
        qs = await self.queues.get(r.queue)
        now = self.clock.now_ms()
        new_due = now + int(seconds * 1000)
        _, received = times(m.headers)
        if received is not None and new_due > received + MAX_VISIBILITY_S * 1000:
            raise VisibilityTooLong(
                f"visibility {seconds:g}s would end {(new_due - received) / 1000:.0f}s after the receive: "
                f"at most {MAX_VISIBILITY_S}s from the receive"
            )
        if m.visible_at is not None:  # FIFO: the message stays at its position, its visibility changes
            m.visible_at = new_due
            await self.db.run(
                self.table.insert_message(m, now, qs.retention_s),
                timestamp=after(m.write_ts, now_us=self.db.next_timestamp()),
            )
            self._unblock(m, new_due)
            return new_due
        batch = self.db.batch()
        if new_due != m.due_ms:
            batch.add(self.table.delete_message(m, m.due_ms))
        m.due_ms = m.copy_due_ms = new_due
        batch.add(self.table.insert_message(m, now, qs.retention_s))
        pk = [r.queue, r.bucket, r.shard, r.rank, r.due_ms, r.id]
        if new_due != r.due_ms:
            batch.add(self.table.mark_moved.bind(pk + [new_due, ttl_for(new_due, now, qs.retention_s)]))
        elif marker:
            batch.add(self.table.unmark_moved.bind(pk))
        await self.db.run(batch, timestamp=after(m.write_ts, now_us=self.db.next_timestamp()))
        self._consumer(r.queue).expect(r.bucket, r.shard, new_due)
        self.wakeups.notify(r.queue, new_due)
        return new_due

    async def delete_many(self, receipts: Iterable[str], queue: str | None = None) -> list[bool | Exception]:
        """Each receipt's outcome, in order: True/False as ``delete``, or the error for that one."""
        return await _each(receipts, lambda h: self.delete(h, queue))

    async def change_visibility_many(
        self, changes: Iterable[tuple[str, float]], queue: str | None = None
    ) -> list[int | Exception]:
        return await _each(changes, lambda c: self.change_visibility(c[0], c[1], queue))

    async def _locate(self, r: Receipt) -> tuple[Message | None, bool, bool]:
        """The current delivery a receipt names (None if its delivery is over), whether a moved
        marker points to it, and whether any message is there at all (so a deleted or re-received
        message is told apart from one still there under another attempt or state)."""
        rows = await self.db.run(self.table.read_at, [r.queue, r.bucket, r.shard, r.rank, r.due_ms, r.id])
        row = next((x for x in rows if x.kind == KIND_MESSAGE), None)
        marker = next((x for x in rows if x.kind == KIND_MOVED), None)
        if marker is not None and marker.moved_to is not None:
            moved = await self.db.run(self.table.read_at, [r.queue, r.bucket, r.shard, r.rank, marker.moved_to, r.id])
            row = next((x for x in moved if x.kind == KIND_MESSAGE), None)
        if row is None or row.state != STATE_IN_FLIGHT or (row.attempt or 0) != r.attempt:
            return None, marker is not None, row is not None
        m = message_from_row(r.queue, r.bucket, r.shard, row)
        m.copy_due_ms = m.due_ms
        return m, marker is not None, True

    async def _still_there(self, r: Receipt) -> bool:
        """Whether the receipt's message is anywhere in its row (received again since, say), as
        opposed to deleted. A filtered read of the row: only a stale receipt's error path pays it."""
        return bool(await self.db.run(self.table.read_id, [r.queue, r.bucket, r.shard, r.id]))


async def _each(items: Iterable[Any], one: Callable[[Any], Any]) -> list[Any]:
    """Run ``one`` on every item concurrently; per-item errors are returned, not raised."""
    results = await asyncio.gather(*(one(i) for i in items), return_exceptions=True)
    for res in results:
        if isinstance(res, BaseException) and not isinstance(res, Exception):
            raise res
    return list(results)


def _check_number(name: str, value: Any, lo: float, hi: float, kind: type = float) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (kind is float or isinstance(value, int))
    if not ok or not lo <= value <= hi:
        what = "an integer" if kind is int else "a number of seconds"
        raise UsageError(f"invalid {name} {value!r}: use {what} from {lo:g} to {hi:g}")


__all__ = ["Delivery", "InvalidReceipt", "NotInFlight", "Receiver", "VisibilityTooLong"]

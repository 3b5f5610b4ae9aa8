"""Settling a pulled delivery: delete it, or change its visibility, from its receipt.

The pull API's other half (the receive is engine/delivery/receive.py). Delete and change-visibility
locate the delivery from the receipt (engine/delivery/receipts.py) with one point read: a message in flight
stays where it was sent, the receipt's position. A visibility change writes its new ``visible_at`` there
(a standard queue's: narrow, with an escape entry, engine/take/flights.py), so a receipt stays valid across any
number of changes, as SQS clients expect. A delivery matches only if its attempt equals the receipt's: a receipt
whose visibility expired (the message was taken again) can't change anything. A receipt issued for a delivery in
the copy layout (before it was removed) names a position where nothing is: it is stale (docs/sqs.md).

``delete_batch`` (the SQS face's DeleteMessage and DeleteMessageBatch): one read for the batch (with the other
deletes of its queue in that turn of the loop, base/turns.py), then one unlogged batch of deletes, each at its
receipt's position *with the write timestamp of that delivery* (the receipt carries
it, engine/delivery/receipts.py). On a standard queue a newer delivery is a narrow update of the same row, so a
delete at an older timestamp would still remove the message (the ghost, engine/take/flights.py): the read is of the
receipts' messages' attempts, and a receipt whose message was received again since deletes nothing, as in SQS.
(A take between that read and the delete, in the few ms between them, is the one case where a stale receipt
finishes the message: its first receiver did process it; docs/sqs.md.) A FIFO delivery is rewritten whole, so a
delete at the older timestamp can't touch a newer one; a FIFO visibility change rewrote it later and left a "moved"
marker (kind 2) naming the delivery (its attempt) at the change's timestamp, which the read finds: the delete
follows it with that timestamp. A marker of another delivery is not followed. Keyed messages, version 1 receipts
and markers written before markers named their delivery take the checked path (``delete``), which reads first.
A FIFO receipt whose visibility has ended (its timeout ran out, or was changed to 0, whether or not the message was
received again since) deletes nothing and is refused (``ReceiptExpired``), as SQS refuses it on a FIFO queue: the
FIFO read is of the message too (the same request), whose ``visible_at`` and attempt say so. A visibility that ends
between that read and the delete's write (a few ms) is the bound: that delete still lands.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from daemon.base.clock import Clock
from daemon.base.errors import CasqueError, UsageError
from daemon.base.model import Message
from daemon.base.turns import TurnGroups
from daemon.engine.consume.consumer import Consumer
from daemon.engine.delivery.receipts import InvalidReceipt, Receipt, ReceiptSigner
from daemon.engine.queues.store import QueueStore
from daemon.engine.send.keys import KeyStore
from daemon.engine.storage.db import Database
from daemon.engine.storage.in_flight import in_place_change
from daemon.engine.storage.received import times
from daemon.engine.storage.table import (
    KIND_MESSAGE,
    KIND_MOVED,
    STATE_IN_FLIGHT,
    MessageTable,
    after,
    escape_id,
    message_from_row,
    ttl_for,
)
from daemon.engine.wake.wakeups import Wakeups

MAX_VISIBILITY_S = 12 * 3600


class NotInFlight(CasqueError):
    """The receipt's delivery is over: the message was deleted, or its visibility expired.
    ``gone``: the message is no longer in its row at all (deleted, or dead-lettered), as opposed
    to one still there but not in flight under this receipt (received again since)."""

    exit_code = 4

    def __init__(self, message: str, gone: bool = False) -> None:
        super().__init__(message)
        self.gone = gone


class ReceiptExpired(CasqueError):
    """A FIFO delivery's delete after its visibility ended: SQS refuses it (another receiver may have the message)."""

    exit_code = 4


class VisibilityTooLong(UsageError):
    """A visibility change past ``MAX_VISIBILITY_S`` from the delivery's receive (SQS's 12 h cap)."""


class Settler:
    """Deletes deliveries and changes their visibility. It shares the receiver's signer and
    consumers (``signer``, ``consumer_of``): a settled delivery tells the consumer that took it
    when its row has something due again."""

    def __init__(
        self,
        db: Database,
        table: MessageTable,
        queues: QueueStore,
        keys: KeyStore,
        wakeups: Wakeups,
        clock: Clock,
        signer: Callable[[], Awaitable[ReceiptSigner]],
        consumer_of: Callable[[str], Consumer],
        unblocked: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self.db = db
        self.table = table
        self.queues = queues
        self.keys = keys
        self.wakeups = wakeups
        self.clock = clock
        self.signer = signer
        self.consumer_of = consumer_of
        #: A FIFO group may move on (a delete, a visibility change to now): tell every process's
        #: consumers of the queue, not only this one's (queue, due ms, placement bits).
        self.unblocked = unblocked
        #: A queue's blind deletes of one turn of the loop (concurrent DeleteMessage calls): one read, one batch.
        self.deletes: TurnGroups[Receipt, set[Receipt]] = TurnGroups()

    async def delete(self, receipt: str, queue: str | None = None) -> bool:
        """Delete the delivery ``receipt`` names. True if it was current; False if the receipt is
        stale (already deleted, or its visibility expired): then nothing changes, like SQS."""
        return await self._delete_opened((await self.signer()).open(receipt, queue))

    async def _delete_opened(self, r: Receipt) -> bool:
        """``delete`` of a receipt already opened (and so already checked)."""
        m, marker, _ = await self.locate(r)
        if m is None:
            return False
        if (await self.queues.get(r.queue)).fifo:
            await self._delete_fifo(m, r if marker else None)
            return True
        gone = after(m.write_ts, now_us=self.db.next_timestamp())
        if r.escaped and m.visible_at is not None:
            batch = self.db.batch()
            batch.add(self.table.delete_message(m, m.due_ms))
            batch.add(self._escape(r, m.visible_at))
            await self.db.run(batch, timestamp=gone)
        else:
            await self.db.run(self.table.delete_message(m, m.due_ms), timestamp=gone)
        if m.key:
            await self.keys.release(m.queue, m.key, m.id)
        return True

    async def _delete_fifo(self, m: Message, marked: Receipt | None = None) -> None:
        """A FIFO delivery is its message at its position: deleted with the write timestamp of
        that delivery exactly. A take that received it again meanwhile wrote it later, so this
        can't delete the newer delivery; a tie goes to the delete (Cassandra's rule). Then its
        group may move on: wake this process's and the other processes' consumers. ``marked``:
        a visibility change left its marker at the position, which goes with it."""
        if marked is None:
            await self.db.run(self.table.delete_message(m, m.due_ms), timestamp=m.write_ts)
        else:
            batch = self.db.batch()
            batch.add(self.table.delete_message(m, m.due_ms))
            batch.add(self.table.unmark_moved.bind(_pk(marked)))
            await self.db.run(batch, timestamp=m.write_ts)
        if m.key:
            await self.keys.release(m.queue, m.key, m.id)
        self._unblock(m, self.clock.now_ms())

    def _unblock(self, m: Message | Receipt, due_ms: int) -> None:
        self.consumer_of(m.queue).names.expect(m.bucket, m.shard, due_ms)
        self.wakeups.notify(m.queue, due_ms)
        if self.unblocked is not None:
            self.unblocked(m.queue, due_ms, m.id.int)

    async def change_visibility(self, receipt: str, seconds: float, queue: str | None = None) -> int:
        """Make the delivery visible again ``seconds`` from now (0: at once). Returns the new due
        time (ms). NotInFlight if the receipt's delivery is over."""
        check_number("visibility", seconds, 0, MAX_VISIBILITY_S)
        r = (await self.signer()).open(receipt, queue)
        qs = await self.queues.get(r.queue)
        # A standard queue's earlier receipt of a message received again changes the current delivery, as SQS
        # does (checked against AWS in getmoto/moto#4655); a FIFO queue's names only its own delivery.
        m, marker, present = await self.locate(r, any_attempt=not qs.fifo)
        if m is None:
            raise NotInFlight(
                "the message is not in flight under this receipt: it was deleted, or its visibility timeout expired; "
                "receive it again",
                gone=not present and not await self._still_there(r),
            )
        now = self.clock.now_ms()
        new_due = now + int(seconds * 1000)
        _, received = times(m.headers)
        if received is not None and new_due > received + MAX_VISIBILITY_S * 1000:
            raise VisibilityTooLong(
                f"visibility {seconds:g}s would end {(new_due - received) / 1000:.0f}s after the receive: "
                f"at most {MAX_VISIBILITY_S}s from the receive"
            )
        m.visible_at = new_due
        if not qs.fifo:  # narrow, with an escape entry at the new time (engine/take/flights.py): no marker
            batch = in_place_change(self.db, self.table, m, now, qs.retention_s, escape=True)
            await self.db.run(batch, timestamp=after(m.write_ts, now_us=self.db.next_timestamp()))
            self._unblock(m, new_due)  # other processes too: their polls may trust an empty look (idle_look.py)
            return new_due
        batch = self.db.batch()  # FIFO: the message written again at its position, its visibility changed
        batch.add(self.table.insert_message(m, now, qs.retention_s))
        # The marker names this delivery and, by its write timestamp, the rewrite: a blind delete
        # (``delete_batch``) deletes the message at that timestamp, not the take's.
        ttl = ttl_for(max(m.due_ms, new_due), now, qs.retention_s)
        batch.add(self.table.mark_moved_by.bind(_pk(r) + [r.due_ms, m.attempt, ttl]))
        await self.db.run(batch, timestamp=after(m.write_ts, now_us=self.db.next_timestamp()))
        self._unblock(m, new_due)
        return new_due

    async def delete_many(self, receipts: Iterable[str], queue: str | None = None) -> list[bool | Exception]:
        """Each receipt's outcome, in order: True/False as ``delete``, or the error for that one."""
        return await _each(receipts, lambda h: self.delete(h, queue))

    async def delete_batch(
        self, receipts: list[str], queue: str | None = None
    ) -> list[InvalidReceipt | ReceiptExpired | None]:
        """Delete each receipt's delivery without reading it (module doc): None for each receipt
        taken, or the InvalidReceipt refusing it, or ReceiptExpired for a FIFO delivery whose
        visibility ended. Whether a standard delivery was still current is not known (SQS's
        DeleteMessage answers the same either way). Two requests for a batch of one queue's
        receipts: the markers' read, then one unlogged batch of deletes (a FIFO delivery also
        wakes its group's consumers, as ``delete`` does)."""
        signer = await self.signer()
        out: list[InvalidReceipt | ReceiptExpired | None] = []
        blind: dict[str, list[tuple[int, Receipt]]] = {}  # each queue's receipts, with their place in ``out``
        checked: list[Receipt] = []
        for handle in receipts:
            try:
                r = signer.open(handle, queue)
            except InvalidReceipt as exc:
                out.append(exc)
                continue
            out.append(None)
            if _copy_layout(r):  # stale: nothing to delete
                continue
            if r.write_ts is None or r.keyed:  # a version 1 receipt, or a key to release: the checked path
                checked.append(r)
            else:
                blind.setdefault(r.queue, []).append((len(out) - 1, r))
        expired, _ = await asyncio.gather(
            asyncio.gather(*(self.deletes.join(q, [r for _, r in rs], self._delete_blind) for q, rs in blind.items())),
            asyncio.gather(*(self._delete_opened(r) for r in checked)),
        )
        late: set[Receipt] = set().union(*expired)
        for i, r in (x for rs in blind.values() for x in rs):
            if r in late:
                out[i] = ReceiptExpired("the receipt's visibility ended: receive the message again to delete it")
        return out

    async def _delete_blind(self, rs: list[Receipt]) -> set[Receipt]:
        """One queue's receipts: one read at their positions (one request), then one batch of deletes at the
        deliveries' own write timestamps. A standard queue's read is of the messages' attempts: a receipt whose
        message was received again since (another attempt) or is gone deletes nothing. A FIFO queue's is of the
        visibility changes' markers and of the messages; a receipt whose marker predates markers naming their
        delivery is deleted by the checked path. Returns the FIFO receipts refused: their visibility ended."""
        q = rs[0].queue
        fifo = (await self.queues.get(q)).fifo
        kinds = (KIND_MOVED, KIND_MESSAGE) if fifo else (KIND_MESSAGE,)
        found = {
            (x.kind, x.bucket, x.shard, x.rank, x.due, x.id): x
            for x in await self.db.run(
                self.table.read_marks,
                [
                    q,
                    sorted({r.bucket for r in rs}),
                    sorted({r.shard for r in rs}),
                    [(k, r.rank, r.due_ms, r.id) for r in rs for k in kinds],
                ],
            )
        }
        batch = self.db.batch()
        older: list[Receipt] = []
        expired: set[Receipt] = set()
        now = self.clock.now_ms()
        for r in rs:
            at = [r.queue, r.bucket, r.shard, KIND_MESSAGE, r.rank]
            msg = found.get((KIND_MESSAGE, r.bucket, r.shard, r.rank, r.due_ms, r.id))
            if not fifo:  # the message itself: deleted only under its current delivery
                if msg is not None and msg.attempt == r.attempt:
                    batch.add(self.table.delete_at.bind([r.write_ts, *at, r.due_ms, r.id]))
                    if r.escaped and msg.visible_at is not None:
                        batch.add(self._escape(r, msg.visible_at))
                continue
            if msg is not None and (msg.attempt != r.attempt or _visible(msg, now)):
                expired.add(r)  # its visibility ended (received again since, or not yet): SQS refuses the delete
                continue
            mark = found.get((KIND_MOVED, r.bucket, r.shard, r.rank, r.due_ms, r.id))
            if mark is not None and mark.attempt is None:
                older.append(r)
                continue
            batch.add(self.table.delete_at.bind([r.write_ts, *at, r.due_ms, r.id]))
            if mark is not None and mark.attempt == r.attempt and mark.moved_to is not None:
                batch.add(self.table.delete_at.bind([mark.wt, *at, mark.moved_to, r.id]))
                batch.add(
                    self.table.delete_at.bind([mark.wt, r.queue, r.bucket, r.shard, KIND_MOVED, r.rank, r.due_ms, r.id])
                )
        jobs = [self._delete_opened(r) for r in older]
        if len(batch):
            jobs.append(self.db.run(batch))
        await asyncio.gather(*jobs)
        for r in rs:
            if fifo and r not in older and r not in expired:  # its FIFO group may move on
                self._unblock(r, now)
        return expired

    def _escape(self, r: Receipt, visible_at: int) -> Any:
        """The delete of a caught delivery's escape (receipts.py), due at its visibility's end: it was there only to
        bring the message back, so it goes with the message, and the row settles with no sweep of its entries
        (engine/consume/sweep.py ``_spent``). Timestamped now, so a visibility change's escape goes too."""
        gone = after(r.write_ts or 0, now_us=self.db.next_timestamp())
        return self.table.delete_at.bind(
            [gone, r.queue, r.bucket, r.shard, KIND_MESSAGE, r.rank, visible_at, escape_id(r.id)]
        )

    async def change_visibility_many(
        self, changes: Iterable[tuple[str, float]], queue: str | None = None
    ) -> list[int | Exception]:
        return await _each(changes, lambda c: self.change_visibility(c[0], c[1], queue))

    async def locate(self, r: Receipt, any_attempt: bool = False) -> tuple[Message | None, bool, bool]:
        """The current delivery a receipt names (None if its delivery is over), whether a FIFO visibility change
        marked it, and whether any message is there at all (so a deleted or re-received
        message is told apart from one still there under another attempt or state). ``any_attempt``: the
        message's current delivery, if it is in flight, whichever receive the receipt came from."""
        if _copy_layout(r):
            return None, False, False
        rows = await self.db.run(self.table.read_at, [r.queue, r.bucket, r.shard, r.rank, r.due_ms, r.id])
        row = next((x for x in rows if x.kind == KIND_MESSAGE), None)
        marker = next((x for x in rows if x.kind == KIND_MOVED), None)  # a FIFO visibility change's
        stale = not any_attempt and (row is None or (row.attempt or 0) != r.attempt)
        if row is None or row.task is None or row.state != STATE_IN_FLIGHT or stale:
            return None, marker is not None, row is not None and row.task is not None  # no task: a ghost, deleted
        m = message_from_row(r.queue, r.bucket, r.shard, row)
        m.copy_due_ms = m.due_ms
        return m, marker is not None, True

    async def _still_there(self, r: Receipt) -> bool:
        """Whether the receipt's message is anywhere in its row (received again since, say), as
        opposed to deleted. A filtered read of the row: only a stale receipt's error path pays it."""
        rows = await self.db.run(self.table.read_id, [r.queue, r.bucket, r.shard, r.id])
        return any(x.task is not None for x in rows)  # no task: a standard queue's ghost, deleted (take/flights.py)


def _visible(row: Any, now: int) -> bool:
    """A FIFO message row read by ``_delete_blind``: no longer in flight, or its visibility ended."""
    return row.state != STATE_IN_FLIGHT or (row.visible_at is not None and row.visible_at <= now)


def _copy_layout(r: Receipt) -> bool:
    """A version 2 receipt issued for a delivery in the copy layout (before it was removed): it names a timeout
    column no take writes any more, so it is stale (docs/sqs.md). Every delivery since is its message in place."""
    return r.write_ts is not None and not r.in_place


def _pk(r: Receipt) -> list[Any]:
    """The primary key of a receipt's position (without the kind)."""
    return [r.queue, r.bucket, r.shard, r.rank, r.due_ms, r.id]


async def _each(items: Iterable[Any], one: Callable[[Any], Any]) -> list[Any]:
    """Run ``one`` on every item concurrently; per-item errors are returned, not raised."""
    results = await asyncio.gather(*(one(i) for i in items), return_exceptions=True)
    for res in results:
        if isinstance(res, BaseException) and not isinstance(res, Exception):
            raise res
    return list(results)


def check_number(name: str, value: Any, lo: float, hi: float, kind: type = float) -> None:
    """A usage error unless ``value`` is a number (an int for ``kind`` int) within [lo, hi]."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (kind is float or isinstance(value, int))
    if not ok or not lo <= value <= hi:
        what = "an integer" if kind is int else "a number of seconds"
        raise UsageError(f"invalid {name} {value!r}: use {what} from {lo:g} to {hi:g}")

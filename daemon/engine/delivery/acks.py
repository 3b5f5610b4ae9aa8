"""Finishing a delivered message: ack, retry later, poison, or extend its timeout.

Each of these touches only the message's own row, so each is one single-partition write (acks of
many messages are grouped into one batch per row). Every write is timestamped after the delivery's
own (``write_ts``), so a writer whose clock lags can't lose to the write it follows.

A message in flight stays where it was sent (docs/design.md, "In flight"): an ack deletes it there, so an ack
that comes after its timeout passed and another delivery took it deletes the redelivered message too. That is
at-least-once still: the handler ran.
"""

from __future__ import annotations

from collections import defaultdict

from daemon.base.clock import Clock
from daemon.base.crashpoints import crash_point, pause_point
from daemon.base.model import Message
from daemon.engine.delivery.poison import PoisonStore
from daemon.engine.queues.store import QueueStore
from daemon.engine.send import chain
from daemon.engine.send.keys import KeyStore
from daemon.engine.storage.db import Database
from daemon.engine.storage.in_flight import in_place_change
from daemon.engine.storage.table import STATE_BACKOFF, MessageTable, after


class Acker:
    def __init__(
        self, db: Database, table: MessageTable, queues: QueueStore, keys: KeyStore, poison: PoisonStore, clock: Clock
    ) -> None:
        self.db = db
        self.table = table
        self.queues = queues
        self.keys = keys
        self.poison_store = poison
        self.clock = clock

    async def ack(self, messages: list[Message], release_keys: bool = True) -> None:
        """Delete the messages (one batch per row), then free the keys of finished messages."""
        crash_point("ack.write")  # the window between a message's in-flight write and its ack (the fault tests)
        pause_point("ack.write")
        rows: dict[tuple[str, int, int], list[Message]] = defaultdict(list)
        for m in messages:
            rows[(m.queue, m.bucket, m.shard)].append(m)
        for group in rows.values():
            batch = self.db.batch()
            for m in group:
                batch.add(self.table.delete_message(m, _copy_due(m)))
            await self.db.run(batch, timestamp=after(*(m.write_ts for m in group), now_us=self.db.next_timestamp()))
        if any(m.trigger for m in messages):
            crash_point("schedule.acked")
        if release_keys:
            for m in messages:
                if m.key:
                    await self._finish_key(m)

    async def _finish_key(self, m: Message) -> None:
        """Free the key of a finished message, if it still names it. A schedule's occurrence with
        a successor hands a key that still names it (left behind by a crash) to the successor
        instead: releasing it would end the schedule (engine/send/chain.py)."""
        successor = chain.successor_entry(m, self.clock.now_ms())
        if successor is not None:
            await self.keys.repoint(successor, m.id)
        else:
            await self.keys.release(m.queue, m.key or "", m.id)

    async def retry(self, m: Message, delay_ms: int, error: str) -> None:
        """Make the message visible again after ``delay_ms``, where it is. The attempt count stays: the next take
        counts the next attempt. A standard queue's: BACKOFF, narrow, with an escape entry that finds it then
        (engine/take/flights.py); a FIFO one's stays in flight (its group waits) until the retry."""
        qs = await self.queues.get(m.queue)
        now = self.clock.now_ms()
        m.last_error = error[:500]
        m.visible_at = now + delay_ms
        if qs.fifo:
            await self._rewrite(m, now, qs.retention_s)
            return
        m.state = STATE_BACKOFF
        await self._write_in_place(m, now, qs.retention_s, escape=True)

    async def poison(self, m: Message, reason: str, error_type: str = "", error: str = "", tb: str = "") -> None:
        """Record in the poison queue first, then remove from the row: a crash in between leaves
        the message in both places (it is poisoned again), never in neither."""
        qs = await self.queues.get(m.queue)
        await self.poison_store.add(m, reason, error_type, error or reason, tb, self.clock.now_ms(), qs.retention_s)
        await self.ack([m])

    async def extend_ms(self, m: Message, run_ms: int) -> None:
        """Move the message's visibility to now + ``run_ms`` (for long work), in one write. Later only, on a standard
        queue: the entry that covers it comes first, and moves it on (engine/take/flights.py)."""
        qs = await self.queues.get(m.queue)
        now = self.clock.now_ms()
        old_visible = m.visible_at
        m.visible_at = now + run_ms
        try:
            if qs.fifo:
                await self._rewrite(m, now, qs.retention_s)
            else:
                await self._write_in_place(m, now, qs.retention_s, escape=False)
        except BaseException:  # not known to be written: assume the earlier time (the safe side)
            m.visible_at = old_visible
            raise

    async def _write_in_place(self, m: Message, now: int, retention_s: int, escape: bool) -> None:
        """A standard message's new delivery state (``in_flight.in_place_change``), timestamped after its last."""
        ts = after(m.write_ts, now_us=self.db.next_timestamp())
        await self.db.run(in_place_change(self.db, self.table, m, now, retention_s, escape), timestamp=ts)
        m.write_ts = ts

    async def _rewrite(self, m: Message, now: int, retention_s: int) -> None:
        """A FIFO message written again at its position (an overwrite), timestamped after its last."""
        ts = after(m.write_ts, now_us=self.db.next_timestamp())
        await self.db.run(self.table.insert_message(m, now, retention_s), timestamp=ts)
        m.write_ts = ts


def _copy_due(m: Message) -> int:
    return m.copy_due_ms if m.copy_due_ms is not None else m.due_ms

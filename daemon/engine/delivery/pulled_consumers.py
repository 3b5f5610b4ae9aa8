"""The consumers of the queues pulled from lately: one per queue, kept in an LRU that keeps every queue received from
within ``ONLINE_S`` (its owner is online) and ``max_consumers`` idle ones besides, not one per queue that ever was.
Each is told of its queue's wake-ups while it is cached, and warmed on its first receive with one read per shard.
Used by the receives (engine/delivery/receive.py) and the settles that tell a consumer what they changed
(engine/delivery/settle.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from daemon.base.clock import Clock
from daemon.base.lru import ONLINE_S, Lru
from daemon.base.model import QueueSettings
from daemon.engine.consume.consumer import Consumer
from daemon.engine.delivery.idle_look import IdleLook
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import MessageTable
from daemon.engine.take.row_state import RowState
from daemon.engine.wake.wakeups import Wakeups


class PulledConsumers:
    """The pulled queues' consumers, by queue (see the module's docstring)."""

    def __init__(
        self,
        db: Database,
        table: MessageTable,
        clock: Clock,
        wakeups: Wakeups,
        look: IdleLook,
        consumer_of: Callable[[str], Consumer],
        max_consumers: int,
    ) -> None:
        self.db, self.table, self.clock, self.wakeups, self.look = db, table, clock, wakeups, look
        self.consumer_of = consumer_of
        self._consumers: Lru[str, Consumer] = Lru(max_consumers, self._evicted, keep_s=ONLINE_S)
        self._unsubscribe: dict[str, Callable[[], None]] = {}

    def get(self, queue: str) -> Consumer:
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

    def cached(self, queue: str) -> Consumer | None:
        """The queue's consumer if one is cached, without making one."""
        return self._consumers.get(queue)

    def _evicted(self, queue: str, _: Consumer) -> None:
        unsubscribe = self._unsubscribe.pop(queue, None)
        if unsubscribe is not None:
            unsubscribe()

    async def warm(self, consumer: Consumer, qs: QueueSettings) -> None:
        """A cold consumer's first look: the cursors of every row of the queue, one request per
        shard (``bucket IN (...)``, read by the coordinator in parallel) instead of one per row
        read one after another as the consumer's visits come round. A row with no partition holds
        nothing: it is treated as one just peeked empty (looked at again at the next rescan, or
        at once if it is the current bucket's), so an idle queue is not peeked row by row."""
        consumer.last_settings = qs  # from now on a send's wake-up names its row (``Consumer.hint``)
        shards, buckets = qs.span()
        results = await asyncio.gather(
            *(
                self.db.run(self.table.read_shard_cursors, [qs.name, list(range(buckets)), shard])
                for shard in range(shards)
            )
        )
        found = {(r.bucket, r.shard): dict(r.cursors or {}) for rows in results for r in rows}
        now = self.clock.now_ms()
        if not found:  # no row has a partition: this read was the look, and found nothing anywhere
            self.look.remember_empty(consumer, qs, now)
        rescan_at = now + consumer.rescan_ms
        for bucket in range(buckets):
            for shard in range(shards):
                state = consumer.rows.setdefault((bucket, shard), RowState())
                cursors = found.get((bucket, shard))
                state.start.loaded_from_store(cursors or {})
                if cursors is None:
                    state.next_check = max(state.next_check, rescan_at)
                    # Empty now: whatever is written later falls due at or after now - tolerance (the
                    # cursor rule), so its lanes' cursors may start there (the one-request look reads
                    # every row from the lowest cursor, engine/delivery/idle_look.py).
                    for rank in qs.ranks():
                        state.start.move(rank, now - consumer.tolerance_ms)

    def __len__(self) -> int:
        return len(self._consumers)

    def values(self) -> list[Consumer]:
        return self._consumers.values()

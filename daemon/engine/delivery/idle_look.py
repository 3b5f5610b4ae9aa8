"""An empty receive's look in one request: is anything due in the rows a fetch would visit now?

A receive on a standard queue used to find out that nothing is due by the consumer's round of
shards: one peek per shard, one after another (16 requests on a 16-shard queue before a long poll
could park, and again at each of the scout's safety re-reads). The rows a fetch visits now are
known in memory (``rows_to_check``: every shard's current row, the previous one within the clock
tolerance, the rows whose rescan has come), and so are their cursors. One read asks every one of
them for its first message from the lowest of those cursors (``bucket IN`` x ``shard IN``,
``PER PARTITION LIMIT 1``): no answer says nothing is due in any of them, and the receive parks
without a fetch; an answer below the take-ahead means work, and the receive takes from those rows
at once (the fetch's ``rows``: no peek of its own, no round of the other shards).

What it rests on: the rows and bounds are the fetch's own (a message the look can't see, the fetch
wouldn't have seen either), and reading from the lowest cursor reads at least what each row's own
peek would. What it costs the node: the tombstones between the lowest cursor and each row's own,
so the look is only made while every cursor is recent (within ``STALE_MS`` of now); otherwise, on
a FIFO queue (whose rows are read whole by their takes), the fetch runs as before. A shard a
wake-up named (a send, a take that filled its batch, a visibility change of ours) is covered: the
name made the row it falls in rescan-due, so the look reads it, and a look that found nothing
forgets the names it covered, as a fetch's visit does. As a peek does, a row with nothing due has
its lanes' cursors moved up to ``now - tolerance`` (in memory) and its next rescan set; a message
seen coming within the lookahead (one lane) sets the row's wake time, which the parked poll's
timer follows.
"""

from __future__ import annotations

from daemon.base.clock import Clock
from daemon.base.model import QueueSettings
from daemon.engine.consume.consumer import Consumer
from daemon.engine.consume.row_state import RowState, next_rescan, rows_to_check
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import MessageTable

#: A cursor further behind now than this (plus the tolerance) is not read from: the look would scan
#: every row's tombstones from there. A rescan (at most ``rescan_ms``) brings each row's cursor up.
STALE_MS = 30_000


Row = tuple[int, int]  # (bucket, shard)


class IdleLook:
    def __init__(self, db: Database, table: MessageTable, clock: Clock) -> None:
        self.db, self.table, self.clock = db, table, clock

    async def due_rows(self, consumer: Consumer, qs: QueueSettings) -> list[Row] | None:
        """The rows ``consumer``'s fetch would visit now that one read found something due in,
        oldest first ([]: nothing due anywhere, the receive may park); None when the look can't be
        made (FIFO, a row not loaded or being taken from, a cursor too old): fetch as before."""
        now = self.clock.now_ms()
        horizon = now + consumer.ahead_ms
        if qs.fifo:
            return None
        rows = [
            (b, shard)
            for shard in range(qs.span()[0])
            for b in sum(rows_to_check(consumer.rows, qs, shard, now, consumer.tolerance_ms), [])
        ]
        states = [consumer.rows.get(row) for row in rows]
        ranks = qs.ranks()
        safe = now - consumer.tolerance_ms
        if any(st is None or not st.loaded or st.busy for st in states):
            return None
        low = min(st.cursors.get(rank, 0) for st in states if st is not None for rank in ranks)
        if low < safe - STALE_MS:
            return None
        one_lane = len(ranks) == 1
        until = now + max(consumer.lookahead_ms, consumer.ahead_ms) if one_lane else horizon
        found = await self.db.run(
            self.table.peek_rows,
            [qs.name, sorted({b for b, _ in rows}), sorted({s for _, s in rows}), ranks, low, until],
        )
        first = {(r.bucket, r.shard): r.due for r in found}
        due = sorted((row for row in rows if first.get(row, horizon + 1) <= horizon), key=lambda row: first[row])
        if due and not one_lane:  # lanes: the fetch's own order (highest lane first, the top-lane check)
            return None
        if due:  # taken from at once (no peek), oldest first; named, so the top-ups go to the others next
            for bucket, shard in due:
                consumer.rows[(bucket, shard)].next_check = now
                consumer.names.name(shard, first[(bucket, shard)])
            return due
        consumer.stats.peeks += len(rows)
        for row, st in zip(rows, states):
            assert st is not None
            coming = first.get(row)
            if st.wake <= horizon:  # passed: what is there now is what this read saw
                st.wake = RowState.wake
            if coming is not None:
                st.wake = min(st.wake, coming)
            target = safe if coming is None else min(coming, safe)
            for rank in ranks:
                if target > st.cursors.get(rank, 0):
                    st.cursors[rank] = target
            st.named = False
            st.next_check = min(next_rescan(now, consumer.rescan_ms), st.wake - consumer.ahead_ms)
        for shard in range(qs.span()[0]):  # what named them is covered: their rows were rescan-due, so read
            consumer.names.visited(shard, horizon)
        return []

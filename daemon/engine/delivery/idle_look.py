"""An empty receive's look in one request: is anything due in the rows a fetch would visit now?

By the consumer's round of shards, a receive on a standard queue finds out that nothing is due
with one peek per shard, one after another (a request per shard before a long poll can park, and
again at each wake-up). The rows a fetch visits now are
known in memory (``rows_to_check``: every shard's current row, the previous one within the clock
tolerance, the rows whose rescan has come), and so are their cursors. One read asks every one of
them for its first message from the lowest of those cursors (``bucket IN`` x ``shard IN``,
``PER PARTITION LIMIT 1``): no answer says nothing is due in any of them, and the receive parks
without a fetch; an answer below the take-ahead means work, and the receive takes from those rows
at once (the fetch's ``rows``: no peek of its own, no round of the other shards).

What it rests on: the rows and bounds are the fetch's own (a message the look can't see, the fetch
wouldn't have seen either), and reading from the lowest cursor reads at least what each row's own
peek would. What it costs the node beyond those peeks: the tombstones between the lowest cursor and
each row's own, so the look is only made while the rows' cursors lie within ``STALE_MS`` of each
other (however old they are: a row's own peek reads from its cursor too); otherwise, and on a FIFO
queue (whose rows are read whole by their takes), the fetch runs as before. A shard a
wake-up named (a send, a take that filled its batch, a visibility change of ours) is covered: the
name made the row it falls in rescan-due, so the look reads it, and a look that found nothing
forgets the names it covered, as a fetch's visit does. As a peek does, a row with nothing due has
its lanes' cursors moved up to ``now - tolerance`` (in memory) and its next rescan set; a message
seen coming within the lookahead (one lane) sets the row's wake time, which the parked poll's
timer follows.

An empty look is also remembered (``remember_empty``), so the next receive of the queue in this
process may answer from it without a read (``known_empty``): only while nothing was said since (no
send of this process, no wake hint, none of our own writes coming due: ``Consumer.wakes``), no row
is due for a rescan or a known wake, the bucket is the same, and the look is younger than the
caller's window (the longer of ``EMPTY_TRUST_MS`` and the receive's own wait). While the process has
read the due feed without a break since the look, the window is ``COVERED_TRUST_MS`` and rescans do
not end it: the feed tells every process what another one sent or made visible again (its hint lost or
not, engine/wake/due_feed.py), which is what a rescan of an idle row would find. What it can miss: a
message no process announced (the Spark loader), or whose feed entry was lost (a failed write, a clock
further behind than the tolerance); that is found by the first read after the window.
"""

from __future__ import annotations

from daemon.base.clock import Clock
from daemon.base.errors import StorageUnavailable
from daemon.base.model import QueueSettings
from daemon.engine.consume.consumer import Consumer
from daemon.engine.queues.store import COVERED_TRUST_MS
from daemon.engine.storage.db import Database, too_many_tombstones
from daemon.engine.storage.table import MessageTable
from daemon.engine.take.row_state import RowState, next_rescan, rows_to_check

#: A cursor further behind another row's than this is not read from: the look would scan that row's tombstones from
#: there. A rescan (at most ``rescan_ms``) brings each row's cursor up.
STALE_MS = 30_000
#: How long a receive that does not wait may answer from this process's last empty look of the queue.
EMPTY_TRUST_MS = 1_000


Row = tuple[int, int]  # (bucket, shard)


class IdleLook:
    def __init__(self, db: Database, table: MessageTable, clock: Clock) -> None:
        self.db, self.table, self.clock = db, table, clock

    async def due_rows(self, consumer: Consumer, qs: QueueSettings) -> list[Row] | None:
        """The rows ``consumer``'s fetch would visit now that one read found something due in,
        oldest first ([]: nothing due anywhere, the receive may park); None when the look can't be
        made (FIFO, a row not loaded or being taken from, a cursor far behind another): fetch as before."""
        now = self.clock.now_ms()
        horizon = now + consumer.ahead_ms
        consumer.empty_look = None  # remembered again only if this look reads and finds nothing
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
        if any(st is None or not st.start.loaded or st.busy for st in states):
            return None
        # From where each lane's own read would start (past a skip or frontier): a drained row's look does not
        # cross the tombstones of what was just taken.
        starts = [
            st.start.at(rank, consumer.accepts, self.clock, consumer.rescan_ms)
            for st in states
            if st is not None
            for rank in ranks
        ]
        low = min(starts)
        if max(starts) - low > STALE_MS:
            return None
        one_lane = len(ranks) == 1
        until = now + max(consumer.lookahead_ms, consumer.ahead_ms) if one_lane else horizon
        try:
            found = await self.db.run(
                self.table.reads(qs).peek_rows,
                [qs.name, sorted({b for b, _ in rows}), sorted({s for _, s in rows}), ranks, low, until],
            )
        except StorageUnavailable as exc:
            if not too_many_tombstones(exc):
                raise
            return None  # one read across many rows' tombstones: the fetch's own peeks read them one row each
        first = {(r.bucket, r.shard): r.due for r in found}
        due = sorted((row for row in rows if first.get(row, horizon + 1) <= horizon), key=lambda row: first[row])
        if due and not one_lane:  # lanes: the fetch's own order (highest lane first, the top-lane check)
            return None
        if not due and any(st.start.frontier for st in states if st is not None):
            # Read from past a frontier and found nothing: a message written behind it with no wake-up (a lagging
            # producer's) would wait for the next look, up to a parked poll's safety interval. Look from the cursors.
            for st in states:
                if st is not None:
                    st.start.forget_frontier()
            return await self.due_rows(consumer, qs)
        if due:  # taken from at once (no peek), oldest first; named, so the top-ups go to the others next
            for bucket, shard in due:
                consumer.rows[(bucket, shard)].next_check = now
                consumer.names.name(shard, first[(bucket, shard)])
            return due
        self.remember_empty(consumer, qs, now)
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
                if st.start.cursor(rank) >= low:  # read from its cursor, not from past a frontier
                    st.start.move(rank, target)
            st.named = False
            st.next_check = min(next_rescan(now, consumer.rescan_ms), st.wake - consumer.ahead_ms)
        for shard in range(qs.span()[0]):  # what named them is covered: their rows were rescan-due, so read
            consumer.names.visited(shard, horizon)
        return []

    @staticmethod
    def remember_empty(consumer: Consumer, qs: QueueSettings, now: int) -> None:
        """A read at ``now`` found nothing due in any row ``consumer`` would visit."""
        consumer.empty_look = (now, consumer.wakes(), now // qs.bucket_ms)

    def known_empty(
        self, consumer: Consumer, qs: QueueSettings, window_ms: int, covered_since: int | None = None
    ) -> int | None:
        """When the remembered empty look was made, if it still answers now without a read (see
        the module's docstring); None: look. ``covered_since``: since when the process has read the due feed
        without a break (engine/wake/due_feed.py); a look made since is trusted up to ``COVERED_TRUST_MS``."""
        seen = consumer.empty_look
        now = self.clock.now_ms()
        if seen is None or qs.fifo:
            return None
        at, wakes, epoch = seen
        covered = covered_since is not None and at >= covered_since
        if now - at >= (max(window_ms, COVERED_TRUST_MS) if covered else window_ms):
            return None
        if wakes != consumer.wakes() or epoch != now // qs.bucket_ms:
            return None
        horizon = now + consumer.ahead_ms
        rescan = not covered  # covered: the feed told what a rescan would find (the module's docstring)
        if any(st.busy or (rescan and st.next_check <= now) or st.wake <= horizon for st in consumer.rows.values()):
            return None
        return at

"""The lock-free peek: is anything due in a row (within the take-ahead)? Moves idle lanes' cursors.

The read spans [cursor, now + lookahead] only (``LIMIT 1`` per lane): a slice that ran on far past
now would scan the tombstones of acked timeout columns ahead of it. Only a row the peek found due is
locked and taken (engine/take/step.py); a message seen coming within the lookahead sets the row's wake time, so
an idle consumer sleeps until exactly then (docs/design.md, "Which rows a consumer reads").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from daemon.base.clock import Clock
from daemon.base.model import QueueSettings
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import MessageTable
from daemon.engine.take.row_state import ConsumerStats, RowState, next_rescan, trip

Accepts = Callable[[str], bool] | None
Row = tuple[int, int]  # (bucket, shard)


class RowPeek:
    """Peeks one queue's rows for its consumer. Durations are ms."""

    def __init__(
        self,
        db: Database,
        table: MessageTable,
        clock: Clock,
        stats: ConsumerStats,
        tolerance_ms: int,
        rescan_ms: int,
        lookahead_ms: int,
        ahead_ms: int,
    ) -> None:
        self.db, self.table, self.clock, self.stats = db, table, clock, stats
        self.tolerance_ms, self.rescan_ms, self.lookahead_ms, self.ahead_ms = (
            tolerance_ms,
            rescan_ms,
            lookahead_ms,
            ahead_ms,
        )

    async def row(
        self, qs: QueueSettings, bucket: int, shard: int, state: RowState, accepts: Accepts, count: bool = True
    ) -> bool:
        """Is anything due (within the take-ahead) in this row? Loads its cursors on a first visit.
        ``count``: False when the caller counts one round trip for many rows peeked at once."""
        if not state.start.loaded:
            trip(count)
            rows = await self.db.run(self.table.read_cursors, [qs.name, bucket, shard])
            state.start.loaded_from_store(dict(rows[0].cursors or {}) if rows else {})
        now = self.clock.now_ms()
        if state.wake <= now + self.ahead_ms:
            state.wake = RowState.wake
        trip(count)
        due = await self._anything_due(qs, bucket, shard, state, now, accepts)
        if not due:
            state.next_check = min(next_rescan(now, self.rescan_ms), state.wake - self.ahead_ms)
            return False
        state.next_check = now  # there was due work: look again on the next round
        return True

    async def rows(
        self, qs: QueueSettings, states: dict[Row, RowState], rows: list[Row], accepts: Accepts
    ) -> list[Row]:
        """Peek these rows at once (one round trip); those with something due, in the given order.
        A row a fetch of ours is taking from, or whose lock was found busy lately, is not peeked."""
        mine = [states.setdefault(row, RowState()) for row in rows]
        free = [(row, st) for row, st in zip(rows, mine) if not st.busy and st.backoff_until <= self.clock.elapsed_ms()]
        for _, st in free:
            st.busy = True
        try:
            trip()
            due = await asyncio.gather(*(self.row(qs, b, s, st, accepts, count=False) for (b, s), st in free))
        finally:
            for _, st in free:
                st.busy = False
        return [row for (row, _), found in zip(free, due) if found]

    async def top_lane(self, qs: QueueSettings, states: dict[Row, RowState], rows: list[Row], now: int) -> list[Row]:
        """Peek only the top lane of these rows at once (one round trip, cursors as known, no
        state made for a row never seen); those with something due there, marked as best in it."""
        top = -max(qs.priorities)
        horizon = now + self.ahead_ms
        reads = self.table.reads(qs)
        trip()
        found = await asyncio.gather(
            *(
                self.db.run(
                    reads.peek,
                    [qs.name, b, s, top, states.get((b, s), RowState()).start.cursor(top), horizon],
                )
                for b, s in rows
            )
        )
        self.stats.peeks += len(rows)
        due = [row for row, hit in zip(rows, found) if hit]
        for row in due:
            states.setdefault(row, RowState()).best_rank = top
        return due

    async def _anything_due(
        self, qs: QueueSettings, bucket: int, shard: int, state: RowState, now: int, accepts: Accepts
    ) -> bool:
        """Is a message due in this row (no lock)? The read spans [cursor, now + lookahead] only: a
        slice that ran on far past now would scan the tombstones of acked timeout columns ahead of
        it. A lane with nothing due moves its cursor up to now - tolerance; a message seen coming
        within the lookahead sets the row's wake time."""
        if qs.fifo and state.fifo.resting(now):
            return False
        state.named = False
        ranks = qs.ranks()
        horizon = now + max(self.lookahead_ms, self.ahead_ms)
        skips = [state.start.skip(r, accepts, self.clock, self.rescan_ms) for r in ranks]
        reads = self.table.reads(qs)
        results = await asyncio.gather(
            *(
                self.db.run(reads.peek, [qs.name, bucket, shard, r, state.start.cursor(r), horizon])
                if skip is None
                else self.db.run(reads.peek_after, [qs.name, bucket, shard, r, skip[0], skip[1], horizon])
                for r, skip in zip(ranks, skips)
            ),
        )
        self.stats.peeks += len(ranks)
        due = False
        for rank, rows, skip in zip(ranks, results, skips):
            first = rows[0].due if rows else None
            if skip is None:  # read from a skip, the lane's cursor stays: it must not pass what was left there
                self._advance(state, rank, first, now)
            if first is not None and first <= now + self.ahead_ms:
                if not due:
                    state.best_rank = rank  # ranks are read highest lane first
                due = True
            elif first is not None:
                state.wake = min(state.wake, first)
        return due

    def _advance(self, state: RowState, rank: int, first_unconsumed: int | None, now: int) -> None:
        """A lane's cursor moves up to the first unconsumed message seen, never past now - tolerance."""
        safe = now - self.tolerance_ms
        state.start.move(rank, safe if first_unconsumed is None else min(first_unconsumed, safe))

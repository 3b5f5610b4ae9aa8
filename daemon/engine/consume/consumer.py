"""The consumer: find due messages in a queue's shard rows and take them under the row lock.

Which rows are read (so that an idle or finished row costs nothing):
  - the row of the current time bucket, every time its shard comes round;
  - the previous bucket's row, for one clock tolerance after the bucket ends (late producers);
  - any other row whose ``next_check`` has come: the due time of a message seen coming by the last
    peek (or written by this process), and at the latest ``rescan_interval`` after that peek (to
    notice timeout columns and retries written by other processes).

The peek looks ``lookahead`` past now, so an idle consumer knows when the next message of a row it
looked at falls due and can sleep until exactly then (precise delays and cron) instead of polling.

Where a read starts: at the row's cursor for that priority lane, a due time before which every
message is consumed. Reads never scan the tombstones of what was consumed before it. The cursor only
moves to ``min(first unconsumed message, now - clock tolerance)``: a producer whose clock lags ours
by less than the tolerance can't write behind it (docs/design.md, "Cursors").

The take itself (lock, re-check, read, keep, commit) is engine/take/step.py's step (its read engine/take/read.py's):
the consumer chooses the row, builds a ``TakeOptions`` once per fetch and hands both over. The peek
is row_peek.py's, the named shards shard_names.py's, schedule chaining engine/send/chain.py's, the byte budget
engine/take/budget.py's, and what is known about a row (``RowState``) engine/take/row_state.py's.

A daemon's consumer (``handles``: the tasks it has handlers for) of a queue that pull clients consume too
(``QueueSettings.shared``, read with the queue row) takes only the tasks it ``accepts`` and leaves the rest in
the row, the cursor never past them. So that
what it left is not read on every take, it remembers per lane where the last message it read and
left lies (``ReadStart.skips``) and reads on from just after it, forgetting that every rescan
interval (docs/design.md, "Push and pull on one queue").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from daemon.base import metrics
from daemon.base.clock import Clock
from daemon.base.logs import get_logger
from daemon.base.model import Message, QueueSettings
from daemon.engine.consume.row_peek import RowPeek
from daemon.engine.consume.shard_names import ShardNames
from daemon.engine.queues.store import QueueStore
from daemon.engine.send.keys import KeyStore
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import MessageTable, all_rows
from daemon.engine.take.holds import RowHolds
from daemon.engine.take.row_lock import HeldLock, RowLock
from daemon.engine.take.row_state import TRIPS, ConsumerStats, Rows, RowState, rows_to_check
from daemon.engine.take.step import Poisoner, Take, TakeOptions

__all__ = ["Consumer", "ConsumerStats", "RowState"]

log = get_logger("casque.consumer")
#: Rows a peek of all shards (an idle daemon's scout, ``fetch(peek_all=True)``) rescans at most (the
#: longest waiting first): a cold start's hundreds of rows are rescanned over a few such peeks, never
#: in one burst that holds up what falls due meanwhile.
PEEK_ALL_RESCANS = 32
#: Rows a visit to one shard rescans at most before its current row (the longest waiting first).
#: On a cold start every row is due: without a cap, the consumers' first visits would issue hundreds
#: of reads at once, and sending them holds up the event loop.
VISIT_RESCANS = 4
#: While a multi-lane queue's takes hand out lower lanes (a fair queue's noisy tenant, low
#: priorities), the top lane of every shard's current rows is peeked at most this often, in one
#: round trip: work there that no wake-up named (a consumer cold when it was sent, another
#: process's send without hints) is found within a few receives, not after a shard's backlog.
TOP_LANE_CHECK_MS = 50


class Consumer:
    """Takes batches from one queue. One per process and queue; any number of coroutines share it."""

    def __init__(
        self,
        db: Database,
        table: MessageTable,
        queues: QueueStore,
        poison: Poisoner,
        keys: KeyStore,
        clock: Clock,
        queue: str,
        tolerance_ms: int = 5000,
        rescan_ms: int = 10000,
        lookahead_ms: int = 1000,
        hold_ms: int = 0,
        ahead_ms: int = 0,
    ) -> None:
        self.db = db
        self.table = table
        self.queues = queues
        self.poison = poison
        self.clock = clock
        self.queue = queue
        self.tolerance_ms = tolerance_ms
        self.rescan_ms = rescan_ms
        self.lookahead_ms = lookahead_ms
        self.row_lock = RowLock(db, table, clock, tolerance_ms)
        self.holds = RowHolds(self.row_lock)
        self.ahead_ms, self.hold_ms = ahead_ms, hold_ms  # what every take is asked (TakeOptions)
        self.last_settings: QueueSettings | None = None
        self.rows = Rows()
        #: Which shards to visit next: wake-ups, our own writes coming due (``expect``), what is still named.
        self.names = ShardNames(clock, self.rows, ahead_ms)
        self._hints = 0  # wake-ups told to this consumer, those before its first fetch included
        #: (when, ``wakes()`` then, bucket then) of the last look that read and found nothing due
        #: (engine/delivery/idle_look.py ``known_empty``); None: none, or work found since.
        self.empty_look: tuple[int, int, int] | None = None
        #: When the last pull receive of this queue that answered in full ended (monotonic s; -inf after a short
        #: answer): one coming right after keeps its take's row lock for the next (engine/delivery/receive.py).
        self.receive_ended = float("-inf")
        self.stats = ConsumerStats()
        self._lower_lanes_taken = False  # the last take handed out a lane below the queue's top one
        self._top_lane_checked = 0  # monotonic ms
        self._top_lane_found = False  # the last top-lane check took something: check again at once
        #: A daemon's consumer: the tasks it has handlers for (None: a pull client's, which takes every task).
        self.handles: Callable[[str], bool] | None = None
        #: ``handles`` on a queue pull clients consume (``settings``), else None (TakeOptions).
        self.accepts: Callable[[str], bool] | None = None
        self.peek = RowPeek(db, table, clock, self.stats, tolerance_ms, rescan_ms, lookahead_ms, ahead_ms)
        self.taker = Take(
            db,
            table,
            poison,
            keys,
            clock,
            self.row_lock,
            self.holds,
            self.stats,
            self.names.expect,
            tolerance_ms,
            rescan_ms,
            lookahead_ms,
        )

    async def settings(self, fresh: bool = False) -> QueueSettings:
        """The queue's settings (cached for a few seconds), and what they say of who consumes it: a daemon's
        consumer of a queue that pull clients consume takes only the tasks it has handlers for."""
        qs = self.last_settings = await self.queues.get(self.queue, fresh=fresh)
        accepts = self.handles if qs.shared else None
        if accepts is not self.accepts:
            self.accepts = accepts
            if accepts is None:  # what was left for pull clients is read again from the cursors, and taken
                for state in self.rows.values():
                    state.start.forget_skips()
            log.info(
                "queue_consumers",
                queue=self.queue,
                consumers=qs.consumers or "push",
                shared=accepts is not None,
                rule="tasks without a handler are left for pull clients; no rows held"
                if accepts is not None
                else "every task taken; unknown tasks poisoned",
            )
        return qs

    def hint(self, due_ms: int, placement: int | None) -> None:
        """A send falls due at ``due_ms`` in the shard of ``placement`` (None: any); counted (``wakes``), and named
        once the queue's settings are known (a fetch, or a receive's warm-up): a name outlives a parked poll's timer."""
        self._hints += 1
        if self.last_settings is not None:
            self.names.hint(self.last_settings, due_ms, placement)

    def wakes(self) -> int:
        """How many reasons to look this consumer was given (sends and hints told to it, our own
        writes coming due, takes that left more): unchanged since an empty look, nothing new was said."""
        return self._hints + self.names.named

    async def warm(self, parallel: int = 64) -> None:
        """Before serving: load every row's cursors and peek it, ``parallel`` rows at a time.
        Left to the first visits, a cold start's reads (cursors and a peek of every row) come in
        front of the first takes. Rows with something due are visited first."""
        qs = await self.settings()
        rows = [row for row in all_rows(qs) if not self.rows.get(row, RowState()).start.loaded]
        for i in range(0, len(rows), parallel):
            await self.peek.rows(qs, self.rows, rows[i : i + parallel], self.accepts)

    async def fetch(
        self,
        limit: int,
        slot: int = 0,
        visibility_ms: int | None = None,
        peek_all: bool = False,
        full: bool = True,
        rows: list[tuple[int, int]] | None = None,
        linger: Callable[[], bool] | None = None,
    ) -> list[Message]:
        """Return up to ``limit`` taken messages: first from the shards a wake-up named, then
        visiting shards round-robin from this slot's position until one yields; [] after a full
        round with nothing due. ``peek_all`` (an idle daemon's scout): instead of the round, peek
        every shard's rows at once and visit only those with something due, so an idle round is
        one round trip, not one per shard; with ``full`` False, only the shards a wake-up named
        (or a take that filled its batch, or a row found busy with our own take).
        ``visibility_ms`` places the timeout columns at now + it instead of each message's own
        timeout (a pulled message's visibility timeout). ``rows``: rows a read just found something
        due in (an empty receive's look, engine/delivery/idle_look.py): taken from first, unpeeked.
        ``linger``: asked as each take commits, whether to keep the row's lock for our next take (TakeOptions)."""
        qs = await self.settings()
        # A daemon runs a FIFO group's messages one after another: one per group (a pull takes more).
        opts = TakeOptions(
            limit,
            visibility_ms,
            self.hold_ms,
            self.ahead_ms,
            self.accepts,
            one_per_group=visibility_ms is None,
            linger=linger,
        )
        trips = [0]
        token = TRIPS.set(trips)
        try:
            taken = await self._take_first(qs, rows, opts) if rows else []
            taken = self._took(qs, taken) if taken else await self._fetch(qs, slot, opts, peek_all, full)
        finally:
            TRIPS.reset(token)
        if taken:
            metrics.TAKE_ROUND_TRIPS.labels(self.queue).observe(trips[0])
            return taken
        self.stats.empty_polls += 1
        metrics.EMPTY_POLLS.labels(self.queue).inc()
        return []

    async def _fetch(
        self, qs: QueueSettings, slot: int, opts: TakeOptions, peek_all: bool, full: bool
    ) -> list[Message]:
        horizon = self.clock.now_ms() + self.ahead_ms
        due = self.names.due(horizon)
        order = self.names.order(qs, slot, due)
        hinted = set(due)
        if (
            self._lower_lanes_taken
            and len(qs.priorities) > 1
            and (self._top_lane_found or self.clock.elapsed_ms() - self._top_lane_checked >= TOP_LANE_CHECK_MS)
        ):
            taken = await self._top_lane_check(qs, opts)
            if taken:
                return taken
        if peek_all and full:
            # The rows nothing named first: under load the named shards always yield, and a
            # peek that visited them first never reached the others (tests/test_liveness.py:
            # messages no wake-up announced waited as long as the load lasted).
            taken = await self._peek_all_shards(qs, order, hinted, opts)
            if taken:
                return self._took(qs, taken)
        for shard in order:
            if (peek_all or not full) and shard not in hinted:
                break
            self.names.visited(shard, horizon)
            taken = await self._visit_shard(qs, shard, opts)
            if taken:
                if len(taken) >= opts.limit:  # the row may hold more: name it for the next fetch
                    self.names.name_now(shard)
                return self._took(qs, taken)
        return []

    def _took(self, qs: QueueSettings, taken: list[Message]) -> list[Message]:
        top = -max(qs.priorities)
        self._lower_lanes_taken = any(m.rank > top for m in taken)
        return taken

    async def _top_lane_check(self, qs: QueueSettings, opts: TakeOptions) -> list[Message]:
        """Peek the top lane of every shard's current rows at once (``TOP_LANE_CHECK_MS``); take
        from the first with something due there."""
        self._top_lane_checked = self.clock.elapsed_ms()
        now = self.clock.now_ms()
        every = [rows_to_check(self.rows, qs, shard, now, self.tolerance_ms)[0] for shard in range(qs.span()[0])]
        rows = [(b, shard) for shard, buckets in enumerate(every) for b in buckets]
        due = await self.peek.top_lane(qs, self.rows, rows, now)
        taken = await self._take_first(qs, due, replace(opts, top_lane_only=True)) if due else []
        self._top_lane_found = bool(taken)
        if taken:
            self._lower_lanes_taken = True  # keep checking while the top lane yields
        return taken

    async def _peek_all_shards(
        self, qs: QueueSettings, order: list[int], hinted: set[int], opts: TakeOptions
    ) -> list[Message]:
        """Peek the current row of every shard nothing named, and up to PEEK_ALL_RESCANS older
        rows, in one round trip; take from the first with something due, and name the others."""
        now = self.clock.now_ms()
        current: list[tuple[int, int]] = []
        overdue: list[tuple[int, int]] = []
        for shard in (s for s in order if s not in hinted):
            every, rescans = rows_to_check(self.rows, qs, shard, now, self.tolerance_ms)
            current += [(b, shard) for b in every]
            overdue += [(b, shard) for b in rescans]
        overdue.sort(key=lambda row: self.rows[row].next_check if row in self.rows else 0)
        rows = overdue[:PEEK_ALL_RESCANS] + current  # rescans first: older rows
        return await self._take_first(qs, await self.peek.rows(qs, self.rows, rows, self.accepts), opts)

    async def _take_first(self, qs: QueueSettings, rows: list[tuple[int, int]], opts: TakeOptions) -> list[Message]:
        """Take from the first of these rows that yields; name the shards of the rest, so other
        consumers are sent there (the dispatcher wakes one per named shard)."""
        for i, (bucket, shard) in enumerate(rows):
            taken = await self._take_row(qs, bucket, shard, opts, peeked=True)
            if taken:
                now = self.clock.now_ms()
                for _, other in rows[i + 1 :]:
                    self.names.name(other, now)
                return taken
        return []

    async def _visit_shard(self, qs: QueueSettings, shard: int, opts: TakeOptions) -> list[Message]:
        """Oldest rows first, so a shard hands out its messages by due time across rows: the rows
        whose rescan has come (up to VISIT_RESCANS, peeked at once: one round trip, every ``rescan_ms``), then the
        previous row while late producers may still write to it, then the current row.

        On a queue with several lanes (priorities, or a fair queue's noisy tenants one lane down,
        engine/send/fairness.py) the rows are peeked together, and the row with the highest lane due
        goes first: a message sent now in a higher lane is not taken after an older row's backlog
        of a lower one (a quiet tenant is not stuck behind a noisy one's backlog, tests/test_fairness.py)."""
        now = self.clock.now_ms()
        every, rescans = rows_to_check(self.rows, qs, shard, now, self.tolerance_ms)
        if (
            len(qs.priorities) > 1 and rescans
        ):  # nothing older to look at: the current rows as always (a held row is not peeked)
            named = [b for b in rescans[VISIT_RESCANS:] if self.rows[(b, shard)].named]
            rows = [(b, shard) for b in rescans[:VISIT_RESCANS] + named + every]
            due = await self.peek.rows(qs, self.rows, rows, self.accepts)
            due.sort(key=lambda row: self.rows[row].best_rank)  # stable: oldest first within a lane
            return await self._take_first(qs, due, opts)
        if rescans:
            rows = [(b, shard) for b in rescans[:VISIT_RESCANS]]
            taken = await self._take_first(qs, await self.peek.rows(qs, self.rows, rows, self.accepts), opts)
            if taken:
                return taken
        for bucket in every:
            taken = await self._take_row(qs, bucket, shard, opts, peeked=False)
            if taken:
                return taken
        return []

    async def _take_row(
        self, qs: QueueSettings, bucket: int, shard: int, opts: TakeOptions, peeked: bool
    ) -> list[Message]:
        """The take step (engine/take/step.py) on this row, one coroutine at a time (a busy row's shard is named
        for later): from our hold if we have one, else under its lock, after a peek unless the caller ``peeked``."""
        state = self.rows.setdefault((bucket, shard), RowState())
        if state.busy:
            self.names.name_now(shard)
            return []
        if not peeked and state.backoff_until > self.clock.elapsed_ms():
            return []
        state.busy = True
        try:
            if peeked:
                return await self._take(qs, bucket, shard, state, opts)
            return await self._visit_row(qs, bucket, shard, state, opts)
        finally:
            state.busy = False

    async def _visit_row(
        self, qs: QueueSettings, bucket: int, shard: int, state: RowState, opts: TakeOptions
    ) -> list[Message]:
        """A visit (bench/taketrace.py times it): peek the row unless we hold it, and take what it found due."""
        if await self._held_lock(qs, bucket, shard) is None and not await self.peek.row(
            qs, bucket, shard, state, self.accepts
        ):
            return []
        return await self._take(qs, bucket, shard, state, opts)

    async def _take(
        self, qs: QueueSettings, bucket: int, shard: int, state: RowState, opts: TakeOptions
    ) -> list[Message]:
        lock = await self._held_lock(qs, bucket, shard)
        if lock is not None:
            return (await self.taker.take_held(qs, state, lock, opts)).messages
        return (await self.taker.take(qs, bucket, shard, state, opts)).messages

    async def _held_lock(self, qs: QueueSettings, bucket: int, shard: int) -> HeldLock | None:
        """The row's hold, if this process has one, once an acquisition under way has ended (a
        take by the ordinary lock would collide with it, engine/take/holds.py ``settled``)."""
        await self.holds.settled((bucket, shard))
        return self.holds.valid(qs, (bucket, shard))

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

A take (under the lock, see locking.py) is one single-partition batch: delete our lock column,
delete each taken message, write its timeout column (a copy due at now + timeout, attempt + 1, state
IN_FLIGHT) and move the cursor. Messages that are corrupt or out of attempts go to the poison queue
first, then leave the row in that same batch.

Two rules keep a take from losing what it read:
  - the cursor moves (in memory and in the row) only with a take batch that committed: a take that
    fails or is abandoned (lock too old, poison write failed, write timeout) leaves the cursor where
    it was, so what it read is read again;
  - a take is bounded by bytes as well as by count (``TAKE_BYTES``): every taken payload is copied
    into its timeout column, and a batch past Cassandra's 16 MiB request/mutation limits is refused
    whole, which would stall the row for good.

A daemon's consumer of a queue that pull clients also read (``share``, service/pull_peers.py) takes
only the tasks it ``accepts`` and leaves the rest in the row, the cursor never past them. So that
what it left is not read on every take, it remembers per lane where the last message it read and
left lies (``RowState.skips``) and reads on from just after it, forgetting that every rescan
interval (docs/design.md, "Push and pull on one queue").
"""

from __future__ import annotations

import asyncio
import heapq
import random
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from daemon.base import metrics
from daemon.engine import chain, triggers
from daemon.base.crashpoints import crash_point, pause_point
from daemon.base.clock import Clock
from daemon.engine.db import Database
from daemon.engine import fifo
from daemon.engine.holds import RowHolds
from daemon.engine.keys import KeyEntry, KeyStore
from daemon.engine.locking import HeldLock, ShardLocker
from daemon.base.logs import get_logger
from daemon.base.model import Message, QueueSettings, out_of_attempts
from daemon.engine.poison import PoisonStore
from daemon.engine.queues import QueueStore
from daemon.engine.received import stamp as stamp_received
from daemon.engine.placement import bucket_of
from daemon.engine.table import STATE_IN_FLIGHT, MessageTable, after, all_rows, message_from_row

log = get_logger("casque.consumer")
#: Payload bytes one take may copy into timeout columns (a schedule's next occurrence counts too):
#: a quarter of Cassandra's 16 MiB native request and mutation limits, so a take is never refused.
TAKE_BYTES = 4 << 20
#: What a stored message costs in a take besides its payload (ids, task, headers, error, trigger).
MESSAGE_OVERHEAD = 512
#: Rows an idle sweep rescans at most (the longest waiting first): a cold start's hundreds of
#: rows are rescanned over a few sweeps, never in one burst that holds up what falls due meanwhile.
SWEEP_RESCANS = 32
#: Rows a visit to one shard rescans at most before its current row (the longest waiting first).
#: On a cold start every row is due: 32 consumers visiting 16 shards issued ~750 reads at once,
#: and sending them held the event loop 100-200 ms (measured at a daemon's start, 94 msg/s).
VISIT_RESCANS = 4
#: Wake-up due times remembered per shard (the earliest ones).
MAX_HINTS = 256
#: While a multi-lane queue's takes hand out lower lanes (a fair queue's noisy tenant, low
#: priorities), the top lane of every shard's current rows is peeked at most this often, in one
#: round trip: work there that no wake-up named (a consumer cold when it was sent, another
#: process's send without hints) is found within a few receives, not after a shard's backlog.
TOP_LANE_CHECK_MS = 50
#: The first wait after a row's lock was found busy; it doubles up to a lock TTL.
MIN_BACKOFF_MS = 50
#: Sequential round trips of the fetch running in this task (a list, so gathered children add to it).
_TRIPS: ContextVar[list[int]] = ContextVar("casque_trips")


def _trip(n: int = 1) -> None:
    trips = _TRIPS.get(None)
    if trips is not None:
        trips[0] += n


@dataclass
class RowState:
    """What this process knows about one row; a hint for cost, never needed for correctness."""

    cursors: dict[int, int] = field(default_factory=dict)
    loaded: bool = False
    next_check: int = 0
    wake: int = 1 << 62  # earliest due time this process wrote into the row, or a peek saw coming
    busy: bool = False
    #: After the row's lock was found busy: not tried again before this (monotonic ms). Doubles
    #: while the row stays busy (another daemon holds it, holds.py), so a busy row costs little.
    backoff_until: int = 0
    backoff_ms: int = 0
    #: Per lane, the (due, id) of the last message read that was left for pull readers (or taken
    #: with them): later reads start just after it instead of at the cursor. Forgotten every
    #: ``rescan_ms`` (``skip_since``), so each message left is re-read at most once per rescan.
    skips: dict[int, tuple[int, Any]] = field(default_factory=dict)
    skip_since: int = 0
    #: A FIFO row whose due messages all belong to groups in flight: its peek would say "due" on
    #: every visit, so it is not peeked before this (the earliest visibility end seen, at most a
    #: rescan away) unless a wake-up names its shard (a send, a delete, a visibility change).
    fifo_idle_until: int = 0
    #: Counts the wake-ups that named this FIFO row: a take that read the row before one of them
    #: (a delete that unblocked a group) must not put the row to rest on what it read.
    fifo_named: int = 0
    #: The highest lane (lowest rank) the last peek found something due in.
    best_rank: int = 0
    #: A wake-up named this row since its last peek (a send to it).
    named: bool = False

    def contended(self, now_elapsed: int, cap_ms: int) -> None:
        self.backoff_ms = min(cap_ms, max(MIN_BACKOFF_MS, 2 * self.backoff_ms))
        self.backoff_until = now_elapsed + self.backoff_ms

    def took(self) -> None:
        self.backoff_ms = self.backoff_until = 0


@dataclass
class ConsumerStats:
    takes: int = 0
    taken: int = 0
    contention: int = 0
    empty_polls: int = 0
    peeks: int = 0
    timed_out: int = 0
    poisoned: int = 0


class Consumer:
    """Takes batches from one queue. One per process and queue; any number of coroutines share it."""

    def __init__(self, db: Database, table: MessageTable, queues: QueueStore, poison: PoisonStore, keys: KeyStore, clock: Clock,
                 queue: str, tolerance_ms: int = 5000, rescan_ms: int = 10000, lookahead_ms: int = 1000) -> None:
        self.db = db
        self.keys = keys
        self.table = table
        self.queues = queues
        self.poison = poison
        self.clock = clock
        self.queue = queue
        self.tolerance_ms = tolerance_ms
        self.rescan_ms = rescan_ms
        self.lookahead_ms = lookahead_ms
        self.locker = ShardLocker(db, table, clock, tolerance_ms)
        self.holds = RowHolds(db, table, self.locker, clock)
        #: Take a message up to this long before it is due (the dispatcher starts its handler at
        #: the due time): a timer fires on time although the take costs round trips.
        self.ahead_ms = 0
        self._hinted: dict[int, list[int]] = {}  # shard -> heap of the due times wake-ups named
        self.hinted_at: int | None = None  # when the last wake-up arrived (monotonic ms)
        self.last_settings: QueueSettings | None = None
        self.rows: dict[tuple[int, int], RowState] = {}
        self.stats = ConsumerStats()
        self._next_shard: dict[int, int] = {}
        self._lower_lanes_taken = False  # the last take handed out a lane below the queue's top one
        self._top_lane_checked = 0  # monotonic ms
        self._top_lane_found = False  # the last top-lane sweep took something: sweep again at once
        self._only_top = False  # a take from the top-lane sweep takes that lane only
        #: How long past its timeout a taken message stays invisible: the dispatcher's margin for
        #: clock skew (service/visibility.py); 0 for other consumers.
        self.hold_ms = 0
        #: None: take every message. Else the queue is shared with pull readers (a daemon's
        #: consumer, service/pull_peers.py): take only the tasks this accepts and leave the others
        #: in the row, the cursor never past them (docs/design.md, "Push and pull on one queue").
        self.accepts: Callable[[str], bool] | None = None
        self._one_per_group = True

    def share(self, accepts: Callable[[str], bool] | None) -> None:
        """Take only the tasks ``accepts`` names (pull readers read the queue too), or every task
        again (None: then what was left for them is read again from the cursors, and taken)."""
        self.accepts = accepts
        if accepts is None:
            for state in self.rows.values():
                state.skips.clear()

    def _skip(self, state: RowState, rank: int) -> tuple[int, Any] | None:
        """Where this lane's reads start instead of the cursor, if past it: just after the last
        message left for the pull readers. Forgotten every rescan interval, so a message left
        behind is re-read at most that often, and one written behind the skip is found then."""
        if self.accepts is None or not state.skips:
            return None
        if self.clock.elapsed_ms() - state.skip_since >= self.rescan_ms:
            state.skips.clear()
            return None
        pos = state.skips.get(rank)
        return pos if pos is not None and pos[0] >= state.cursors.get(rank, 0) else None

    def _skip_to(self, state: RowState, skips: dict[int, tuple[int, Any]]) -> None:
        if not skips or self.accepts is None:
            return
        if not state.skips:
            state.skip_since = self.clock.elapsed_ms()
        state.skips.update(skips)

    def expect(self, bucket: int, shard: int, due_ms: int) -> None:
        """A hint from this process: something in this row becomes due at ``due_ms`` (a retry or
        timeout column we wrote), so look before the next rescan."""
        state = self.rows.setdefault((bucket, shard), RowState())
        state.wake = min(state.wake, due_ms)
        state.next_check = min(state.next_check, due_ms)
        self._name(shard, due_ms)  # a fetch at the due time visits the shard (named shards only while wake-ups flow)

    def hint(self, due_ms: int, placement: int | None) -> None:
        """A send (in this process, or another one's wake hint): a message falls due at ``due_ms``
        in the shard of ``placement`` (unknown: every shard). A fetch goes to that shard first once
        it is due; until then it is a timer (``next_due``). At most ``MAX_HINTS`` per shard are
        kept, the earliest: a later one is found by the read that takes the earlier ones."""
        qs = self.last_settings
        if qs is None:
            return
        self.hinted_at = self.clock.elapsed_ms()
        bucket = bucket_of(due_ms, qs.bucket_ms, qs.buckets)
        for shard in range(qs.shards) if placement is None else [placement % qs.shards]:
            self._name(shard, due_ms)
            state = self.rows.get((bucket, shard))
            if state is not None:  # the row it was written to is looked at again by then, rescan or not
                state.next_check = min(state.next_check, due_ms)
                state.named = True

    def hints_flowing(self, window_ms: int) -> bool:
        """Has a wake-up arrived within ``window_ms``? Then the producers of this queue announce
        their sends, and a consumer need not go looking in rows nobody named."""
        return self.hinted_at is not None and self.clock.elapsed_ms() - self.hinted_at <= window_ms

    def _name(self, shard: int, due_ms: int) -> None:
        idle = self.rows.get((0, shard))
        if idle is not None:  # a FIFO row (one bucket) named again: something there may have changed
            idle.fifo_idle_until = 0
            idle.fifo_named += 1
        heap = self._hinted.setdefault(shard, [])
        heapq.heappush(heap, due_ms)
        if len(heap) > MAX_HINTS:
            self._hinted[shard] = heapq.nsmallest(MAX_HINTS // 2, heap)

    def _busy_elsewhere(self, shard: int) -> None:
        """A row of ``shard`` is being taken from by another fetch of ours, whose read may predate
        the send that sent us here: name the shard again, so whoever fetches next looks once more."""
        self._name(shard, self.clock.now_ms())

    def _due_hints(self, horizon: int) -> list[int]:
        return [s for s, heap in self._hinted.items() if heap and heap[0] <= horizon]

    def _visited(self, shard: int, horizon: int) -> None:
        """A fetch visits ``shard`` now: forget the hints it covers."""
        heap = self._hinted.get(shard)
        while heap and heap[0] <= horizon:
            heapq.heappop(heap)
        if not heap:
            self._hinted.pop(shard, None)

    def pending_hints(self) -> int:
        """How many shards a wake-up named with something due that no fetch has visited since."""
        return len(self._due_hints(self.clock.now_ms() + self.ahead_ms))

    def next_due(self) -> int | None:
        """When to fetch next for what this process knows is coming (peeks, its own writes,
        hints): the earliest due time, less the take-ahead."""
        wakes = [st.wake for st in self.rows.values() if st.wake < RowState.wake] + [h[0] for h in self._hinted.values() if h]
        return min(wakes) - self.ahead_ms if wakes else None

    async def warm(self, parallel: int = 64) -> None:
        """Before serving: load every row's cursors and peek it, ``parallel`` rows at a time.
        Left to the first visits, a cold start's ~750 reads (16 shards x 24 buckets, cursors and
        a peek each) came in front of the first takes (measured: the first 0.8 s of messages
        100-300 ms late at 94 msg/s). Rows with something due are visited first."""
        qs = self.last_settings = await self.queues.get(self.queue)
        rows = [row for row in all_rows(qs) if not self.rows.get(row, RowState()).loaded]
        for i in range(0, len(rows), parallel):
            await self._peek_rows(qs, rows[i:i + parallel])

    async def fetch(self, limit: int, slot: int = 0, visibility_ms: int | None = None, sweep: bool = False,
                    full: bool = True) -> list[Message]:
        """Return up to ``limit`` taken messages: first from the shards a wake-up named, then
        visiting shards round-robin from this slot's position until one yields; [] after a full
        round with nothing due. ``sweep`` (an idle daemon's scout): instead of the round, peek
        every shard's rows at once and visit only those with something due, so an idle round is
        one round trip, not one per shard; with ``full`` False, only the shards a wake-up named
        (or a take that filled its batch, or a row found busy with our own take).
        ``visibility_ms`` places the timeout columns at now + it instead of each message's own
        timeout (a pulled message's visibility timeout)."""
        qs = self.last_settings = await self.queues.get(self.queue)
        self._one_per_group = visibility_ms is None  # a daemon runs a FIFO group's messages one after another
        trips = [0]
        token = _TRIPS.set(trips)
        try:
            taken = await self._fetch(qs, limit, slot, visibility_ms, sweep, full)
        finally:
            _TRIPS.reset(token)
        if taken:
            metrics.TAKE_ROUND_TRIPS.labels(self.queue).observe(trips[0])
            return taken
        self.stats.empty_polls += 1
        metrics.EMPTY_POLLS.labels(self.queue).inc()
        return []

    async def _fetch(self, qs: QueueSettings, limit: int, slot: int, visibility_ms: int | None, sweep: bool, full: bool) -> list[Message]:
        horizon = self.clock.now_ms() + self.ahead_ms
        order = self._shard_order(qs, slot)
        hinted = set(self._due_hints(horizon))
        if self._lower_lanes_taken and len(qs.priorities) > 1 and (
                self._top_lane_found or self.clock.elapsed_ms() - self._top_lane_checked >= TOP_LANE_CHECK_MS):
            taken = await self._top_lane_sweep(qs, limit, visibility_ms)
            if taken:
                return taken
        if sweep and full:
            # The rows nothing named first: under load the named shards always yield, and a
            # sweep that visited them first never reached the others (tests/test_liveness.py:
            # messages no wake-up announced waited as long as the load lasted).
            taken = await self._sweep(qs, order, hinted, limit, visibility_ms)
            if taken:
                return self._took(qs, taken)
        for shard in order:
            if (sweep or not full) and shard not in hinted:
                break
            self._visited(shard, horizon)
            taken = await self._visit_shard(qs, shard, limit, visibility_ms)
            if taken:
                if len(taken) >= limit:  # the row may hold more: name it for the next fetch
                    self._name(shard, self.clock.now_ms())
                return self._took(qs, taken)
        return []

    def _took(self, qs: QueueSettings, taken: list[Message]) -> list[Message]:
        top = -max(qs.priorities)
        self._lower_lanes_taken = any(m.rank > top for m in taken)
        return taken

    async def _top_lane_sweep(self, qs: QueueSettings, limit: int, visibility_ms: int | None) -> list[Message]:
        """Peek the top lane of every shard's current rows at once (``TOP_LANE_CHECK_MS``); take
        from the first with something due there."""
        self._top_lane_checked = self.clock.elapsed_ms()
        now = self.clock.now_ms()
        top = -max(qs.priorities)
        rows = [(b, shard) for shard in range(qs.span()[0]) for b in self._rows_to_check(qs, shard, now)[0]]
        horizon = now + self.ahead_ms
        _trip()
        found = await asyncio.gather(*(
            self.db.run(self.table.peek, [qs.name, b, s, top, self.rows.get((b, s), RowState()).cursors.get(top, 0), horizon]) for b, s in rows))
        self.stats.peeks += len(rows)
        due = [row for row, hit in zip(rows, found) if hit]
        for row in due:
            self.rows.setdefault(row, RowState()).best_rank = top
        self._only_top = True
        try:
            taken = await self._take_first(qs, due, limit, visibility_ms) if due else []
        finally:
            self._only_top = False
        self._top_lane_found = bool(taken)
        if taken:
            self._lower_lanes_taken = True  # keep sweeping while the top lane yields
        return taken

    async def _sweep(self, qs: QueueSettings, order: list[int], hinted: set[int], limit: int,
                     visibility_ms: int | None) -> list[Message]:
        """Peek the current row of every shard nothing named, and up to SWEEP_RESCANS older
        rows, in one round trip; take from the first with something due, and name the others."""
        now = self.clock.now_ms()
        current: list[tuple[int, int]] = []
        overdue: list[tuple[int, int]] = []
        for shard in (s for s in order if s not in hinted):
            every, rescans = self._rows_to_check(qs, shard, now)
            current += [(b, shard) for b in every]
            overdue += [(b, shard) for b in rescans]
        overdue.sort(key=lambda row: self.rows[row].next_check if row in self.rows else 0)
        rows = overdue[:SWEEP_RESCANS] + current  # rescans first: older rows
        return await self._take_first(qs, await self._peek_rows(qs, rows), limit, visibility_ms)

    async def _peek_rows(self, qs: QueueSettings, rows: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Peek these rows at once (one round trip); those with something due, in the given order."""
        states = [self.rows.setdefault(row, RowState()) for row in rows]
        free = [(row, st) for row, st in zip(rows, states) if not st.busy and st.backoff_until <= self.clock.elapsed_ms()]
        for _, st in free:
            st.busy = True
        try:
            _trip()
            due = await asyncio.gather(*(self._peek_row(qs, b, s, st, count=False) for (b, s), st in free))
        finally:
            for _, st in free:
                st.busy = False
        return [row for (row, _), found in zip(free, due) if found]

    async def _take_first(self, qs: QueueSettings, rows: list[tuple[int, int]], limit: int, visibility_ms: int | None) -> list[Message]:
        """Take from the first of these rows that yields; name the shards of the rest, so other
        consumers are sent there (the dispatcher wakes one per named shard)."""
        for i, (bucket, shard) in enumerate(rows):
            state = self.rows.setdefault((bucket, shard), RowState())
            if state.busy:
                self._busy_elsewhere(shard)
                continue
            state.busy = True
            try:
                taken = await self._take_row(qs, bucket, shard, state, limit, visibility_ms)
            finally:
                state.busy = False
            if taken:
                now = self.clock.now_ms()
                for _, other in rows[i + 1:]:
                    self._name(other, now)
                return taken
        return []

    def _shard_order(self, qs: QueueSettings, slot: int) -> list[int]:
        """The shards a fetch visits: those named as due first, then one round from this slot's
        position."""
        shards = qs.span()[0]  # after a reshard, also the shards of layouts still draining
        horizon = self.clock.now_ms() + self.ahead_ms
        # The named shard waiting longest first (earliest due time named). Not by shard number, nor
        # rotated by slot: under load every named shard yields, so the shards past the first
        # `consumers` of a fixed order were never reached (measured at 1,567 msg/s with 8
        # consumers: rows starved for up to 50 s). Consumers woken together meet at the same
        # shard; all but one find it busy (no read) and go on to the next.
        first = sorted((s for s in self._due_hints(horizon) if s < shards), key=lambda s: self._hinted[s][0])
        start = self._next_shard.get(slot, slot * 7919) % shards
        self._next_shard[slot] = start + 1
        return first + [s for s in ((start + i) % shards for i in range(shards)) if s not in first]

    async def _visit_shard(self, qs: QueueSettings, shard: int, limit: int, visibility_ms: int | None) -> list[Message]:
        """Oldest rows first, so a shard hands out its messages by due time across rows: the rows
        whose rescan has come (up to VISIT_RESCANS, peeked at once: one round trip, every ``rescan_ms``), then the
        previous row while late producers may still write to it, then the current row.

        On a queue with several lanes (priorities, or a fair queue's noisy tenants one lane down,
        engine/fairness.py) the rows are peeked together, and the row with the highest lane due
        goes first: a message sent now in a higher lane is not taken after an older row's backlog
        of a lower one (measured: a quiet tenant's p99 of 1.0 s behind a noisy backlog of 10,000
        in older rows with 1 s buckets when only the current rows were taken first,
        tests/test_fairness.py)."""
        now = self.clock.now_ms()
        every, rescans = self._rows_to_check(qs, shard, now)
        if len(qs.priorities) > 1 and rescans:  # nothing older to look at: the current rows as always (a held row is not peeked)
            named = [b for b in rescans[VISIT_RESCANS:] if self.rows[(b, shard)].named]
            rows = [(b, shard) for b in rescans[:VISIT_RESCANS] + named + every]
            due = await self._peek_rows(qs, rows)
            due.sort(key=lambda row: self.rows[row].best_rank)  # stable: oldest first within a lane
            return await self._take_first(qs, due, limit, visibility_ms)
        if rescans:
            rows = [(b, shard) for b in rescans[:VISIT_RESCANS]]
            taken = await self._take_first(qs, await self._peek_rows(qs, rows), limit, visibility_ms)
            if taken:
                return taken
        for bucket in every:
            taken = await self._visit_one(qs, bucket, shard, limit, visibility_ms)
            if taken:
                return taken
        return []

    async def _visit_one(self, qs: QueueSettings, bucket: int, shard: int, limit: int, visibility_ms: int | None) -> list[Message]:
        state = self.rows.setdefault((bucket, shard), RowState())
        if state.busy:
            self._busy_elsewhere(shard)
            return []
        if state.backoff_until > self.clock.elapsed_ms():
            return []
        state.busy = True
        try:
            return await self._visit_row(qs, bucket, shard, state, limit, visibility_ms)
        finally:
            state.busy = False

    def _rows_to_check(self, qs: QueueSettings, shard: int, now: int) -> tuple[list[int], list[int]]:
        """(rows to visit every round, rows whose rescan has come)."""
        current_abs = now // qs.bucket_ms
        current = current_abs % qs.buckets
        every = [current]
        previous = (current_abs - 1) % qs.buckets
        if now - current_abs * qs.bucket_ms < self.tolerance_ms and previous != current:
            every.insert(0, previous)
        span = qs.span()[1]
        rescans = [b for b in range(span) if b not in every and self._rescan_due((b, shard), now)]
        rescans.sort(key=lambda b: -((current - b) % span))  # oldest first
        return every, rescans

    def _next_rescan(self, now: int) -> int:
        """Between a half and a whole ``rescan_ms`` from now, at random: the rows of a queue peeked
        together once (a cold start) drift apart, so rescans never come as one burst of hundreds
        of reads (measured: such a burst made messages due meanwhile up to 1 s late)."""
        return now + self.rescan_ms // 2 + random.randrange(self.rescan_ms // 2 + 1)

    def _rescan_due(self, row: tuple[int, int], now: int) -> bool:
        state = self.rows.get(row)
        return state is None or state.next_check <= now

    async def _visit_row(self, qs: QueueSettings, bucket: int, shard: int, state: RowState, limit: int,
                         visibility_ms: int | None) -> list[Message]:
        lock = await self._held_lock(qs, bucket, shard)
        if lock is not None:
            return await self._take_held(qs, state, lock, limit, visibility_ms)
        if not await self._peek_row(qs, bucket, shard, state):
            return []
        return await self._take_row(qs, bucket, shard, state, limit, visibility_ms)

    async def _peek_row(self, qs: QueueSettings, bucket: int, shard: int, state: RowState, count: bool = True) -> bool:
        """Is anything due (within the take-ahead) in this row? Loads its cursors on a first visit.
        ``count``: False when the caller counts one round trip for many rows peeked at once."""
        if not state.loaded:
            _trip(count)
            rows = await self.db.run(self.table.read_cursors, [qs.name, bucket, shard])
            _merge(state.cursors, dict(rows[0].cursors or {}) if rows else {})
            state.loaded = True
        now = self.clock.now_ms()
        if state.wake <= now + self.ahead_ms:
            state.wake = RowState.wake
        _trip(count)
        if not await self._anything_due(qs, bucket, shard, state, now):
            state.next_check = min(self._next_rescan(now), state.wake - self.ahead_ms)
            return False
        state.next_check = now  # there was due work: look again on the next round
        return True

    async def _take_row(self, qs: QueueSettings, bucket: int, shard: int, state: RowState, limit: int,
                        visibility_ms: int | None) -> list[Message]:
        lock = await self._held_lock(qs, bucket, shard)
        if lock is not None:
            return await self._take_held(qs, state, lock, limit, visibility_ms)
        return await self._take(qs, bucket, shard, state, limit, visibility_ms)

    async def _held_lock(self, qs: QueueSettings, bucket: int, shard: int) -> HeldLock | None:
        """The row's hold, if this process has one, once an acquisition under way has ended (a
        take by the ordinary lock would collide with it, holds.py ``settled``)."""
        await self.holds.settled((bucket, shard))
        return self.holds.valid(qs, (bucket, shard))

    async def _anything_due(self, qs: QueueSettings, bucket: int, shard: int, state: RowState, now: int) -> bool:
        """Is a message due in this row (no lock)? The read spans [cursor, now + lookahead] only: a
        slice that ran on far past now would scan the tombstones of acked timeout columns ahead of
        it. A lane with nothing due moves its cursor up to now - tolerance; a message seen coming
        within the lookahead sets the row's wake time."""
        if qs.fifo and state.fifo_idle_until > now:
            return False
        state.named = False
        ranks = qs.ranks()
        horizon = now + max(self.lookahead_ms, self.ahead_ms)
        skips = [self._skip(state, r) for r in ranks]
        results = await asyncio.gather(*(
            self.db.run(self.table.peek, [qs.name, bucket, shard, r, state.cursors.get(r, 0), horizon]) if skip is None else
            self.db.run(self.table.peek_after, [qs.name, bucket, shard, r, skip[0], skip[1], horizon]) for r, skip in zip(ranks, skips)
        ))
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
        safe = now - self.tolerance_ms
        target = safe if first_unconsumed is None else min(first_unconsumed, safe)
        if target > state.cursors.get(rank, 0):
            state.cursors[rank] = target

    async def _take(self, qs: QueueSettings, bucket: int, shard: int, state: RowState, limit: int, visibility_ms: int | None) -> list[Message]:
        self.holds.enter((bucket, shard))  # no hold is acquired on the row while we lock it
        try:
            _trip(3)  # lock write, lock read, acquired write
            lock = await self.locker.acquire(qs, bucket, shard)
            if lock is None:
                self._contended(qs, state)
                return []
            try:
                return await self._take_locked(qs, state, lock, limit, visibility_ms)
            except BaseException:
                await asyncio.shield(self._release_quietly(lock))
                raise
        finally:
            self.holds.leave((bucket, shard))

    async def _take_locked(self, qs: QueueSettings, state: RowState, lock: HeldLock, limit: int, visibility_ms: int | None) -> list[Message]:
        _merge(state.cursors, lock.cursors)
        now = self.clock.now_ms()
        # The re-check must finish before the messages are read. Read together, the message read
        # could be served before a racer's take batch and the re-check after it (the racer's lock
        # column already deleted by that batch): both would take the same messages. Measured: 100
        # duplicates of 50,000 in the skewed race test (tests/test_races.py) with the two reads
        # issued together; docs/design.md, "The re-check comes before the message read".
        _trip()
        alone = await self.locker.recheck(qs, lock)
        if not alone:
            self._contended(qs, state)
            await self.locker.release(lock)
            return []
        state.took()
        found, moves, skips = await self._read_take(qs, lock, state, now, limit)
        if self.locker.expired(qs, lock):
            log.warning("lock_expired_before_take", queue=qs.name, bucket=lock.bucket, shard=lock.shard, read=len(found))
            await self.locker.release(lock)
            return []
        messages = [message_from_row(qs.name, lock.bucket, lock.shard, r) for r in found]
        taken = await self._commit(qs, state, lock, messages, moves, visibility_ms)
        self._skip_to(state, skips)  # committed: later reads may start past what it took
        return taken

    async def _take_held(self, qs: QueueSettings, state: RowState, lock: HeldLock, limit: int, visibility_ms: int | None) -> list[Message]:
        """A take from a row this process holds (holds.py): read, then one batch that keeps the
        hold column. Nothing due: the row's wake time and cursors come from the same read."""
        row = (lock.bucket, lock.shard)
        self.holds.enter(row)
        try:
            if not state.loaded:
                _merge(state.cursors, lock.cursors)  # read with the hold's lock columns
                state.loaded = True
            now = self.clock.now_ms()
            if state.wake <= now + self.ahead_ms:
                state.wake = RowState.wake
            if qs.fifo and state.fifo_idle_until > now:
                return []
            found, moves, skips = await self._read_take(qs, lock, state, now, limit)
            if not found:
                state.next_check = min(self._next_rescan(now), state.wake - self.ahead_ms)
                return []
            state.next_check = now
            pause_point("take.held_read")
            if self.holds.valid(qs, row) is None:  # lapsed meanwhile (a renewal keeps it: the newest column counts)
                log.warning("hold_expired_before_take", queue=qs.name, bucket=lock.bucket, shard=lock.shard, read=len(found))
                return []
            messages = [message_from_row(qs.name, lock.bucket, lock.shard, r) for r in found]
            try:
                taken = await self._commit(qs, state, lock, messages, moves, visibility_ms, keep_lock=True)
                self._skip_to(state, skips)
                return taken
            except BaseException:
                self.holds.drop(row)  # in doubt: the batch may still be applied
                raise
        finally:
            self.holds.leave(row)

    async def _read_take(self, qs: QueueSettings, lock: HeldLock, state: RowState, now: int,
                         limit: int) -> tuple[list[Any], dict[int, int], dict[int, tuple[int, Any]]]:
        """Read what is due (up to the take-ahead) lane by lane, within the take's budget. The
        first lane's read runs on to the lookahead: what it finds there is not taken, but sets
        the row's wake time, so an idle row costs one request per visit, not two."""
        if qs.fifo:
            return await self._read_take_fifo(qs, lock, state, now, limit)
        ranks = qs.ranks()
        due_by = now + self.ahead_ms
        _trip()
        rows, from_skip = await self._read_due(qs, lock, ranks[0], state, now + max(self.lookahead_ms, self.ahead_ms), limit)
        due = [r for r in rows if r.due <= due_by]
        if len(due) < len(rows):
            state.wake = min(state.wake, rows[len(due)].due)
        budget = TakeBudget(limit, TAKE_BYTES)
        moves: dict[int, int] = {}
        skips: dict[int, tuple[int, Any]] = {}
        found = self._keep(budget, moves, skips, ranks[0], due, limit if len(due) == len(rows) else limit + 1, now, from_skip)
        for rank in ranks[1:] if not self._only_top else ():
            if budget.full():
                break
            _trip()
            more, from_skip = await self._read_due(qs, lock, rank, state, due_by, budget.count_left())
            found += self._keep(budget, moves, skips, rank, more, budget.count_left(), now, from_skip)
        if not found:  # nothing to take: what was read is all left for the pull readers, read past it now
            self._skip_to(state, skips)
            skips = {}
        return found, moves, skips

    async def _read_take_fifo(self, qs: QueueSettings, lock: HeldLock, state: RowState, now: int,
                              limit: int) -> tuple[list[Any], dict[int, int], dict[int, tuple[int, Any]]]:
        """A FIFO row's take: its one lane from the cursor, in flight messages included, chosen
        group by group (engine/fifo.py), read page by page (growing, up to FIFO_SCAN rows) only
        while the pages so far leave the take room: a receive of 10 from one group's backlog reads
        a few dozen rows, not a thousand. Nothing deliverable: the row rests until the earliest
        visibility end seen, or a wake-up names it."""
        named = state.fifo_named
        until = now + max(self.lookahead_ms, self.ahead_ms)
        spent = lambda r: out_of_attempts(r.attempt or 0, r.max_attempts or qs.max_attempts)  # noqa: E731
        ours = (lambda r: True) if self.accepts is None else (lambda r: self.accepts(r.task))  # type: ignore[misc]  # noqa: E731
        rows: list[Any] = []
        page = 2 * limit + 8
        while True:
            _trip()
            if rows:
                last = rows[-1]
                more = await self.db.run(self.table.read_due_after, [qs.name, lock.bucket, lock.shard, 0, last.due, last.id, until, page])
            else:
                more = await self.db.run(self.table.read_due, [qs.name, lock.bucket, lock.shard, 0, state.cursors.get(0, 0), until, page])
            rows += more
            budget = TakeBudget(limit, TAKE_BYTES)
            choice = fifo.choose(rows, now, now + self.ahead_ms, lambda r: bool(budget.fit([r])), self._one_per_group, spent, ours)
            if len(more) < page or budget.full() or len(rows) >= fifo.FIFO_SCAN:
                break
            page = min(4 * page, fifo.FIFO_SCAN - len(rows))
        if choice.wake is not None:
            state.wake = min(state.wake, choice.wake)
        if not choice.kept and state.fifo_named == named:  # named meanwhile: what was read may be stale
            state.fifo_idle_until = min(choice.wake if choice.wake is not None else RowState.wake, now + self.rescan_ms)
            state.next_check = min(max(state.next_check, state.fifo_idle_until), state.wake - self.ahead_ms)
        full_read = len(more) >= page  # more may follow the last row read
        return choice.kept, {0: fifo.cursor_target(choice, rows, len(rows) if full_read else len(rows) + 1, now - self.tolerance_ms)}, {}

    def _contended(self, qs: QueueSettings, state: RowState) -> None:
        self.stats.contention += 1
        metrics.CONTENTION.labels(qs.name).inc()
        state.contended(self.clock.elapsed_ms(), qs.lock_ttl_ms)

    async def _read_due(self, qs: QueueSettings, lock: HeldLock, rank: int, state: RowState, until: int, limit: int) -> tuple[list[Any], bool]:
        """The lane's rows from its cursor (or just after its skip) up to ``until`` (inclusive), at
        most ``limit``; and whether the read started at a skip."""
        skip = self._skip(state, rank)
        if skip is not None:
            return await self.db.run(self.table.read_due_after, [qs.name, lock.bucket, lock.shard, rank, skip[0], skip[1], until, limit]), True
        start = state.cursors.get(rank, 0)
        return await self.db.run(self.table.read_due, [qs.name, lock.bucket, lock.shard, rank, start, until, limit]), False

    def _keep(self, budget: "TakeBudget", moves: dict[int, int], skips: dict[int, tuple[int, Any]], rank: int, rows: list[Any],
              read_limit: int, now: int, from_skip: bool) -> list[Any]:
        """The rows of one lane that fit the take, and (in ``moves``) where the lane's cursor may go
        *if* the take commits: past every row kept, never past the first row left behind. Shared
        with pull readers (``accepts``), a task not accepted is left behind too (the cursor stops at
        it), and ``skips`` gets the position after the last row read that was kept or left to them."""
        ours = rows if self.accepts is None else [r for r in rows if self.accepts(r.task)]
        kept = budget.fit(ours)
        safe = now - self.tolerance_ms
        if len(kept) < len(ours):
            target = min(ours[len(kept)].due, safe)  # cut by size: the next one waits for the next take
        elif len(rows) >= read_limit:
            target = min(rows[-1].due, safe)  # a full read: more may follow the last one read
        else:
            target = safe  # a short read: every due row of the lane was read
        if len(ours) < len(rows):
            left = next(r for r in rows if not self.accepts(r.task))  # type: ignore[misc]
            target = min(target, left.due)
        if self.accepts is not None and (len(ours) < len(rows) or from_skip):  # past a skip, the skip follows the take
            passed = _passed(rows, len(kept), self.accepts)
            if passed is not None:
                skips[rank] = (passed.due, passed.id)
        if not from_skip:  # read from a skip: the cursor stays where it is, behind what was left there
            moves[rank] = target
        return kept

    async def _commit(self, qs: QueueSettings, state: RowState, lock: HeldLock, messages: list[Message], moves: dict[int, int],
                      visibility_ms: int | None = None, keep_lock: bool = False) -> list[Message]:
        """The take: one single-partition batch (release lock, remove taken, write timeout columns,
        move the cursors). The in-memory cursors follow only once the batch is written.
        ``visibility_ms`` replaces the messages' own timeout (a pulled message's visibility timeout)."""
        now = self.clock.now_ms()
        batch = self.db.batch()
        if not keep_lock:
            batch.add(self.locker.release_statement(lock))
        delivered: list[Message] = []
        doomed: list[tuple[Message, str]] = []
        chained: list[tuple[Message, Message]] = []
        for m in messages:
            reason = self._poison_reason(m, qs)
            if reason or not qs.fifo:  # a FIFO message stays at its position while it lives (engine/fifo.py)
                batch.add(self.table.delete_message(m, m.due_ms))
            if reason:
                doomed.append((m, reason))
                continue
            nxt = self._next_occurrence(m, now)
            if nxt is not None:  # written in this same batch: the schedule survives any crash
                batch.add(self.table.insert_message(nxt, now, qs.retention_s))
                chain.record_successor(m, nxt)  # stored with m's timeout column (chain.py)
                chained.append((m, nxt))
            if m.state == STATE_IN_FLIGHT:
                self.stats.timed_out += 1
                log.warning("message_redelivered", queue=qs.name, task=m.task, id=str(m.id), attempt=m.attempt + 1, reason="timeout passed before an ack")
            m.scheduled_ms = (m.trigger or {}).get("fire_ms") or m.due_ms
            m.attempt += 1
            m.state = STATE_IN_FLIGHT
            invisible_until = now + (m.timeout_ms if visibility_ms is None else visibility_ms) + self.hold_ms
            if qs.fifo:
                m.copy_due_ms, m.visible_at = m.due_ms, invisible_until
            else:
                m.due_ms = m.copy_due_ms = invisible_until
            if visibility_ms is not None:  # a pull: its receive times ride in the column written anyway
                stamp_received(m.headers, now)
            batch.add(self.table.insert_message(m, now, qs.retention_s))
            m.max_attempts = m.max_attempts or qs.max_attempts  # bound above as stored (0: follow the queue)
            delivered.append(m)
        cursors = dict(state.cursors)
        _merge(cursors, moves)
        for rank, value in cursors.items():
            batch.add(self.table.set_cursor.bind([rank, value, qs.name, lock.bucket, lock.shard]))
        for m, reason in doomed:  # into the poison queue before the batch removes them from the row
            await self.poison.add(m, reason, "Poisoned", m.last_error or reason, "", now, qs.retention_s)
            self.stats.poisoned += 1
            log.error("message_poisoned", queue=qs.name, task=m.task, id=str(m.id), attempt=m.attempt, reason=reason)
        ts = after(*(m.write_ts for m in messages), now_us=self.db.next_timestamp())
        _trip()
        await self.db.run(batch, timestamp=ts)
        _merge(state.cursors, cursors)  # committed: only now may later reads start past what was read
        for m in delivered:
            m.write_ts = ts
        if chained:
            crash_point("schedule.take_committed")
        for m, nxt in chained:
            nxt.write_ts = ts
            self.expect(nxt.bucket, nxt.shard, nxt.due_ms)  # written after our read: nothing else would tell us
            await self._move_key(qs, m, nxt, now)
        if chained:
            crash_point("schedule.key_moved")
        self.stats.takes += 1
        self.stats.taken += len(delivered)
        return delivered

    @staticmethod
    def _next_occurrence(m: Message, now: int) -> Message | None:
        """The schedule's next occurrence, if ``m`` is a schedule's occurrence taken for the first
        time (a redelivery or a retry already chained its successor)."""
        if not m.trigger or m.attempt != 0:
            return None
        t = triggers.following(triggers.Trigger.from_json(m.trigger), now)
        if t is None:
            return None
        # A missed occurrence (misfire 'all') keeps its fire time in the trigger but is queued at
        # now: nothing may be written behind a cursor.
        return replace(m, id=triggers.occurrence_id(t, t.n), due_ms=max(t.fire_ms, now), attempt=0, state=0, trigger=t.to_json(),
                       enqueued_at=now, last_error=None, copy_due_ms=None, write_ts=0)

    async def _move_key(self, qs: QueueSettings, m: Message, nxt: Message, now: int) -> None:
        """Point the schedule's key at its next occurrence (also from an earlier occurrence, when a
        crash left the key behind: chain.py). If the key is gone or names another schedule, it was
        cancelled or replaced meanwhile: withdraw the next occurrence."""
        if not m.key:
            return
        entry = KeyEntry(qs.name, m.key, nxt.id, nxt.bucket, nxt.shard, nxt.task, nxt.trigger, now, last_run=now)
        try:
            moved = await chain.advance(self.keys, entry, m.id)
        except Exception as exc:  # the occurrence ran; lookups follow the chain (lookup.py)
            log.error("schedule_key_not_moved", queue=qs.name, key=m.key, error=str(exc))
            return
        if not moved:
            await self.db.run(self.table.delete_message(nxt, nxt.due_ms), timestamp=after(nxt.write_ts, now_us=self.db.next_timestamp()))
            log.info("schedule_ended", queue=qs.name, key=m.key, reason="cancelled or replaced while an occurrence was taken")

    @staticmethod
    def _poison_reason(m: Message, qs: QueueSettings) -> str | None:
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

    async def _release_quietly(self, lock: HeldLock) -> None:
        try:
            await self.locker.release(lock)
        except Exception:  # the lock's TTL frees the row anyway
            pass


class TakeBudget:
    """How much one take may still hold: a count (the caller's batch size) and payload bytes. The
    first message is always kept, so a row never stalls on one large message (payloads are capped
    at 4 MiB, engine/queues.py, so one message alone always fits)."""

    def __init__(self, count: int, size: int) -> None:
        self.count = count
        self.size = size
        self.used_count = 0
        self.used_size = 0

    def full(self) -> bool:
        return self.used_count >= self.count or self.used_size >= self.size

    def count_left(self) -> int:
        return max(0, self.count - self.used_count)

    def fit(self, rows: list[Any]) -> list[Any]:
        kept: list[Any] = []
        for r in rows:
            cost = take_bytes(r)
            if self.used_count >= self.count or (self.used_count and self.used_size + cost > self.size):
                break
            kept.append(r)
            self.used_count += 1
            self.used_size += cost
        return kept


def take_bytes(r: Any) -> int:
    """What taking stored row ``r`` adds to the batch: its payload copied into the timeout column,
    and once more for a schedule's next occurrence written in the same batch."""
    payload = len(r.payload or b"")
    return payload * (2 if r.trigger else 1) + len(r.last_error or "") + len(r.trigger or "") + MESSAGE_OVERHEAD


def _passed(rows: list[Any], kept: int, accepts: Callable[[str], bool]) -> Any | None:
    """The last of ``rows`` (in row order) before the first accepted one not kept: every row up
    to it was taken or left to the pull readers, so a later read may start after it."""
    last = None
    ours = 0
    for r in rows:
        if accepts(r.task):
            if ours >= kept:
                break
            ours += 1
        last = r
    return last


def _merge(mine: dict[int, int], theirs: dict[int, int]) -> None:
    for rank, value in theirs.items():
        if value > mine.get(rank, 0):
            mine[rank] = value

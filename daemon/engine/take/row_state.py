"""What a consumer knows about one shard row, shared by the choice of rows (engine/consume/consumer.py) and
the take (step.py).

Everything here is a hint for cost, never needed for correctness: a process that knows nothing reads
every row from its stored cursors. Also here: the count of sequential round trips a fetch makes (a
context variable, so gathered children add to the same count) and the cursor merge both sides use.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from daemon.base.clock import Clock
from daemon.base.model import QueueSettings

#: The first wait after a row's lock was found busy; it doubles up to a lock TTL.
MIN_BACKOFF_MS = 50
#: A take's frontier covers only messages due this long before its read: a send due later than that may still be
#: on its way to the node (or its producer's clock lag behind ours), and a read from the frontier would miss it.
FRONTIER_LAG_MS = 250
#: A lane's frontier is forgotten this long after it was set: the next read starts at the cursor again, finds
#: what was written behind the frontier with no wake-up to say so, and is the only read that moves the cursor.
FRONTIER_MS = 1000
#: Sequential round trips of the fetch running in this task (a list, so gathered children add to it).
TRIPS: ContextVar[list[int]] = ContextVar("casque_trips")
#: A row's wake when nothing is coming (``RowState.wake`` read on the class).
NEVER = 1 << 62


def trip(n: int = 1) -> None:
    """Count ``n`` sequential round trips against the fetch running in this task."""
    trips = TRIPS.get(None)
    if trips is not None:
        trips[0] += n


class _Wake:
    """``RowState.wake``: the earliest due time this process wrote into the row, or a read saw coming. A row whose
    wake becomes finite enters its ``Rows.waking``, so ``ShardNames`` reads the few rows with something coming, not
    every row of the queue on every wake-up and every fetch, a cost that grows with the queue's rows. Read on the
    class it is ``NEVER``, the value of a row with nothing coming."""

    def __get__(self, state: RowState | None, owner: type | None = None) -> int:
        return NEVER if state is None else state._wake

    def __set__(self, state: RowState, value: int) -> None:
        state._wake = value
        if value < NEVER and state._waking is not None:
            state._waking.add(state._key)


@dataclass
class RowState:
    """What this process knows about one row; a hint for cost, never needed for correctness."""

    #: The ``Rows`` this row was put in: the set of its ``waking`` keys, and the row's key there (``_Wake``).
    _waking: set[tuple[int, int]] | None = field(default=None, init=False, repr=False, compare=False)
    _key: tuple[int, int] = field(default=(0, 0), init=False, repr=False, compare=False)
    _wake: int = field(default=NEVER, init=False, repr=False, compare=False)
    cursors: dict[int, int] = field(default_factory=dict)
    loaded: bool = False
    next_check: int = 0
    wake: _Wake = _Wake()
    busy: bool = False
    #: After the row's lock was found busy: not tried again before this (monotonic ms). Doubles
    #: while the row stays busy (another daemon holds it, engine/take/holds.py), so a busy row costs little.
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
    #: This process wrote the row's anchor (``MessageTable.write_anchor``) with a take that committed.
    anchored: bool = False
    #: The lanes' cursors as this process knows them stored (read, committed by a take, or written by
    #: engine/consume/cursor_keeper.py): how far the in-memory ones ran ahead.
    stored: dict[int, int] = field(default_factory=dict)
    #: The latest due time of a timeout column this process's takes wrote into the row: acked, each is a
    #: tombstone ahead of the cursor, and the stored cursor is kept close behind peeks until past them.
    pile_until: int = 0
    #: In place: the ranges of the check entries this consumer wrote in the row, by (rank, slot), merged into by
    #: each take whose messages' visibility ends in the slot (engine/take/flights.py ``check_entries``).
    entry_spans: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    #: Per lane, the (due, id) of the last message this process's committed takes took, of every message read
    #: from the start of the read up to it (and due ``FRONTIER_LAG_MS`` before the read): later reads start just
    #: after it, not at the cursor, so a drain does not read again the tombstones of what it took until the cursor
    #: passes them (``clock_tolerance`` later). Forgotten every ``FRONTIER_MS`` (``frontier_since``) and on a
    #: wake-up for a message at or behind it (``behind``). docs/design.md, "The take's frontier".
    frontier: dict[int, tuple[int, Any]] = field(default_factory=dict)
    frontier_since: int = 0
    frontier_wall: int = 0
    #: The lanes whose frontier is *sealed*: every message behind it was due more than a clock tolerance before the
    #: read that passed it, so none can be written there any more, and a read from it moves the cursor.
    sealed: set[int] = field(default_factory=set)
    #: The earliest due time a wake-up named since the running take began to read: that take's frontier must stop
    #: before it (the message may have landed behind what the read saw).
    frontier_block: int = 1 << 62

    def contended(self, now_elapsed: int, cap_ms: int) -> None:
        self.backoff_ms = min(cap_ms, max(MIN_BACKOFF_MS, 2 * self.backoff_ms))
        self.backoff_until = now_elapsed + self.backoff_ms

    def took(self) -> None:
        self.backoff_ms = self.backoff_until = 0

    def skip(
        self, rank: int, accepts: Callable[[str], bool] | None, clock: Clock, rescan_ms: int
    ) -> tuple[int, Any] | None:
        """Where this lane's reads start instead of the cursor, if past it: just after the last
        message left for the pull readers, else just after the take's frontier. Skips are forgotten
        every rescan interval, so a message left behind is re-read at most that often, and one
        written behind the skip is found then; the frontier every ``FRONTIER_MS``."""
        now_elapsed = clock.elapsed_ms()
        if accepts is not None and self.skips:
            if now_elapsed - self.skip_since >= rescan_ms:
                self.skips.clear()
            else:
                pos = self.skips.get(rank)
                if pos is not None and pos[0] >= self.cursors.get(rank, 0):
                    return pos
        if not self.frontier:
            return None
        # Aged on both clocks: the wall clock's (a test's or an NTP step forward ends it early) and the monotonic
        # one (a step back does not make it live longer).
        if now_elapsed - self.frontier_since >= FRONTIER_MS or clock.now_ms() - self.frontier_wall >= FRONTIER_MS:
            self.forget_frontier()
            return None
        pos = self.frontier.get(rank)
        return pos if pos is not None and pos[0] >= self.cursors.get(rank, 0) else None

    def reading(self) -> None:
        """A take begins to read the row: wake-ups from now on may name what its read misses."""
        self.frontier_block = RowState.frontier_block

    def behind(self, due_ms: int) -> None:
        """A wake-up: a message due at ``due_ms`` was written to this row, perhaps behind the frontier
        (another producer's send that reached the node after our read). Reads start at the cursor again."""
        self.frontier_block = min(self.frontier_block, due_ms)
        if any(pos[0] >= due_ms for pos in self.frontier.values()):
            self.forget_frontier()

    def forget_frontier(self) -> None:
        self.frontier.clear()
        self.sealed.clear()

    def advance(self, frontier: dict[int, tuple[int, Any]], sealed: set[int], clock: Clock) -> None:
        """A committed take's frontier: later reads of these lanes start just after it."""
        frontier = {rank: pos for rank, pos in frontier.items() if pos[0] < self.frontier_block}
        if not frontier:
            return
        if not self.frontier:
            self.frontier_since, self.frontier_wall = clock.elapsed_ms(), clock.now_ms()
        self.frontier.update(frontier)
        self.sealed = (self.sealed - frontier.keys()) | (sealed & frontier.keys())

    def skip_to(
        self, skips: dict[int, tuple[int, Any]], accepts: Callable[[str], bool] | None, now_elapsed: int
    ) -> None:
        """Later reads of these lanes start just after these positions (shared with pull readers only)."""
        if not skips or accepts is None:
            return
        if not self.skips:
            self.skip_since = now_elapsed
        self.skips.update(skips)


class Rows(dict[tuple[int, int], RowState]):
    """A consumer's rows by (bucket, shard), and ``waking``: the keys of the rows whose wake may be finite. Every row
    with a finite wake has its key there (a row put in with one by ``__setitem__``, one whose wake becomes finite
    later by ``_Wake``); a key whose row's wake has passed since stays until ``ShardNames`` reads it and drops it.
    Rows go in by ``rows[key] = state`` or ``setdefault`` only (``dict.update`` would pass them by)."""

    def __init__(self) -> None:
        super().__init__()
        self.waking: set[tuple[int, int]] = set()

    def __setitem__(self, key: tuple[int, int], state: RowState) -> None:
        state._waking, state._key = self.waking, key
        if state.wake < NEVER:
            self.waking.add(key)
        super().__setitem__(key, state)

    def setdefault(self, key: tuple[int, int], default: RowState) -> RowState:
        state = self.get(key)
        if state is None:
            self[key] = state = default
        return state


@dataclass
class ConsumerStats:
    takes: int = 0
    taken: int = 0
    contention: int = 0
    empty_polls: int = 0
    peeks: int = 0
    timed_out: int = 0
    poisoned: int = 0


def next_rescan(now: int, rescan_ms: int) -> int:
    """Between a half and a whole ``rescan_ms`` from now, at random: the rows of a queue peeked
    together once (a cold start) drift apart, so rescans never come as one burst of hundreds
    of reads, which would hold up the messages falling due meanwhile."""
    return now + rescan_ms // 2 + random.randrange(rescan_ms // 2 + 1)


def rows_to_check(
    rows: dict[tuple[int, int], RowState], qs: QueueSettings, shard: int, now: int, tolerance_ms: int
) -> tuple[list[int], list[int]]:
    """A shard's (rows to visit every round, rows whose rescan has come, oldest first): the current
    bucket's row, and the previous one while late producers may still write to it (one clock
    tolerance); any other row once its ``next_check`` has come (a row never looked at: at once)."""
    current_abs = now // qs.bucket_ms
    current = current_abs % qs.buckets
    every = [current]
    previous = (current_abs - 1) % qs.buckets
    if now - current_abs * qs.bucket_ms < tolerance_ms and previous != current:
        every.insert(0, previous)
    span = qs.span()[1]
    rescans = [b for b in range(span) if b not in every and _rescan_due(rows.get((b, shard)), now)]
    rescans.sort(key=lambda b: -((current - b) % span))  # oldest first
    return every, rescans


def _rescan_due(state: RowState | None, now: int) -> bool:
    return state is None or state.next_check <= now


def loaded_from_store(state: RowState, cursors: dict[int, int]) -> None:
    """The row's cursors as read from Cassandra: merged into what this process knows, and known stored."""
    merge(state.cursors, cursors)
    merge(state.stored, cursors)
    state.loaded = True


def merge(mine: dict[int, int], theirs: dict[int, int]) -> None:
    """Cursors only move forward: take the later of each lane's two positions."""
    for rank, value in theirs.items():
        if value > mine.get(rank, 0):
            mine[rank] = value

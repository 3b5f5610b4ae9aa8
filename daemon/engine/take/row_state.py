"""What a consumer knows about one shard row, shared by the choice of rows (engine/consume/consumer.py) and
the take (step.py).

Everything here is a hint for cost, never needed for correctness: a process that knows nothing reads
every row from its stored cursors. Where a lane's read starts is an object of its own (``RowState.start``,
read_start.py). Also here: the count of sequential round trips a fetch makes (a context variable, so gathered
children add to the same count).
"""

from __future__ import annotations

import random
from contextvars import ContextVar
from dataclasses import dataclass, field

from daemon.base.model import QueueSettings
from daemon.engine.take.read_start import ReadStart

#: The first wait after a row's lock was found busy; it doubles up to a lock TTL.
MIN_BACKOFF_MS = 50
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
class FifoRest:
    """A FIFO row whose due messages all belong to groups in flight: its peek would say "due" on every visit, so
    it is not peeked before ``until`` (the earliest visibility end seen, at most a rescan away) unless a wake-up
    names its shard (a send, a delete, a visibility change)."""

    until: int = 0
    #: Counts the wake-ups that named this row: a take that read the row before one of them (a delete that
    #: unblocked a group) must not put the row to rest on what it read.
    named: int = 0

    def resting(self, now: int) -> bool:
        return self.until > now

    def name(self) -> None:
        """A wake-up named the row: something there may have changed."""
        self.until = 0
        self.named += 1


@dataclass
class RowState:
    """What this process knows about one row; a hint for cost, never needed for correctness."""

    #: The ``Rows`` this row was put in: the set of its ``waking`` keys, and the row's key there (``_Wake``).
    _waking: set[tuple[int, int]] | None = field(default=None, init=False, repr=False, compare=False)
    _key: tuple[int, int] = field(default=(0, 0), init=False, repr=False, compare=False)
    _wake: int = field(default=NEVER, init=False, repr=False, compare=False)
    next_check: int = 0
    wake: _Wake = _Wake()
    busy: bool = False
    #: After the row's lock was found busy: not tried again before this (monotonic ms). Doubles
    #: while the row stays busy (another daemon holds it, engine/take/holds.py), so a busy row costs little.
    backoff_until: int = 0
    backoff_ms: int = 0
    #: The highest lane (lowest rank) the last peek found something due in.
    best_rank: int = 0
    #: A wake-up named this row since its last peek (a send to it).
    named: bool = False
    #: Where each lane's reads start, and what is known of the row's cursors.
    start: ReadStart = field(default_factory=ReadStart)
    #: A FIFO row at rest (``FifoRest``).
    fifo: FifoRest = field(default_factory=FifoRest)
    #: In place: the ranges of the check entries this consumer wrote in the row, by (rank, slot), merged into by
    #: each take whose messages' visibility ends in the slot (engine/take/flights.py ``check_entries``).
    entry_spans: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)

    def contended(self, now_elapsed: int, cap_ms: int) -> None:
        self.backoff_ms = min(cap_ms, max(MIN_BACKOFF_MS, 2 * self.backoff_ms))
        self.backoff_until = now_elapsed + self.backoff_ms

    def took(self) -> None:
        self.backoff_ms = self.backoff_until = 0


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

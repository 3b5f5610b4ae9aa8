"""What a take reads under the row lock: each lane from its cursor within the take's budget, or a
FIFO row group by group; and where each lane's cursor may go if the take commits.

Nothing here writes: the take (engine/take/step.py) commits what this read, and only a committed take moves a
cursor. What the read learns about the row on the way (its wake time, a FIFO row's rest, the skips
left for pull readers) goes into its ``RowState``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from daemon.base.clock import Clock
from daemon.base.model import QueueSettings, out_of_attempts
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import MessageTable
from daemon.engine.take import fifo
from daemon.engine.take.budget import TAKE_BYTES, TakeBudget
from daemon.engine.take.flights import Flights, is_entry, is_ghost, scan
from daemon.engine.take.options import TakeOptions
from daemon.engine.take.read_start import FRONTIER_LAG_MS
from daemon.engine.take.row_lock import HeldLock
from daemon.engine.take.row_state import RowState, trip

Skips = dict[int, tuple[int, Any]]


@dataclass
class TakeRead:
    """What a take read: the rows to take, where each lane's cursor may go if it commits, skips, and
    where each lane's later reads may start if it commits (``ReadStart.frontier``)."""

    found: list[Any]
    moves: dict[int, int]
    skips: Skips
    frontier: Skips = field(default_factory=dict)
    sealed: set[int] = field(default_factory=set)  # lanes whose frontier is sealed (``ReadStart.sealed``)
    flights: Flights = field(default_factory=Flights)  # the check entries processed (flights.py)

    def anything(self) -> bool:
        """Whether the take has something to commit: messages, or check entries processed."""
        return bool(self.found or self.flights)


class TakeReader:
    """Reads one row for a take (under its lock or hold). Durations are ms."""

    def __init__(
        self, db: Database, table: MessageTable, clock: Clock, tolerance_ms: int, rescan_ms: int, lookahead_ms: int
    ) -> None:
        self.db, self.table, self.clock = db, table, clock
        self.tolerance_ms, self.rescan_ms, self.lookahead_ms = tolerance_ms, rescan_ms, lookahead_ms

    async def read(self, qs: QueueSettings, lock: HeldLock, state: RowState, now: int, opts: TakeOptions) -> TakeRead:
        """Read what is due (up to the take-ahead) lane by lane, within the take's budget. The
        first lane's read runs on to the lookahead: what it finds there is not taken, but sets
        the row's wake time, so an idle row costs one request per visit, not two."""
        if qs.fifo:
            return await self._read_fifo(qs, lock, state, now, opts)
        ranks = qs.ranks()
        due_by = now + opts.ahead_ms
        limit = opts.limit
        state.start.reading()
        trip()
        rows, from_skip = await self._read_due(
            qs, lock, ranks[0], state, now + max(self.lookahead_ms, opts.ahead_ms), limit, opts
        )
        sealed = {ranks[0]} if not from_skip else set()
        due = [r for r in rows if r.due <= due_by]
        if len(due) < len(rows):
            state.wake = min(state.wake, rows[len(due)].due)
        budget = TakeBudget(limit, TAKE_BYTES)
        moves: dict[int, int] = {}
        skips: Skips = {}
        frontier: Skips = {}
        read_limit = limit if len(due) == len(rows) else limit + 1
        found = self._keep(budget, moves, skips, ranks[0], due, read_limit, now, from_skip, opts)
        _frontier(frontier, sealed, ranks[0], found, now, self.tolerance_ms, opts)
        entries = _not_messages(due)
        for rank in ranks[1:] if not opts.top_lane_only else ():
            if budget.full():
                break
            trip()
            more, from_skip = await self._read_due(qs, lock, rank, state, due_by, budget.count_left(), opts)
            if not from_skip:
                sealed.add(rank)
            kept = self._keep(budget, moves, skips, rank, more, budget.count_left(), now, from_skip, opts)
            _frontier(frontier, sealed, rank, kept, now, self.tolerance_ms, opts)
            found += kept
            entries += _not_messages(more)
        flights = await self._flights(qs, lock, entries, budget, due_by, opts) if entries else Flights()
        found += flights.rescued
        if not found:  # nothing to take: what was read is all left for the pull readers, read past it now
            state.start.skip_to(skips, opts.accepts, self.clock.elapsed_ms())
            skips = {}
        return TakeRead(found, moves, skips, frontier, sealed & frontier.keys(), flights)

    async def _flights(
        self,
        qs: QueueSettings,
        lock: HeldLock,
        rows: list[Any],
        budget: TakeBudget,
        due_by: int,
        opts: TakeOptions,
    ) -> Flights:
        """A lane's rows read that are not messages (all due by ``due_by``, now + the take-ahead): the check
        entries are scanned (flights.py), ghosts dropped. A message visible again by ``due_by`` is delivered, as a
        waiting message due by then is: the take-ahead applies to redeliveries too. (An entry left for its
        due time instead set the row's wake there, and a daemon's take-ahead took the row again until it came.)"""
        due = [r for r in rows if is_entry(r)]
        ghosts = [r for r in rows if is_ghost(r)]
        if not due:
            return Flights(drop=ghosts)
        accepts = opts.accepts
        trip()
        flights = await scan(
            self.db,
            self.table,
            qs,
            (lock.bucket, lock.shard),
            due,
            due_by,
            lambda r: (accepts is None or accepts(r.task)) and bool(budget.fit([r])),
        )
        flights.drop += ghosts
        return flights

    async def _read_fifo(
        self, qs: QueueSettings, lock: HeldLock, state: RowState, now: int, opts: TakeOptions
    ) -> TakeRead:
        """A FIFO row's take: its one lane from the cursor, in flight messages included, chosen
        group by group (engine/take/fifo.py), read page by page (growing, up to FIFO_SCAN rows) only
        while the pages so far leave the take room: a receive of 10 from one group's backlog reads
        a few dozen rows, not a thousand. Nothing deliverable: the row rests until the earliest
        visibility end seen, or a wake-up names it."""
        named = state.fifo.named
        limit, accepts = opts.limit, opts.accepts
        until = now + max(self.lookahead_ms, opts.ahead_ms)
        spent = lambda r: out_of_attempts(r.attempt or 0, r.max_attempts or qs.max_attempts)  # noqa: E731
        ours = (lambda r: True) if accepts is None else (lambda r: accepts(r.task))  # noqa: E731
        rows: list[Any] = []
        page = 2 * limit + 8
        while True:
            trip()
            if rows:
                last = rows[-1]
                more = await self.db.run(
                    self.table.read_due_after, [qs.name, lock.bucket, lock.shard, 0, last.due, last.id, until, page]
                )
            else:
                more = await self.db.run(
                    self.table.read_due, [qs.name, lock.bucket, lock.shard, 0, state.start.cursor(0), until, page]
                )
            rows += more
            budget = TakeBudget(limit, TAKE_BYTES)
            choice = fifo.choose(
                rows,
                now,
                now + opts.ahead_ms,
                partial(_fits, budget),
                opts.one_per_group,
                spent,
                ours,
            )
            if len(more) < page or budget.full() or len(rows) >= fifo.FIFO_SCAN:
                break
            page = min(4 * page, fifo.FIFO_SCAN - len(rows))
        if choice.wake is not None:
            state.wake = min(state.wake, choice.wake)
        if not choice.kept and state.fifo.named == named:  # named meanwhile: what was read may be stale
            state.fifo.until = min(choice.wake if choice.wake is not None else RowState.wake, now + self.rescan_ms)
            state.next_check = min(max(state.next_check, state.fifo.until), state.wake - opts.ahead_ms)
        full_read = len(more) >= page  # more may follow the last row read
        return TakeRead(
            choice.kept,
            {0: fifo.cursor_target(choice, rows, len(rows) if full_read else len(rows) + 1, now - self.tolerance_ms)},
            {},
        )

    async def _read_due(
        self, qs: QueueSettings, lock: HeldLock, rank: int, state: RowState, until: int, limit: int, opts: TakeOptions
    ) -> tuple[list[Any], bool]:
        """The lane's rows from its cursor (or just after its skip) up to ``until`` (inclusive), at
        most ``limit``; and whether the read started at a skip that keeps the cursor where it is (a
        sealed frontier does not: the read moves the cursor as one from the cursor would)."""
        skip = state.start.skip(rank, opts.accepts, self.clock, self.rescan_ms)
        if skip is not None:
            return await self.db.run(
                self.table.reads(qs).read_due_after,
                [qs.name, lock.bucket, lock.shard, rank, skip[0], skip[1], until, limit],
            ), state.start.keeps_cursor(rank, skip)
        start = state.start.cursor(rank)
        return await self.db.run(
            self.table.reads(qs).read_due, [qs.name, lock.bucket, lock.shard, rank, start, until, limit]
        ), False

    def _keep(
        self,
        budget: TakeBudget,
        moves: dict[int, int],
        skips: Skips,
        rank: int,
        rows: list[Any],
        read_limit: int,
        now: int,
        from_skip: bool,
        opts: TakeOptions,
    ) -> list[Any]:
        """The rows of one lane that fit the take, and (in ``moves``) where the lane's cursor may go
        *if* the take commits: past every row kept, never past the first row left behind. Shared
        with pull readers (``accepts``), a task not accepted is left behind too (the cursor stops at
        it), and ``skips`` gets the position after the last row read that was kept or left to them.
        Rows without a task are check entries (flights.py): read past, not kept
        (the take processes the due ones; one due later lies past now - tolerance, where no cursor goes)."""
        accepts = opts.accepts
        read = rows
        rows = [r for r in rows if r.task is not None]
        ours = rows if accepts is None else [r for r in rows if accepts(r.task)]
        kept = budget.fit(ours)
        safe = now - self.tolerance_ms
        if len(kept) < len(ours):
            target = min(ours[len(kept)].due, safe)  # cut by size: the next one waits for the next take
        elif len(read) >= read_limit:
            target = min(read[-1].due, safe)  # a full read: more may follow the last one read
        else:
            target = safe  # a short read: every due row of the lane was read
        if accepts is not None and len(ours) < len(rows):
            left = next(r for r in rows if not accepts(r.task))
            target = min(target, left.due)
        if accepts is not None and (len(ours) < len(rows) or from_skip):  # past a skip, the skip follows the take
            passed = _passed(rows, len(kept), accepts)
            if passed is not None:
                skips[rank] = (passed.due, passed.id)
        if not from_skip:  # read from a skip: the cursor stays where it is, behind what was left there
            moves[rank] = target
        return kept


def _frontier(
    frontier: Skips, sealed: set[int], rank: int, kept: list[Any], now: int, tolerance_ms: int, opts: TakeOptions
) -> None:
    """The lane's frontier if the take commits: the last row kept that was due ``FRONTIER_LAG_MS`` before the
    read. Every row read before it was kept too (with no pull readers, a take keeps the leading rows it read),
    so what lies behind it is what this take took, or tombstones: later reads start after it (ReadStart.skip).
    It stays *sealed* (in ``sealed``) if the read started at the cursor or a sealed frontier and it is due
    before now - tolerance: nothing can be written behind it any more (docs/design.md, "The take's frontier")."""
    if opts.accepts is not None:
        return  # pull readers' skips (``_passed``) say where reads may start
    settled = now - FRONTIER_LAG_MS
    for r in reversed(kept):
        if r.due <= settled:
            frontier[rank] = (r.due, r.id)
            break
    if rank in frontier and frontier[rank][0] >= now - tolerance_ms:
        sealed.discard(rank)


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


def _not_messages(rows: list[Any]) -> list[Any]:
    """A lane's rows read that have no task: check entries (and ghosts, which filtered reads never return
    but a row written by hand could be), for ``TakeReader._flights``."""
    return [r for r in rows if r.task is None]


def _fits(budget: TakeBudget, row: Any) -> bool:
    """Whether ``row`` still fits the take's budget (FIFO's choice asks row by row)."""
    return bool(budget.fit([row]))

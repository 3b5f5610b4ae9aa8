"""Where a read of one row's lanes starts: ``RowState.start``.

A lane's read starts at its cursor, or just after a position past it: the last message left for pull readers (a
skip), or the last one this process's committed takes took (the take's frontier). Kept with them, whether the
cursors were loaded from the row. All of it is a hint for cost: a process that knows nothing reads every lane from
its stored cursor. docs/design.md, "Where a read starts".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from daemon.base.clock import Clock

#: A take's frontier covers only messages due this long before its read: a send due later than that may still be
#: on its way to the node (or its producer's clock lag behind ours), and a read from the frontier would miss it.
FRONTIER_LAG_MS = 250
#: A lane's frontier is forgotten this long after it was set: the next read starts at the cursor again, finds
#: what was written behind the frontier with no wake-up to say so, and is the only read that moves the cursor.
FRONTIER_MS = 1000
#: ``frontier_block`` while no wake-up named a due time during the running take.
UNBLOCKED = 1 << 62

Position = tuple[int, Any]  # (due, id) of a message in a lane


@dataclass
class ReadStart:
    """Where each lane's read of one row starts (``at``, ``skip``), and what is known of its cursors."""

    #: Per lane, the cursor as this process knows it: no live message of the lane is due before it.
    cursors: dict[int, int] = field(default_factory=dict)
    #: The cursors were read from the row (or the row found to have none).
    loaded: bool = False
    #: This process wrote the row's anchor (``MessageTable.write_anchor``) with a take that committed.
    anchored: bool = False
    #: Per lane, the position of the last message read that was left for pull readers (or taken
    #: with them): later reads start just after it instead of at the cursor. Forgotten every
    #: ``rescan_ms`` (``skip_since``), so each message left is re-read at most once per rescan.
    skips: dict[int, Position] = field(default_factory=dict)
    skip_since: int = 0
    #: Per lane, the position of the last message this process's committed takes took, of every message read
    #: from the start of the read up to it (and due ``FRONTIER_LAG_MS`` before the read): later reads start just
    #: after it, not at the cursor, so a drain does not read again the tombstones of what it took until the cursor
    #: passes them (``clock_tolerance`` later). Forgotten every ``FRONTIER_MS`` (``frontier_since``, and
    #: ``frontier_wall`` on the wall clock) and on a wake-up for a message at or behind it (``behind``).
    #: docs/design.md, "The take's frontier".
    frontier: dict[int, Position] = field(default_factory=dict)
    frontier_since: int = 0
    frontier_wall: int = 0
    #: The lanes whose frontier is *sealed*: every message behind it was due more than a clock tolerance before the
    #: read that passed it, so none can be written there any more, and a read from it moves the cursor.
    sealed: set[int] = field(default_factory=set)
    #: The earliest due time a wake-up named since the running take began to read: that take's frontier must stop
    #: before it (the message may have landed behind what the read saw).
    frontier_block: int = UNBLOCKED

    def cursor(self, rank: int) -> int:
        return self.cursors.get(rank, 0)

    def at(self, rank: int, accepts: Callable[[str], bool] | None, clock: Clock, rescan_ms: int) -> int:
        """The due time a read of this lane starts at: its cursor, or its skip's or frontier's (``skip``)."""
        skip = self.skip(rank, accepts, clock, rescan_ms)
        return self.cursor(rank) if skip is None else skip[0]

    def skip(self, rank: int, accepts: Callable[[str], bool] | None, clock: Clock, rescan_ms: int) -> Position | None:
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
                if pos is not None and pos[0] >= self.cursor(rank):
                    return pos
        if not self.frontier:
            return None
        # Aged on both clocks: the wall clock's (a test's or an NTP step forward ends it early) and the monotonic
        # one (a step back does not make it live longer).
        if now_elapsed - self.frontier_since >= FRONTIER_MS or clock.now_ms() - self.frontier_wall >= FRONTIER_MS:
            self.forget_frontier()
            return None
        pos = self.frontier.get(rank)
        return pos if pos is not None and pos[0] >= self.cursor(rank) else None

    def keeps_cursor(self, rank: int, skip: Position) -> bool:
        """Whether a read from ``skip`` must leave the lane's cursor where it is: it may have passed messages left
        behind it, unless it is the lane's sealed frontier (a read from it moves the cursor as one from the cursor)."""
        return rank not in self.sealed or skip != self.frontier.get(rank)

    def reading(self) -> None:
        """A take begins to read the row: wake-ups from now on may name what its read misses."""
        self.frontier_block = UNBLOCKED

    def behind(self, due_ms: int) -> None:
        """A wake-up: a message due at ``due_ms`` was written to this row, perhaps behind the frontier
        (another producer's send that reached the node after our read). Reads start at the cursor again."""
        self.frontier_block = min(self.frontier_block, due_ms)
        if any(pos[0] >= due_ms for pos in self.frontier.values()):
            self.forget_frontier()

    def forget_frontier(self) -> None:
        self.frontier.clear()
        self.sealed.clear()

    def advance(self, frontier: dict[int, Position], sealed: set[int], clock: Clock) -> None:
        """A committed take's frontier: later reads of these lanes start just after it."""
        frontier = {rank: pos for rank, pos in frontier.items() if pos[0] < self.frontier_block}
        if not frontier:
            return
        if not self.frontier:
            self.frontier_since, self.frontier_wall = clock.elapsed_ms(), clock.now_ms()
        self.frontier.update(frontier)
        self.sealed = (self.sealed - frontier.keys()) | (sealed & frontier.keys())

    def skip_to(self, skips: dict[int, Position], accepts: Callable[[str], bool] | None, now_elapsed: int) -> None:
        """Later reads of these lanes start just after these positions (shared with pull readers only)."""
        if not skips or accepts is None:
            return
        if not self.skips:
            self.skip_since = now_elapsed
        self.skips.update(skips)

    def forget_skips(self) -> None:
        """What was left for pull readers is read again from the cursors (the queue has none any more)."""
        self.skips.clear()

    def move(self, rank: int, target: int) -> bool:
        """A read found nothing live in the lane before ``target``: its cursor moves there (never back); whether
        it moved."""
        if target <= self.cursor(rank):
            return False
        self.cursors[rank] = target
        return True

    def caught_up(self, cursors: dict[int, int]) -> None:
        """Cursors a read under the row's lock saw: each lane's is the later of the two."""
        merge(self.cursors, cursors)

    def loaded_from_store(self, cursors: dict[int, int]) -> None:
        """The row's cursors as read from Cassandra: merged into what this process knows."""
        merge(self.cursors, cursors)
        self.loaded = True

    def moved(self, moves: dict[int, int]) -> dict[int, int]:
        """The cursors a take writes: the known ones, moved by the take's ``moves``."""
        cursors = dict(self.cursors)
        merge(cursors, moves)
        return cursors

    def committed(self, cursors: dict[int, int]) -> None:
        """A take's batch wrote these cursors, and the row's anchor: only now may later reads start past them."""
        merge(self.cursors, cursors)
        self.anchored = True


def merge(mine: dict[int, int], theirs: dict[int, int]) -> None:
    """Cursors only move forward: take the later of each lane's two positions."""
    for rank, value in theirs.items():
        if value > mine.get(rank, 0):
            mine[rank] = value

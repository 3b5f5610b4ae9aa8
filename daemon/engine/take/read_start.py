"""Where a read of one row's lanes starts: ``RowState.start``.

A lane's read starts at its cursor, or just after the last message left for pull readers past it (a skip). Kept
with them, what is known of the cursors: whether they were loaded from the row, how far they are stored, and what
tombstones of ours lie ahead of the stored ones. All of it is a hint for cost: a process that knows nothing reads
every lane from its stored cursor. docs/design.md, "Where a read starts".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from daemon.base.clock import Clock

Position = tuple[int, Any]  # (due, id) of a message in a lane


@dataclass
class ReadStart:
    """Where each lane's read of one row starts (``at``, ``skip``), and what is known of its cursors."""

    #: Per lane, the cursor as this process knows it: no live message of the lane is due before it.
    cursors: dict[int, int] = field(default_factory=dict)
    #: The cursors were read from the row (or the row found to have none).
    loaded: bool = False
    #: The lanes' cursors as this process knows them stored (read, committed by a take, or written by
    #: engine/consume/cursor_keeper.py): how far the in-memory ones ran ahead.
    stored: dict[int, int] = field(default_factory=dict)
    #: The latest due time of a timeout column this process's takes wrote into the row: acked, each is a
    #: tombstone ahead of the cursor, and the stored cursor is kept close behind peeks until past them.
    pile_until: int = 0
    #: This process wrote the row's anchor (``MessageTable.write_anchor``) with a take that committed.
    anchored: bool = False
    #: Per lane, the position of the last message read that was left for pull readers (or taken
    #: with them): later reads start just after it instead of at the cursor. Forgotten every
    #: ``rescan_ms`` (``skip_since``), so each message left is re-read at most once per rescan.
    skips: dict[int, Position] = field(default_factory=dict)
    skip_since: int = 0

    def cursor(self, rank: int) -> int:
        return self.cursors.get(rank, 0)

    def at(self, rank: int, accepts: Callable[[str], bool] | None, clock: Clock, rescan_ms: int) -> int:
        """The due time a read of this lane starts at: its cursor, or its skip's (``skip``)."""
        skip = self.skip(rank, accepts, clock, rescan_ms)
        return self.cursor(rank) if skip is None else skip[0]

    def skip(self, rank: int, accepts: Callable[[str], bool] | None, clock: Clock, rescan_ms: int) -> Position | None:
        """Where this lane's reads start instead of the cursor, if past it: just after the last message left for the
        pull readers. Skips are forgotten every rescan interval, so a message left behind is re-read at most that
        often, and one written behind the skip is found then."""
        if accepts is None or not self.skips:
            return None
        if clock.elapsed_ms() - self.skip_since >= rescan_ms:
            self.skips.clear()
            return None
        pos = self.skips.get(rank)
        return pos if pos is not None and pos[0] >= self.cursor(rank) else None

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
        """The row's cursors as read from Cassandra: merged into what this process knows, and known stored."""
        merge(self.cursors, cursors)
        merge(self.stored, cursors)
        self.loaded = True

    def moved(self, moves: dict[int, int]) -> dict[int, int]:
        """The cursors a take writes: the known ones, moved by the take's ``moves``."""
        cursors = dict(self.cursors)
        merge(cursors, moves)
        return cursors

    def committed(self, cursors: dict[int, int]) -> None:
        """A take's batch wrote these cursors, and the row's anchor: only now may later reads start past them."""
        merge(self.cursors, cursors)
        merge(self.stored, cursors)
        self.anchored = True

    def stored_at(self, lanes: dict[int, int]) -> None:
        """These lanes' cursors were written (engine/consume/cursor_keeper.py)."""
        merge(self.stored, lanes)

    def piled(self, due_ms: int) -> None:
        """A check entry of ours due at ``due_ms`` was written into the row: a tombstone ahead of the cursor once
        processed, which the stored cursor is kept close behind peeks until past (``pile_until``)."""
        self.pile_until = max(self.pile_until, due_ms)


def merge(mine: dict[int, int], theirs: dict[int, int]) -> None:
    """Cursors only move forward: take the later of each lane's two positions."""
    for rank, value in theirs.items():
        if value > mine.get(rank, 0):
            mine[rank] = value

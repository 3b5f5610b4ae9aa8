"""Keeps a row's stored cursor close behind its in-memory one, and walks a cursor across a pile of tombstones.

A take writes a check entry due at ``now + timeout`` (engine/take/flights.py), which the take that scans it deletes:
every take leaves a tombstone *ahead* of the cursor, where the cursor arrives only ``timeout`` later (and a FIFO take's
messages, in flight at their positions, are deleted there by their acks). A take commits the cursor, but once a row has
been drained nothing is due, no take runs, and the stored cursor stays behind every tombstone its last takes left ahead.
Peeks move this process's cursor across them in memory (engine/consume/row_peek.py, engine/delivery/idle_look.py), a few
seconds' worth each time; a process that starts cold (a restart, a consumer evicted from the LRU of ``casque serve``)
read them all again from the stored cursor in one request. A tiny queue drained of 100,000 over SQS failed every later
receive with READ_TOO_MANY_TOMBSTONES.

Two things here keep that from happening:

- ``store``: once a peek has moved a lane's cursor ``STEP_MS`` past where it is stored, and this process's takes
  left entries beyond the stored one (``ReadStart.pile_until``), the new cursor is written (one narrow
  write per row and step, only while such a pile is ahead: an idle row costs nothing). No lock is needed: a peek
  moves a cursor only up to the first live message it read at ``cassandra.consistency``, never past
  ``now - clock_tolerance``; a take's own commit, racing this write, sets a value that is safe too, and either may
  land last (a cursor set back only costs a re-read).
- ``walk``: a peek that fails on the node's tombstone threshold (a cold process behind a pile, or a pile left by
  a process that died) is repeated over due-time slices from the cursor, halving a slice that fails and doubling
  one that passed; each empty slice moves the cursor past it and stores it, so the walk's progress outlives the
  process. Each failed slice costs the node one scan up to its threshold: a pile is crossed once.
"""

from __future__ import annotations

from typing import Any

from cassandra import ReadFailure

from daemon.base.clock import Clock
from daemon.base.errors import StorageUnavailable
from daemon.base.logs import get_logger
from daemon.base.model import QueueSettings
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import MessageTable
from daemon.engine.take.row_state import RowState

log = get_logger("casque.cursor")

#: How far a lane's cursor moves in memory before it is stored (while a pile of ours is ahead of the stored one).
STEP_MS = 5_000
#: A walk's first slice: a pile denser than the node's threshold (100,000) per slice is split further.
FIRST_SLICE_MS = 60_000
#: At most this many slice reads per walk; a walk that did not reach its horizon goes on at the next peek.
WALK_READS = 24
#: A slice narrower than this that still fails is not split further: the walk gives up (and says so).
MIN_SLICE_MS = 1


def too_many_tombstones(exc: BaseException) -> bool:
    """Whether a failed read failed on the replicas' side (READ_TOO_MANY_TOMBSTONES is what a pile causes)."""
    return isinstance(exc, StorageUnavailable) and isinstance(exc.__cause__, ReadFailure)


class CursorKeeper:
    """Writes cursors a peek moved, and walks one across a pile. Durations are ms."""

    def __init__(self, db: Database, table: MessageTable, clock: Clock, tolerance_ms: int) -> None:
        self.db, self.table, self.clock, self.tolerance_ms = db, table, clock, tolerance_ms

    @staticmethod
    def lagging(state: RowState) -> dict[int, int]:
        """The lanes whose in-memory cursor is ``STEP_MS`` past the stored one while tombstones of this
        process's takes may lie ahead of the stored one."""
        start = state.start
        return {
            rank: value
            for rank, value in start.cursors.items()
            if start.stored.get(rank, 0) < start.pile_until and value - start.stored.get(rank, 0) >= STEP_MS
        }

    async def store(self, qs: QueueSettings, bucket: int, shard: int, state: RowState, lanes: dict[int, int]) -> None:
        """Write these lanes' cursors (no lock: see the module's docstring). A failure is logged and
        left: the stored cursor only stays where it was, and the next step tries again."""
        if not lanes:
            return
        try:
            if len(lanes) == 1:
                [(rank, value)] = lanes.items()
                await self.db.run(self.table.set_cursor, [rank, value, qs.name, bucket, shard])
            else:
                batch = self.db.batch()
                for rank, value in lanes.items():
                    batch.add(self.table.set_cursor.bind([rank, value, qs.name, bucket, shard]))
                await self.db.run(batch)
        except StorageUnavailable as exc:
            log.warning("cursor_store_failed", queue=qs.name, bucket=bucket, shard=shard, error=str(exc))
            return
        state.start.stored_at(lanes)

    async def walk(
        self, qs: QueueSettings, bucket: int, shard: int, state: RowState, rank: int, horizon: int
    ) -> tuple[list[Any], bool]:
        """The lane's first row in [cursor, horizon] read slice by slice, and whether the walk reached
        an answer (False: it stopped at its read budget, the cursor moved and stored as far as it got)."""
        lo = state.start.cursor(rank)
        span = max(min((horizon - lo) // 2, FIRST_SLICE_MS), MIN_SLICE_MS)
        failed = 0
        for _ in range(WALK_READS):
            end = min(horizon, lo + span)
            try:
                rows = await self.db.run(self.table.reads(qs).peek, [qs.name, bucket, shard, rank, lo, end])
            except StorageUnavailable as exc:
                if not too_many_tombstones(exc) or span <= MIN_SLICE_MS:
                    raise
                failed += 1
                span //= 2
                continue
            if rows or end >= horizon:
                self._log(qs, bucket, shard, rank, state, failed)
                return rows, True
            lo = end + 1
            await self._passed(qs, bucket, shard, state, rank, lo)
            span *= 2
        self._log(qs, bucket, shard, rank, state, failed)
        return [], False

    async def _passed(self, qs: QueueSettings, bucket: int, shard: int, state: RowState, rank: int, lo: int) -> None:
        """Nothing live before ``lo``: the lane's cursor moves there (never past now - tolerance) and is stored."""
        target = min(lo, self.clock.now_ms() - self.tolerance_ms)
        if state.start.move(rank, target):
            await self.store(qs, bucket, shard, state, {rank: target})

    @staticmethod
    def _log(qs: QueueSettings, bucket: int, shard: int, rank: int, state: RowState, failed: int) -> None:
        log.info(
            "cursor_walked",
            queue=qs.name,
            bucket=bucket,
            shard=shard,
            rank=rank,
            cursor=state.start.cursor(rank),
            slices_refused=failed,
        )

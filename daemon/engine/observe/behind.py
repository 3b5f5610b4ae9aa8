"""A standard queue's messages in flight behind the cursor, for the counts (engine/take/flights.py).

The counts read each lane from its cursor (engine/operations/stats.py, engine/observe/depth_estimate.py). A message in
flight stays where it was sent, which the cursor passed in the take batch; what says where it is is a check entry, which
lies at or ahead of the cursor, so the counts see it. Here the entries' ranges behind the cursor are merged into
stretches and each stretch is read once, filtered to messages in flight or in backoff (tombstones of acked messages are
crossed, once per count; a stretch is at most what the row took within one visibility timeout). Nothing is read for a
FIFO queue: its messages in flight lie at or ahead of the cursor, and it has no entries.
"""

from __future__ import annotations

from typing import Any

from daemon.engine.storage.db import Database
from daemon.engine.storage.paging import every_row
from daemon.engine.storage.table import MessageTable, is_entry


def stretches(rows: list[Any], cursor: int) -> list[tuple[int, int]]:
    """The merged ranges [lo, hi] behind ``cursor`` of the check entries among ``rows`` (a lane read from it)."""
    spans = sorted((r.moved_to, min(r.visible_at, cursor - 1)) for r in rows if is_entry(r) and r.moved_to < cursor)
    out: list[tuple[int, int]] = []
    for lo, hi in spans:
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


async def in_flight_behind(
    db: Database, table: MessageTable, lane: tuple[str, int, int, int], cursor: int, rows: list[Any]
) -> list[Any]:
    """The messages in flight or in backoff behind the lane's cursor that the entries among ``rows`` cover
    (rows of the same shape as ``count_from``'s: state, due, visible_at, moved_to, task)."""
    queue, bucket, shard, rank = lane
    out: list[Any] = []
    for lo, hi in stretches(rows, cursor):
        found = await every_row(db, table.count_flights, [queue, bucket, shard, rank, lo, hi])
        out += [r for r in found if r.task is not None]
    return out

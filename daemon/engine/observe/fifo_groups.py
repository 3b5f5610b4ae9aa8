"""A FIFO queue's message groups as an operator sees them: per group, in flight and waiting.

A FIFO queue keeps every message of a group in one shard row, at its position, until it is deleted
(engine/take/fifo.py): in flight in place, retried in place. So each row read from its lane cursor (which
passes only messages that are gone) holds every live message of its groups, and counting them needs
no other table. The read is bounded: at most ``limit`` messages per row, the rows read in parallel;
a row that filled its read may hold more, and its groups' counts are then lower bounds
(``at_least``). A row's first ``limit`` messages are its oldest, so the groups a truncated read
misses are ones whose every message is newer than those: the groups that wait longest are shown.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from daemon.base.model import QueueSettings
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import STATE_IN_FLIGHT, MessageTable
from daemon.engine.take.fifo import group_of

#: Messages read per shard row: a FIFO queue has 1 row (perQueue) or 16 (perMessageGroupId).
ROW_LIMIT = 1000
_END = 2**62  # past any position: the read is bounded by its limit, not by time


@dataclass
class GroupCount:
    group: str
    in_flight: int = 0  # delivered and not yet visible again (a retry's backoff included): the group waits for it
    waiting: int = 0  # not delivered, or visible again: deliverable in order
    at_least: bool = False  # its row's read hit the limit: there may be more


@dataclass
class FifoGroups:
    groups: list[GroupCount] = field(default_factory=list)  # most messages first, then by name
    truncated: bool = False  # some row's read hit the limit: some counts are lower bounds, some groups may be missing
    read: int = 0  # messages read


async def fifo_groups(
    db: Database, table: MessageTable, qs: QueueSettings, now_ms: int, limit: int = ROW_LIMIT
) -> FifoGroups:
    """The groups of FIFO queue ``qs`` and their counts at ``now_ms``, at most ``limit`` messages read per row."""
    rows = await asyncio.gather(*(_row(db, table, qs.name, shard, limit) for shard in range(qs.shards)))
    out = FifoGroups()
    counts: dict[str, GroupCount] = {}
    for messages in rows:
        full = len(messages) >= limit
        out.truncated |= full
        out.read += len(messages)
        for r in messages:
            if r.task is None:  # a send's reservation (engine/send/fifo_send.py), not a message
                continue
            g = counts.setdefault(group_of(r), GroupCount(group_of(r)))
            visible = r.visible_at if r.visible_at is not None else r.due
            if r.state == STATE_IN_FLIGHT and visible > now_ms:
                g.in_flight += 1
            else:
                g.waiting += 1
            g.at_least |= full
    out.groups = sorted(counts.values(), key=lambda g: (-(g.in_flight + g.waiting), g.group))
    return out


async def _row(db: Database, table: MessageTable, queue: str, shard: int, limit: int) -> list[Any]:
    """One row's live messages in position order, from its cursor (FIFO: one bucket, one lane)."""
    cursors = await db.run(table.read_cursors, [queue, 0, shard])
    start = int(((cursors[0].cursors or {}) if cursors else {}).get(0, 0))
    return list(await db.run(table.read_due, [queue, 0, shard, 0, start, _END, limit]))


__all__ = ["FifoGroups", "GroupCount", "ROW_LIMIT", "fifo_groups"]

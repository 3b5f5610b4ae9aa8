"""Resharding a live queue: more or fewer shards, other buckets, without moving a message.

A message's row is a function of its id and the queue's layout (engine/storage/placement.py), so a layout can't
just change: messages already written would be looked for in the wrong row. Instead a reshard
makes the new layout current and keeps the old one in the queue row's ``draining`` list:

* new sends use the new layout (every client re-reads the settings within 5 s; a send that used
  the cached old layout lands in an old row, which is still read);
* consumers visit the rows of every layout (``QueueSettings.span``), lookups by id try each
  layout's row, and stats, peek and purge cover all of them (``table.all_rows``);
* a retry or timeout column stays in its message's row, as always, so old rows empty as their
  messages finish. ``finish`` checks that no live message is left outside its current-layout
  row, then drops the old layouts (an LWT on the queue row, so a concurrent reshard wins or waits).

A schedule's occurrences live in their origin's row (so each take writes the next one in the same
batch): a schedule created before the reshard keeps its old row, and ``finish`` reports it until it
ends or is re-sent.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from daemon.base.errors import UsageError
from daemon.base.model import QueueSettings
from daemon.engine.queues.settings import check_settings
from daemon.engine.storage.paging import every_row
from daemon.engine.storage.placement import row_of
from daemon.engine.storage.table import all_rows, is_entry
from daemon.engine.stores import Stores

#: How long after a layout change its old rows may be dropped: every client's cached settings (at most
#: ``COVERED_TRUST_MS``, 60 s, old, engine/queues/store.py) and a long poll's (20 s more) have expired before this
#: (casque serve: sqs.grow_settle).
SETTLE_MS = 120_000


async def reshard(
    stores: Stores, queue: str, shards: int | None = None, buckets: int | None = None, bucket_seconds: int | None = None
) -> QueueSettings:
    """Make a new layout current; the old one drains. Returns the new settings."""
    qs = await stores.queues.get(queue, fresh=True)
    new = replace(
        qs,
        shards=shards or qs.shards,
        buckets=buckets or qs.buckets,
        bucket_seconds=bucket_seconds or qs.bucket_seconds,
    )
    check_settings(new)
    layout = (new.shards, new.buckets, new.bucket_seconds)
    if layout == qs.layouts()[0]:
        raise UsageError(
            f"queue {queue} already has {new.shards} shards x {new.buckets} buckets of {new.bucket_seconds}s: nothing "
            f"to change"
        )
    draining = [old for old in qs.layouts() if old != layout]
    ks = stores.settings.cassandra.keyspace
    rows = await stores.db.run(
        stores.db.prepare(
            f"UPDATE {ks}.queues SET shards = ?, buckets = ?, bucket_seconds = ?, draining = ?, updated_at = ? "
            "WHERE name = ? IF shards = ? AND buckets = ? AND bucket_seconds = ?"
        ),
        [*layout, json.dumps(draining), stores.clock.now_ms(), queue, qs.shards, qs.buckets, qs.bucket_seconds],
    )
    if not (rows and rows[0].applied):
        raise UsageError(
            f"queue {queue} was resharded by someone else meanwhile: look at 'casque queues' and try again"
        )
    await stores.queues.changed(queue)
    return await stores.queues.get(queue, fresh=True)


async def misplaced(stores: Stores, qs: QueueSettings) -> int:
    """Live messages (waiting, scheduled or in flight) not in their current-layout row. On a standard queue a
    message in flight lies behind the cursor, in the range of a check entry at or after it: read through the entry
    (engine/take/flights.py)."""
    left: set[tuple[int, int, Any]] = set()
    for bucket, shard in all_rows(qs):
        static = await stores.db.run(stores.table.read_cursors, [qs.name, bucket, shard])
        cursors = dict(static[0].cursors or {}) if static else {}
        for rank in qs.ranks():
            bounds = [qs.name, bucket, shard, rank, cursors.get(rank, 0), 1 << 30]
            for r in await every_row(stores.db, stores.table.read_rank, bounds):
                found = [r]
                if is_entry(r):
                    span = [qs.name, bucket, shard, rank, r.moved_to, r.visible_at, 1 << 30]
                    found = [m for m in await every_row(stores.db, stores.table.read_range, span) if m.state]
                for m in found:
                    if m.task is not None and row_of(m.id, qs.bucket_ms, qs.buckets, qs.shards) != (bucket, shard):
                        left.add((bucket, shard, m.id))
    return len(left)


async def finish(stores: Stores, queue: str, settle_ms: int = SETTLE_MS) -> int:
    """Drop the draining layouts once no message is left in them. Returns how many are left
    (0: done). Refused within ``settle_ms`` of the reshard, while old cached settings may write."""
    qs = await stores.queues.get(queue, fresh=True)
    if not qs.draining:
        return 0
    ks = stores.settings.cassandra.keyspace
    [row] = await stores.db.run(stores.db.prepare(f"SELECT updated_at FROM {ks}.queues WHERE name = ?"), [queue])
    waited = stores.clock.now_ms() - (row.updated_at or 0)
    if waited < settle_ms:
        raise UsageError(
            f"queue {queue} was changed {waited / 1000:.0f}s ago: wait {(settle_ms - waited) / 1000:.0f}s more "
            "(senders may still use the old layout from their cache), then run --finish again"
        )
    left = await misplaced(stores, qs)
    if left:
        return left
    drop = stores.db.prepare(f"UPDATE {ks}.queues SET draining = null WHERE name = ? IF updated_at = ?")
    rows = await stores.db.run(drop, [queue, row.updated_at])
    if not (rows and rows[0].applied):
        raise UsageError(f"queue {queue} was changed meanwhile: run --finish again")
    await stores.queues.changed(queue)
    await stores.queues.get(queue, fresh=True)
    return 0

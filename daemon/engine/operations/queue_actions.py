"""Operator actions on whole queues: purge, delete, and replaying the poison queue.

Purge deletes each live message it reads, one cell at a time, timestamped after the row it deletes.
It never writes a partition or range tombstone: such a tombstone would also swallow any message
written afterwards by a producer whose clock lags, which a purge must not do.

Delete is the opposite: the queue is going away, so each of its partitions gets one partition
tombstone (shard rows, key shards, poison queue, settings), whatever the number of messages, and
nothing is read first. A queue with 1 shard x 1 bucket is dropped with 21 tombstones; one with a
million messages in 16 x 24 rows with 404 (each + 1 for a queue that had a dead-letter queue). (Then a send
from a client that still had the settings cached for up to 5 s lands in rows nobody reads; its TTL removes it.)
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from daemon.base.errors import KeyConflict
from daemon.base.model import QueueSettings
from daemon.engine.delivery.poison import PoisonRecord
from daemon.engine.send.producer import Job
from daemon.engine.storage.placement import KEY_SHARDS
from daemon.engine.storage.table import STATE_WAITING, after, all_rows, is_entry, message_from_row
from daemon.engine.stores import Stores


async def purge(stores: Stores, queue: str, parallel: int = 16, sent_before_ms: int | None = None) -> int:
    """Delete every message of a queue (waiting, scheduled and in flight) and its keys. Returns the count.

    ``sent_before_ms``: delete only messages sent before then (by their ``enqueued_at``, the
    sender's clock): a message sent while the purge reads the rows survives it, whether its row
    was read before or after it arrived (the SQS endpoint passes the PurgeQueue's start). On a
    FIFO queue the deduplication ids claimed before then are released, as SQS's PurgeQueue does
    (engine/send/fifo_send.py, the purge mark)."""
    qs = await stores.queues.get(queue, fresh=True)
    if qs.fifo:  # first: a deduplication id sent before the purge may be sent again once it returns
        cut_us = sent_before_ms * 1000 if sent_before_ms is not None else stores.db.next_timestamp()
        await stores.fifo.mark_purged(queue, cut_us)
    sem = asyncio.Semaphore(parallel)

    async def one(bucket: int, shard: int) -> int:
        async with sem:
            return await _purge_row(stores, qs, bucket, shard, sent_before_ms)

    counts = await asyncio.gather(*(one(b, s) for b, s in all_rows(qs)))
    await stores.keys.purge(queue)
    return sum(counts)


async def _purge_row(
    stores: Stores, qs: QueueSettings, bucket: int, shard: int, sent_before_ms: int | None = None
) -> int:
    static = await stores.db.run(stores.table.read_cursors, [qs.name, bucket, shard])
    cursors = dict(static[0].cursors or {}) if static else {}
    deleted = 0
    for rank in qs.ranks():
        read = stores.table.read_rank.bind([qs.name, bucket, shard, rank, cursors.get(rank, 0), 1 << 30])
        rows = await _with_flights(stores, qs, bucket, shard, rank, await stores.db.run_all(read))
        if sent_before_ms is not None:
            rows = [r for r in rows if (r.enqueued_at or 0) < sent_before_ms]
        for chunk in range(0, len(rows), 100):
            batch = stores.db.batch()
            messages = [message_from_row(qs.name, bucket, shard, r) for r in rows[chunk : chunk + 100]]
            for m in messages:
                batch.add(stores.table.delete_message(m, m.due_ms))
            stamp = after(*(m.write_ts for m in messages), now_us=stores.db.next_timestamp())
            await stores.db.run(batch, timestamp=stamp)
            deleted += len(messages)
    return deleted


async def _with_flights(stores: Stores, qs: QueueSettings, bucket: int, shard: int, rank: int, read: list[Any]) -> Any:
    """The messages of a lane read from its cursor, and those in flight or in backoff behind it, found through the
    check entries read (engine/take/flights.py): a purge removes messages in flight too, as SQS's PurgeQueue does.
    The entries stay: one whose messages are gone is passed by the next take that reads it."""
    found = {(r.due, r.id): r for r in read if r.task is not None}
    for e in (r for r in read if is_entry(r)):
        span = stores.table.read_range.bind([qs.name, bucket, shard, rank, e.moved_to, e.visible_at, 1 << 30])
        for r in await stores.db.run_all(span):
            if r.task is not None and r.state != STATE_WAITING:
                found.setdefault((r.due, r.id), r)
    return list(found.values())


async def delete_queue(stores: Stores, queue: str, parallel: int = 16) -> int:
    """Remove the queue's settings row (new sends and receives fail from now on, or within the 5 s
    settings cache elsewhere), then drop each of its partitions whole. Returns the number of
    partition tombstones written (no tombstone per message: docs/design.md, "Many queues"). A FIFO
    queue's deduplication ids are released as a purge releases them (its mark): a queue created
    again under the name starts with none, as a new SQS queue does."""
    qs = await stores.queues.get(queue, fresh=True, any_layout=True)
    linked = await stores.attributes.forget_source(queue)
    await stores.queues.delete(queue)
    if qs.fifo:
        await stores.fifo.mark_purged(queue, stores.db.next_timestamp())
    sem = asyncio.Semaphore(parallel)

    async def drop(bucket: int, shard: int) -> None:
        async with sem:
            await stores.db.run(stores.table.purge_row, [queue, bucket, shard])

    rows = list(all_rows(qs))
    await asyncio.gather(*(drop(b, s) for b, s in rows))
    await stores.keys.purge(queue)
    await stores.poison.purge(queue)
    return (
        len(rows) + KEY_SHARDS + 4 + linked
    )  # + poison partition, queues row, queue_expiry row, queue_names row (+ dead-letter link)


async def replay(
    stores: Stores, queue: str, ids: list[uuid.UUID] | None = None, task: str | None = None
) -> tuple[list[str], list[str]]:
    """Send poisoned messages again as new messages (attempt 0), then drop them from the poison
    queue. Select by ids, by task, or (neither) all. Returns (new ids, reasons for those left).

    Replay never cancels anything. A keyed message is re-sent with its key only if the key is
    free; if newer work holds the key, the poisoned one stays in the poison queue (its key says
    there may be only one, and the newer one wins). An occurrence of a schedule is re-sent once,
    as a plain message without key or trigger: the schedule itself, live or cancelled, is left as
    it is, and this one run does not chain further occurrences.

    The poison queue is read page by page (any size; one page held at a time); a message poisoned
    again while the replay runs waits for the next replay instead of looping this one."""
    new_ids: list[str] = []
    left: list[str] = []
    async for r in _poisoned(stores, queue, ids, task, stores.clock.now_ms() + stores.tolerance_ms):
        try:
            job = _job(r)
        except ValueError as exc:
            left.append(f"{r.id}: its stored payload is not JSON ({exc}); it stays in the poison queue")
            continue
        try:
            new_ids.append(await stores.producer.send(queue, job))
        except KeyConflict:
            holder = await stores.keys.get(queue, r.key or "")
            left.append(
                f"{r.id}: its key '{r.key}' now names newer message {holder.id if holder else '?'}; it stays in the "
                f"poison "
                f"queue (cancel that one first to replay this one)"
            )
            continue
        await stores.poison.remove(queue, r.id)
    return new_ids, left


async def _poisoned(
    stores: Stores, queue: str, ids: list[uuid.UUID] | None, task: str | None, before_ms: int
) -> AsyncIterator[PoisonRecord]:
    if ids is not None:
        for mid in ids:
            r = await stores.poison.get(queue, mid)
            if r is not None and (task is None or r.task == task):
                yield r
        return
    async for chunk in stores.poison.pages(queue):
        for r in chunk:
            if (task is None or r.task == task) and r.poisoned_at <= before_ms:
                yield r


def _job(r: PoisonRecord) -> Job:
    payload: Any = json.loads(r.payload) if r.payload is not None else None
    key = None if r.trigger else r.key  # a schedule's key belongs to the live schedule
    return Job(task=r.task, payload=payload, priority=r.priority, headers=r.headers, key=key, on_conflict="error")

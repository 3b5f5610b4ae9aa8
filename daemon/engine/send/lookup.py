"""Find, peek at and cancel messages by id or lookup key, without consuming them.

An id names its row (see placement), so these reads touch one partition. A message can move within
its row while we look (a consumer takes it and writes its timeout column), so cancel reads, deletes
and reads again until the message is gone.
"""

from __future__ import annotations

import asyncio
import heapq
import uuid

from daemon.base.errors import MessageNotFound
from daemon.base.model import Message, QueueSettings
from daemon.engine.queues.store import QueueStore
from daemon.engine.schedules.triggers import Trigger, occurrence_id
from daemon.engine.send.keys import KeyEntry, KeyStore
from daemon.engine.storage.db import Database
from daemon.engine.storage.placement import row_of
from daemon.engine.storage.table import MessageTable, after, all_rows, message_from_row

CANCEL_TRIES = 5


class Lookup:
    def __init__(self, db: Database, queues: QueueStore, table: MessageTable, keys: KeyStore) -> None:
        self.db = db
        self.queues = queues
        self.table = table
        self.keys = keys

    async def by_id(self, queue: str, message_id: uuid.UUID) -> Message | None:
        qs = await self.queues.get(queue)
        return await self.find(qs, message_id)

    async def find(self, qs: QueueSettings, message_id: uuid.UUID) -> Message | None:
        """Read a message in its row: the current layout's, else (after a reshard) a draining one's."""
        tried: set[tuple[int, int]] = set()
        for shards, buckets, bucket_s in qs.layouts():
            bucket, shard = row_of(message_id, bucket_s * 1000, buckets, shards)
            if (bucket, shard) in tried:
                continue
            tried.add((bucket, shard))
            rows = await self.db.run(self.table.read_id, [qs.name, bucket, shard, message_id])
            rows = [r for r in rows if r.task is not None]  # no task: a ghost, a deleted message (take/flights.py)
            if rows:
                return message_from_row(qs.name, bucket, shard, rows[0])
        return None

    async def by_key(self, queue: str, key: str) -> tuple[KeyEntry, Message | None]:
        """The message a key names. For a schedule whose daemon died between writing the next
        occurrence and moving the key, follow the deterministic chain of occurrence ids."""
        entry = await self.keys.get(queue, key)
        if entry is None:
            raise MessageNotFound(
                f"no message with key '{key}' in queue '{queue}': list keys with 'casque schedules {queue}'"
            )
        return entry, await self.current(queue, entry)

    async def current(self, queue: str, entry: KeyEntry) -> Message | None:
        """The message a key entry names (already read, e.g. by a listing), following a schedule's chain."""
        m = await self.by_id(queue, entry.id)
        if m is None and entry.trigger and entry.trigger.get("origin"):
            t = Trigger.from_json(entry.trigger)
            for n in range(t.n + 1, t.n + 4):
                m = await self.by_id(queue, occurrence_id(t, n))
                if m is not None:
                    break
        return m

    async def cancel_id(self, queue: str, message_id: uuid.UUID) -> Message:
        """Delete a message wherever it is in its row; release its key. Raises MessageNotFound."""
        qs = await self.queues.get(queue)
        found: Message | None = None
        for _ in range(CANCEL_TRIES):
            m = await self.find(qs, message_id)
            if m is None:
                break
            found = m
            # After the row it deletes, whatever the clocks: a delete timestamped before the insert
            # (a producer whose clock runs ahead of ours) would lose to it silently.
            await self.db.run(
                self.table.delete_message(m, m.due_ms), timestamp=after(m.write_ts, now_us=self.db.next_timestamp())
            )
        else:
            raise MessageNotFound(
                f"message {message_id} in queue '{queue}' kept moving while being cancelled: try again"
            )
        if found is None:
            raise MessageNotFound(
                f"no message {message_id} in queue '{queue}': it may have finished, or the id is wrong"
            )
        if found.key:
            await self.keys.release(queue, found.key, message_id)
        return found

    async def cancel_key(self, queue: str, key: str) -> Message | None:
        """Cancel by key: free the key first (so no new occurrence is chained), then the message."""
        entry = await self.keys.get(queue, key)
        if entry is None:
            raise MessageNotFound(
                f"no message with key '{key}' in queue '{queue}': list keys with 'casque schedules {queue}'"
            )
        await self.keys.release(queue, key, entry.id)
        cancelled: Message | None = None
        ids = [entry.id]
        if entry.trigger and entry.trigger.get("origin"):  # a successor a consumer may be writing now
            t = Trigger.from_json(entry.trigger)
            ids += [occurrence_id(t, n) for n in range(t.n + 1, t.n + 3)]
        for mid in ids:
            try:
                found = await self.cancel_id(queue, mid)
                cancelled = cancelled or found
            except MessageNotFound:
                continue
        return cancelled

    async def peek(
        self, queue: str, limit: int = 10, due_only: bool = False, now_ms: int | None = None
    ) -> list[Message]:
        """The next ``limit`` messages in delivery order (priority, then due time), across every row.
        Bounded by buckets x shards reads of at most ``limit`` rows each; nothing is consumed."""
        qs = await self.queues.get(queue, fresh=True)
        sem = asyncio.Semaphore(32)

        async def one(bucket: int, shard: int, rank: int) -> list[Message]:
            async with sem:
                rows = await self.db.run(self.table.read_rank, [qs.name, bucket, shard, rank, 0, limit])
            return [message_from_row(qs.name, bucket, shard, r) for r in rows if r.task is not None]  # not entries

        jobs = [one(b, s, r) for b, s in all_rows(qs) for r in qs.ranks()]
        found = [m for chunk in await asyncio.gather(*jobs) for m in chunk]
        if due_only and now_ms is not None:
            found = [m for m in found if m.due_ms <= now_ms]
        return heapq.nsmallest(limit, found, key=lambda m: (m.rank, m.due_ms, m.id))

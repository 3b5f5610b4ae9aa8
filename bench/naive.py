"""The anti-pattern, written only for comparison: a single-partition delete-on-ack queue.

One partition per queue, messages clustered by a time UUID, consumers read the head with
``LIMIT n`` and delete what they processed. Every delete leaves a tombstone at the head of the
partition, and every later read of the head walks over all of them (until gc_grace_seconds, ten
days by default, and a compaction). This is the design the Cassandra-queue post-mortems describe;
casque exists to avoid it. It is not used anywhere but the bench.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from cassandra.query import BatchStatement, BatchType
from cassandra.util import uuid_from_time

from daemon.engine.storage.db import Database, wrap_future

TABLE = "naive_queue"


class NaiveQueue:
    def __init__(self, db: Database, keyspace: str, name: str) -> None:
        self.db = db
        self.name = name
        t = f"{keyspace}.{TABLE}"
        assert db.session is not None
        db.session.execute(
            f"CREATE TABLE IF NOT EXISTS {t} (q text, id timeuuid, payload blob, PRIMARY KEY ((q), id)) "
            "WITH comment = 'casque bench: the naive delete-on-ack queue (anti-pattern baseline)'"
        )
        self.insert = db.session.prepare(f"INSERT INTO {t} (q, id, payload) VALUES (?, ?, ?)")
        self.head = db.session.prepare(f"SELECT id, payload FROM {t} WHERE q = ? LIMIT ?")
        self.delete = db.session.prepare(f"DELETE FROM {t} WHERE q = ? AND id = ?")
        self.probe = db.session.prepare(f"SELECT id FROM {t} WHERE q = ? LIMIT 1")

    async def _run(self, stmt: Any, params: Any = None) -> Any:
        assert self.db.session is not None
        return await wrap_future(self.db.session.execute_async(stmt, params, timeout=60))

    async def send(self, n: int) -> None:
        for start in range(0, n, 100):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for _ in range(min(100, n - start)):
                batch.add(self.insert, (self.name, uuid_from_time(time.time()), b'{"noop":1}'))
            await self._run(batch)

    async def consume(self, n: int, limit: int = 100, deadline: float | None = None) -> int:
        """Take and delete ``n`` messages from the head; returns how many (fewer if the deadline
        passed). Raises the node's error when a read is aborted for tombstones."""
        done = 0
        while done < n:
            if deadline is not None and time.monotonic() > deadline:
                break
            rows = await self._run(self.head, (self.name, min(limit, n - done)))
            if not rows:
                await asyncio.sleep(0.01)
                continue
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for r in rows:  # the no-op handler, then the ack: delete
                batch.add(self.delete, (self.name, r.id))
            await self._run(batch)
            done += len(rows)
        return done


def new_name() -> str:
    return f"naive_{uuid.uuid4().hex[:10]}"

"""SQS's ReceiveRequestAttemptId on FIFO queues: a retried receive gets the same messages back.

A client whose ReceiveMessage call failed on the network can't know whether messages were taken
for it; if it retries with the same attempt id within 5 minutes, SQS returns the same messages and
receipt handles (while they are still in flight) instead of leaving them hidden for a visibility
timeout. The receipts a receive returned are stored under (queue, attempt id) with a 300 s TTL,
in Cassandra, so the retry may reach any `casque serve`.
"""

from __future__ import annotations

from daemon.engine.storage.db import Database

WINDOW_S = 300


class ReceiveAttempts:
    def __init__(self, db: Database, keyspace: str) -> None:
        self.db = db
        t = f"{keyspace}.receive_attempts"
        self._get = db.prepare(f"SELECT receipts FROM {t} WHERE queue = ? AND attempt_id = ?")
        self._put = db.prepare(f"INSERT INTO {t} (queue, attempt_id, receipts) VALUES (?, ?, ?) USING TTL {WINDOW_S}")

    async def get(self, queue: str, attempt_id: str) -> list[str] | None:
        rows = await self.db.run(self._get, [queue, attempt_id])
        return list(rows[0].receipts or []) if rows else None

    async def put(self, queue: str, attempt_id: str, receipts: list[str]) -> None:
        await self.db.run(self._put, [queue, attempt_id, receipts])

"""Which processes pull from a queue lately: the ``pull_readers`` table.

A daemon (``casque run``) and pull clients (``casque serve``'s SQS receivers, ``cq.receive``) may
serve one queue. The daemon must then leave the pull clients their share: it holds none of the
queue's rows (service/ownership.py) and takes only the tasks it has handlers for (engine/consume/consumer.py
``accepts``), leaving the rest for the pull clients instead of poisoning them as unknown tasks.
It learns that pull clients read the queue from this table.

Every receive marks its queue as read by this process; the mark is written when this process has
not written it for ``MARK_EVERY_MS`` (15 s), with a TTL of ``READER_TTL_S`` (60 s). So a queue "has
pull readers" while some process received from it within the last 45-60 s, and a daemon reads the
queue's one partition every few seconds to know. The write is not awaited by the receive: a lost
mark only lets the daemon treat the queue as its own a little earlier (today's behaviour, which
the TTL restores anyway once readers stop).
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

from daemon.base.clock import Clock
from daemon.engine.cluster.marks import ThrottledMarks
from daemon.engine.storage.db import Database

#: How long after its last receive a process still counts as a pull reader of a queue.
READER_TTL_S = 60
#: A process rewrites its mark of a queue at most this often (well inside the TTL).
MARK_EVERY_MS = 15_000


class PullReaders:
    """Statements are prepared on first use, not at connect: a client of a keyspace whose schema
    predates this table still connects, sends and receives (its marks fail and are logged)."""

    def __init__(self, db: Database, keyspace: str, clock: Clock, limit: int = 10_000) -> None:
        self.db = db
        self.table = f"{keyspace}.pull_readers"
        self.clock = clock
        self.me = f"{socket.gethostname()}:{os.getpid()}"
        self._statements: dict[str, Any] = {}
        self.marks = ThrottledMarks(self._write, "pull_reader", limit)

    async def _prepared(self, cql: str) -> Any:
        stmt = self._statements.get(cql)
        if stmt is None:
            stmt = self._statements[cql] = await asyncio.to_thread(self.db.prepare, cql.format(t=self.table))
        return stmt

    @property
    def writes(self) -> int:
        return self.marks.writes

    def mark(self, queue: str) -> None:
        """This process received from ``queue`` now: write its mark if it has not done so lately."""
        self.marks.mark(queue, self.clock.now_ms(), MARK_EVERY_MS)

    async def _write(self, queue: str, now: int) -> None:
        stmt = await self._prepared("INSERT INTO {t} (queue, reader, seen) VALUES (?, ?, ?) USING TTL ?")
        await self.db.run(stmt, [queue, self.me, now, READER_TTL_S])

    async def readers(self, queue: str) -> list[str]:
        """The processes that received from ``queue`` within the TTL (one single-partition read)."""
        rows = await self.db.run(await self._prepared("SELECT reader FROM {t} WHERE queue = ?"), [queue])
        return [r.reader for r in rows]

    async def flush(self) -> None:
        """Wait for the marks being written (tests, shutdown)."""
        await self.marks.flush()

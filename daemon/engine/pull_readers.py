"""Which processes pull from a queue lately: the ``pull_readers`` table.

A daemon (``casque run``) and pull clients (``casque serve``'s SQS receivers, ``cq.receive``) may
serve one queue. The daemon must then leave the pull clients their share: it holds none of the
queue's rows (service/ownership.py) and takes only the tasks it has handlers for (engine/consumer.py
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
from daemon.base.logs import get_logger
from daemon.base.lru import Lru
from daemon.engine.db import Database

log = get_logger("casque.pull_readers")
#: How long after its last receive a process still counts as a pull reader of a queue.
READER_TTL_S = 60
#: A process rewrites its mark of a queue at most this often (well inside the TTL).
MARK_EVERY_MS = 15_000
MAX_PENDING = 256  # mark writes in flight at once; beyond that a receive skips its mark (the next one writes)


class PullReaders:
    """Statements are prepared on first use, not at connect: a client of a keyspace whose schema
    predates this table still connects, sends and receives (its marks fail and are logged)."""

    def __init__(self, db: Database, keyspace: str, clock: Clock, limit: int = 10_000) -> None:
        self.db = db
        self.table = f"{keyspace}.pull_readers"
        self.clock = clock
        self.me = f"{socket.gethostname()}:{os.getpid()}"
        self._written: Lru[str, int] = Lru(limit)  # queue -> when this process last wrote its mark
        self._pending: set[asyncio.Task[None]] = set()
        self._statements: dict[str, Any] = {}
        self.writes = 0

    async def _prepared(self, cql: str) -> Any:
        stmt = self._statements.get(cql)
        if stmt is None:
            stmt = self._statements[cql] = await asyncio.to_thread(self.db.prepare, cql.format(t=self.table))
        return stmt

    def mark(self, queue: str) -> None:
        """This process received from ``queue`` now: write its mark if it has not done so lately."""
        now = self.clock.now_ms()
        last = self._written.get(queue)
        if (last is not None and now - last < MARK_EVERY_MS) or len(self._pending) >= MAX_PENDING:
            return
        self._written.put(queue, now)
        task = asyncio.ensure_future(self._write(queue, now))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _write(self, queue: str, now: int) -> None:
        try:
            stmt = await self._prepared("INSERT INTO {t} (queue, reader, seen) VALUES (?, ?, ?) USING TTL ?")
            await self.db.run(stmt, [queue, self.me, now, READER_TTL_S])
            self.writes += 1
        except Exception as exc:  # the next receive after the interval tries again
            self._written.pop(queue)
            log.warning("pull_reader_mark_failed", queue=queue, error=str(exc))

    async def readers(self, queue: str) -> list[str]:
        """The processes that received from ``queue`` within the TTL (one single-partition read)."""
        rows = await self.db.run(await self._prepared("SELECT reader FROM {t} WHERE queue = ?"), [queue])
        return [r.reader for r in rows]

    async def flush(self) -> None:
        """Wait for the marks being written (tests, shutdown)."""
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

"""Message history, for queues created with ``history`` on (Astyanax's keepHistory, done): one row
per state change (running, done, failed, poisoned, timed_out) with attempt, duration, lateness and
error, TTL'd with the queue's retention. ``casque history QUEUE --key K`` reads it; so does the
Spark pipeline. Writes are fire-and-forget with a bound on how many are pending, so history can
never slow the dispatcher down or hold memory: when the bound is hit, rows are dropped and counted.

Partitions are (queue, subject, UTC day): the subject is the message (``id:<id>``) and, for a keyed
message, also its key (``key:<key>``, a second row). So a partition is one message's or one key's
day, bounded by how often that key runs and never by the queue's rate, and ``--key K`` or ``--id``
reads exactly one partition per day asked, page by page.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from daemon.base.errors import UsageError
from daemon.base.logs import get_logger
from daemon.base.model import Message, QueueSettings
from daemon.engine.queues.store import QueueStore
from daemon.engine.storage.db import Database
from daemon.engine.storage.paging import every_row

log = get_logger("casque.history")
EVENTS = {"started": "running", "acked": "done", "retried": "failed", "poisoned": "poisoned", "timed_out": "timed_out"}
MAX_PENDING = 1000
_ORDER = {"running": 0, "failed": 1, "timed_out": 1, "done": 2, "poisoned": 2}  # within one millisecond


def day_of(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d")


@dataclass
class HistoryRow:
    queue: str
    at: int
    id: uuid.UUID
    event: str
    task: str
    attempt: int
    duration_ms: float | None
    lateness_ms: float | None
    error: str | None
    key: str | None


class History:
    def __init__(self, db: Database, keyspace: str, queues: QueueStore) -> None:
        self.db = db
        self.queues = queues
        t = f"{keyspace}.message_history"
        self._insert = db.prepare(
            f"INSERT INTO {t} (queue, subject, day, at, id, event, task, attempt, "
            "duration_ms, lateness_ms, error, key) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?) USING TTL ?"
        )
        self._day = db.prepare(
            f"SELECT at, id, event, task, attempt, duration_ms, lateness_ms, error, key FROM {t} "
            "WHERE queue = ? AND subject = ? AND day = ?"
        )
        self._pending: set[asyncio.Task[Any]] = set()
        self.dropped = 0

    def record(self, event: str, m: Message, duration: float, now_ms: int, qs: QueueSettings) -> None:
        """Queue one history write (no await: the dispatcher never waits for history)."""
        name = EVENTS.get(event)
        if name is None or not qs.history:
            return
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            return
        lateness = (now_ms - (m.scheduled_ms or m.due_ms)) if event == "started" else None
        row = [
            day_of(now_ms),
            now_ms,
            m.id,
            name,
            m.task,
            m.attempt,
            duration * 1000 if duration else None,
            lateness,
            (m.last_error or None) if name in ("failed", "poisoned") else None,
            m.key,
            qs.retention_s,
        ]
        for subject in subjects(m.id, m.key):
            task = asyncio.ensure_future(self.db.run(self._insert, [m.queue, subject, *row]))
            self._pending.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.dropped += 1

    async def flush(self) -> None:
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def read(
        self, queue: str, now_ms: int, days: int = 7, key: str | None = None, message_id: uuid.UUID | None = None
    ) -> list[HistoryRow]:
        """The last ``days`` UTC days of one key's or one message's history, oldest first: one
        partition per day, each read page by page."""
        if (key is None) == (message_id is None):
            raise UsageError("history is read by key or by message id: give exactly one")
        subject = f"key:{key}" if key is not None else f"id:{message_id}"
        today = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
        out: list[HistoryRow] = []
        for back in range(days - 1, -1, -1):
            day = (today - timedelta(days=back)).strftime("%Y-%m-%d")
            for r in await every_row(self.db, self._day, [queue, subject, day]):
                out.append(
                    HistoryRow(
                        queue, r.at, r.id, r.event, r.task, r.attempt, r.duration_ms, r.lateness_ms, r.error, r.key
                    )
                )
        return sorted(out, key=lambda h: (h.at, h.id, _ORDER.get(h.event, 9)))


def subjects(message_id: uuid.UUID, key: str | None) -> list[str]:
    """The partitions a message's history row goes to: its id's, and its key's when it has one."""
    return [f"id:{message_id}"] + ([f"key:{key}"] if key else [])

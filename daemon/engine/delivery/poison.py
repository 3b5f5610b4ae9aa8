"""The poison queue: messages that failed for good, kept with the reason, for people to inspect,
replay or purge. A message reaches it after its last attempt, when its task name is unknown, when
its stored columns can't be decoded, or when a handler raises ``Poison``."""

from __future__ import annotations

import builtins
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from daemon.base.model import Message
from daemon.engine.storage.db import Database
from daemon.engine.storage.paging import PAGE_SIZE, pages
from daemon.engine.storage.table import MAX_TTL

_COLS = (
    "queue, id, poisoned_at, task, payload, headers, attempt, priority, key, trigger, error_type, error, "
    "traceback, reason"
)


@dataclass
class PoisonRecord:
    queue: str
    id: uuid.UUID
    poisoned_at: int
    task: str
    payload: bytes | None
    headers: dict[str, str]
    attempt: int
    priority: int
    key: str | None
    trigger: dict[str, Any] | None
    error_type: str
    error: str
    traceback: str
    reason: str


class PoisonStore:
    def __init__(self, db: Database, keyspace: str) -> None:
        self.db = db
        t = f"{keyspace}.poison"
        p = db.prepare
        self._add = p(f"INSERT INTO {t} ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) USING TTL ?")
        self._list = p(f"SELECT {_COLS} FROM {t} WHERE queue = ?")
        self._list_after = p(f"SELECT {_COLS} FROM {t} WHERE queue = ? AND id > ?")
        self._get = p(f"SELECT {_COLS} FROM {t} WHERE queue = ? AND id = ?")
        self._remove = p(f"DELETE FROM {t} WHERE queue = ? AND id = ?")
        self._purge = p(f"DELETE FROM {t} WHERE queue = ?")
        self._count = p(f"SELECT COUNT(*) FROM {t} WHERE queue = ?")

    def add_statement(
        self, m: Message, reason: str, error_type: str, error: str, tb: str, now_ms: int, retention_s: int
    ) -> Any:
        return self._add.bind(
            [
                m.queue,
                m.id,
                now_ms,
                m.task,
                m.raw_payload,
                m.headers or None,
                m.attempt,
                m.priority,
                m.key,
                json.dumps(m.trigger) if m.trigger else None,
                error_type,
                error[:2000],
                tb[-8000:],
                reason,
                min(MAX_TTL, retention_s),
            ]
        )

    async def add(
        self, m: Message, reason: str, error_type: str, error: str, tb: str, now_ms: int, retention_s: int
    ) -> None:
        await self.db.run(self.add_statement(m, reason, error_type, error, tb, now_ms, retention_s))

    async def list(self, queue: str, limit: int | None = 1000, after: uuid.UUID | None = None) -> list[PoisonRecord]:
        """Up to ``limit`` records (None: all) in id order, after the id ``after`` (the last one
        of the previous page), read page by page: never only the driver's first page."""
        out: list[PoisonRecord] = []
        async for chunk in self.pages(queue, after=after, size=min(PAGE_SIZE, limit or PAGE_SIZE)):
            out += chunk
            if limit is not None and len(out) >= limit:
                return out[:limit]
        return out

    async def pages(
        self, queue: str, after: uuid.UUID | None = None, size: int = PAGE_SIZE
    ) -> AsyncIterator[builtins.list[PoisonRecord]]:
        """The poison queue, one page of records at a time (bulk actions hold one page)."""
        stmt, params = (self._list, [queue]) if after is None else (self._list_after, [queue, after])
        async for rows in pages(self.db, stmt, params, size):
            yield [_record(r) for r in rows]

    async def get(self, queue: str, message_id: uuid.UUID) -> PoisonRecord | None:
        rows = await self.db.run(self._get, [queue, message_id])
        return _record(rows[0]) if rows else None

    async def remove(self, queue: str, message_id: uuid.UUID) -> None:
        await self.db.run(self._remove, [queue, message_id])

    async def purge(self, queue: str) -> None:
        await self.db.run(self._purge, [queue])

    async def count(self, queue: str) -> int:
        rows = await self.db.run(self._count, [queue])
        return int(rows[0].count) if rows else 0


def _record(r: Any) -> PoisonRecord:
    return PoisonRecord(
        queue=r.queue,
        id=r.id,
        poisoned_at=r.poisoned_at or 0,
        task=r.task or "",
        payload=r.payload,
        headers=dict(r.headers or {}),
        attempt=r.attempt or 0,
        priority=r.priority or 0,
        key=r.key,
        trigger=json.loads(r.trigger) if r.trigger else None,
        error_type=r.error_type or "",
        error=r.error or "",
        traceback=r.traceback or "",
        reason=r.reason or "",
    )

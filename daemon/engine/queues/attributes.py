"""A queue's free-form attributes and tags (the ``attributes`` and ``tags`` maps of its
``queues`` row), and listing queue names a page at a time.

casque's own settings (visibility = message timeout, retention, max attempts) stay in their typed
columns; what has no casque meaning (SQS's DelaySeconds, ReceiveMessageWaitTimeSeconds,
RedrivePolicy, MaximumMessageSize, ...) is kept here as text. Reads are cached and trusted as queue settings are
(``QueueStore.trusted``, engine/queues/store.py): they are read on every send and receive of the SQS endpoint.
"""

from __future__ import annotations

import builtins
import time
from dataclasses import dataclass, field
from typing import Any

from daemon.base.lru import ONLINE_S, Lru
from daemon.engine.queues.dead_letter_sources import DeadLetterSources
from daemon.engine.queues.store import QueueStore
from daemon.engine.storage.db import Database

#: The attribute naming a queue's dead-letter queue (engine/delivery/deadletter.py imports it from here).
DEAD_LETTER = "casque.dead_letter"


@dataclass(frozen=True)
class QueueExtras:
    attributes: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    created_at: int = 0
    updated_at: int = 0


class QueueAttributes:
    def __init__(self, db: Database, keyspace: str, rows: QueueStore, cache_limit: int = 10_000) -> None:
        self.db = db
        #: The queue rows: one read fills the settings' cache and this one (``QueueStore.read_row``, engine/stores.py
        #: hands ``remember`` to it), and a copy here is trusted, and a write announced, as a row is there.
        self.rows = rows
        t = f"{keyspace}.queues"
        p = db.prepare
        self._put = p(f"UPDATE {t} SET attributes = attributes + ?, updated_at = ? WHERE name = ?")
        self._drop = p(f"UPDATE {t} SET attributes = attributes - ?, updated_at = ? WHERE name = ?")
        self._tag = p(f"UPDATE {t} SET tags = tags + ? WHERE name = ?")
        self._untag = p(f"UPDATE {t} SET tags = tags - ? WHERE name = ?")
        self._page_first = p(f"SELECT name FROM {t} LIMIT ?")
        self._page_after = p(f"SELECT name FROM {t} WHERE token(name) > token(?) LIMIT ?")
        self._cache: Lru[str, tuple[float, QueueExtras]] = Lru(cache_limit, keep_s=ONLINE_S)  # the queues used now
        self.sources = DeadLetterSources(db, keyspace)

    async def get(self, queue: str, fresh: bool = False) -> QueueExtras:
        hit = self._cache.get(queue)
        if hit and not fresh and self.rows.trusted(hit[0]):
            return hit[1]
        return self.remember(queue, await self.rows.read_row(queue))  # the whole row: the settings' cache fills too

    def remember(self, queue: str, r: Any | None) -> QueueExtras:
        """Cache the attributes of a ``queues`` row just read (None: no row)."""
        extras = (
            QueueExtras(dict(r.attributes or {}), dict(r.tags or {}), r.created_at or 0, r.updated_at or 0)
            if r
            else QueueExtras()
        )
        self._cache.put(queue, (time.monotonic(), extras))
        return extras

    async def set(self, queue: str, put: dict[str, str], drop: set[str], now_ms: int) -> None:
        """Write and drop attributes. A change of the dead-letter target also moves the queue in
        the dead-letter index: the old link dropped, the new one written (after the attribute, so
        the index never names a source whose attributes don't say so for longer than a crash)."""
        moving = DEAD_LETTER in put or DEAD_LETTER in drop
        old = (await self.get(queue, fresh=True)).attributes.get(DEAD_LETTER) if moving else None
        if put:
            await self.db.run(self._put, [put, now_ms, queue])
        if drop:
            await self.db.run(self._drop, [drop, now_ms, queue])
        await self._changed(queue)
        if moving:
            new = put.get(DEAD_LETTER) or None
            if old and old != new:
                await self.sources.unlink(old, queue)
            if new:
                await self.sources.link(new, queue)

    async def forget_source(self, queue: str) -> int:
        """The queue is being deleted: it stops being a source of its dead-letter queue. Returns
        the tombstones written (1 if it was a source, else 0)."""
        target = (await self.get(queue, fresh=True)).attributes.get(DEAD_LETTER)
        if target:
            await self.sources.unlink(target, queue)
        return 1 if target else 0

    async def tag(self, queue: str, put: dict[str, str], drop: builtins.set[str]) -> None:
        if put:
            await self.db.run(self._tag, [put, queue])
        if drop:
            await self.db.run(self._untag, [drop, queue])
        await self._changed(queue)

    async def _changed(self, queue: str) -> None:
        self._cache.pop(queue)
        await self.rows.changed(queue)

    async def names_page(self, after: str | None, limit: int) -> list[str]:
        """Up to ``limit`` queue names in token order after ``after``: one bounded read, whatever
        the number of queues (the page token is the last name returned)."""
        if after is None:
            rows = await self.db.run(self._page_first, [limit])
        else:
            rows = await self.db.run(self._page_after, [after, limit])
        return [r.name for r in rows]

    def forget(self, queue: str) -> None:
        self._cache.pop(queue)

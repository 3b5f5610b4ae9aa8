"""Lookup keys: a user's name for a message ("digest:user42"), stored in the ``keys`` table.

Keys are claimed and moved with lightweight transactions, so two senders of the same key can't both
win, and they are released (``DELETE ... IF id = ?``) when their message finishes or is cancelled.
Astyanax never released its unique keys; here a key outlives its message only for a crash between
the two writes, and such a stale key is detected (its message is gone) and taken over.
"""

from __future__ import annotations

import builtins
import json
import uuid
from dataclasses import dataclass
from typing import Any

from daemon.engine.storage.db import Database
from daemon.engine.storage.paging import PAGE_SIZE, pages
from daemon.engine.storage.placement import KEY_SHARDS, key_shard


@dataclass
class KeyEntry:
    queue: str
    key: str
    id: uuid.UUID
    bucket: int
    shard: int
    task: str = ""
    trigger: dict[str, Any] | None = None
    created_at: int = 0
    last_run: int | None = None


_COLS = "queue, key_shard, key, id, bucket, shard, task, trigger, created_at, last_run"


class KeyStore:
    def __init__(self, db: Database, keyspace: str) -> None:
        self.db = db
        t = f"{keyspace}.keys"
        p = db.prepare
        self._get = p(f"SELECT {_COLS} FROM {t} WHERE queue = ? AND key_shard = ? AND key = ?")
        self._claim = p(f"INSERT INTO {t} ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?) IF NOT EXISTS")
        self._repoint = p(
            f"UPDATE {t} SET id = ?, bucket = ?, shard = ?, task = ?, trigger = ?, created_at = ?, last_run = ? "
            "WHERE queue = ? AND key_shard = ? AND key = ? IF id = ?"
        )
        self._release = p(f"DELETE FROM {t} WHERE queue = ? AND key_shard = ? AND key = ? IF id = ?")
        self._list = p(f"SELECT {_COLS} FROM {t} WHERE queue = ? AND key_shard = ? AND key > ?")
        self._purge = p(f"DELETE FROM {t} WHERE queue = ? AND key_shard = ?")

    async def get(self, queue: str, key: str) -> KeyEntry | None:
        rows = await self.db.run(self._get, [queue, key_shard(key), key])
        return _entry(rows[0]) if rows else None

    async def claim(self, e: KeyEntry) -> KeyEntry | None:
        """Claim a free key. Returns None when claimed, else the entry that holds it."""
        rows = await self.db.run(
            self._claim,
            [e.queue, key_shard(e.key), e.key, e.id, e.bucket, e.shard, e.task, _trig(e.trigger), e.created_at, None],
        )
        if rows and not rows[0].applied:
            return _entry(rows[0])
        return None

    async def repoint(self, e: KeyEntry, expected_id: uuid.UUID) -> bool:
        """Point the key at a new message, only if it still names ``expected_id``."""
        rows = await self.db.run(
            self._repoint,
            [
                e.id,
                e.bucket,
                e.shard,
                e.task,
                _trig(e.trigger),
                e.created_at,
                e.last_run,
                e.queue,
                key_shard(e.key),
                e.key,
                expected_id,
            ],
        )
        return bool(rows and rows[0].applied)

    async def release(self, queue: str, key: str, message_id: uuid.UUID) -> bool:
        """Free the key if it still names this message (a replaced key is left alone)."""
        rows = await self.db.run(self._release, [queue, key_shard(key), key, message_id])
        return bool(rows and rows[0].applied)

    async def list(self, queue: str, limit: int | None = None, after: str = "") -> list[KeyEntry]:
        """Keys in key order after ``after`` (the last key of the previous page), at most ``limit``
        (None: all). Each key shard is read page by page, and at most ``limit`` keys from each."""
        out: list[KeyEntry] = []
        for ks in range(KEY_SHARDS):
            out += await self._shard_keys(queue, ks, limit, after)
        out.sort(key=lambda e: e.key)
        return out if limit is None else out[:limit]

    async def _shard_keys(self, queue: str, ks: int, limit: int | None, after: str) -> builtins.list[KeyEntry]:
        found: list[KeyEntry] = []
        async for rows in pages(self.db, self._list, [queue, ks, after], min(PAGE_SIZE, limit or PAGE_SIZE)):
            found += [_entry(r) for r in rows]
            if limit is not None and len(found) >= limit:
                return found[:limit]
        return found

    async def purge(self, queue: str) -> None:
        for ks in range(KEY_SHARDS):
            await self.db.run(self._purge, [queue, ks])


def _trig(trigger: dict[str, Any] | None) -> str | None:
    return json.dumps(trigger) if trigger else None


def _entry(r: Any) -> KeyEntry:
    return KeyEntry(
        queue=r.queue,
        key=r.key,
        id=r.id,
        bucket=r.bucket,
        shard=r.shard,
        task=r.task or "",
        trigger=json.loads(r.trigger) if r.trigger else None,
        created_at=r.created_at or 0,
        last_run=r.last_run,
    )

"""Access keys for the SQS endpoint (the ``access_keys`` table): created by ``casque sqs-keys
create``, read by ``casque serve`` to verify SigV4 signatures.

SigV4 is an HMAC over the request with a key derived from the secret, so the server needs the
secret itself; it is stored as given and never logged. Reads are cached for a minute (a revoked
key stops working within that).
"""

from __future__ import annotations

import secrets
import string
import time
from dataclasses import dataclass

from daemon.base.clock import Clock
from daemon.engine.db import Database

CACHE_SECONDS = 60.0
_ALPHABET = string.ascii_uppercase + string.digits


@dataclass(frozen=True)
class AccessKey:
    access_key_id: str
    secret: str
    description: str
    created_at: int


class AccessKeyStore:
    def __init__(self, db: Database, keyspace: str, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        t = f"{keyspace}.access_keys"
        self._insert = db.prepare(f"INSERT INTO {t} (access_key_id, secret, description, created_at) VALUES (?, ?, ?, ?) IF NOT EXISTS")
        self._get = db.prepare(f"SELECT access_key_id, secret, description, created_at FROM {t} WHERE access_key_id = ?")
        self._delete = db.prepare(f"DELETE FROM {t} WHERE access_key_id = ?")
        self._list = f"SELECT access_key_id, secret, description, created_at FROM {t}"
        self._cache: dict[str, tuple[float, AccessKey | None]] = {}

    async def create(self, description: str = "") -> AccessKey:
        key = AccessKey("CQ" + "".join(secrets.choice(_ALPHABET) for _ in range(18)), secrets.token_urlsafe(30), description, self.clock.now_ms())
        await self.db.run(self._insert, [key.access_key_id, key.secret, key.description, key.created_at])
        return key

    async def get(self, access_key_id: str) -> AccessKey | None:
        hit = self._cache.get(access_key_id)
        if hit and time.monotonic() - hit[0] < CACHE_SECONDS:
            return hit[1]
        rows = await self.db.run(self._get, [access_key_id])
        key = AccessKey(rows[0].access_key_id, rows[0].secret, rows[0].description or "", rows[0].created_at or 0) if rows else None
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[access_key_id] = (time.monotonic(), key)
        return key

    async def list(self) -> list[AccessKey]:
        rows = await self.db.run_all(self._list)
        return sorted((AccessKey(r.access_key_id, r.secret, r.description or "", r.created_at or 0) for r in rows), key=lambda k: k.created_at)

    async def delete(self, access_key_id: str) -> None:
        await self.db.run(self._delete, [access_key_id])
        self._cache.pop(access_key_id, None)

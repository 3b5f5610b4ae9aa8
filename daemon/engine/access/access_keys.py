"""Access keys for the SQS endpoint (the ``access_keys`` table): created by ``casque sqs-keys
create``, read by ``casque serve`` to verify SigV4 signatures.

SigV4 is an HMAC over the request with a key derived from the secret, so the server needs the
secret itself; it is stored as given and never logged. ``casque serve`` does not read keys one by
one: engine/access/key_cache.py holds the whole table (a deleted key stops working within 5 s, and random
key ids of a flood cost no read each). ``get`` (cached a minute) is for one-off lookups.

A key may carry a grant (engine/access/grants.py: the SQS actions and queues it may use; columns
``grant_actions``/``grant_queues``). A key without one (both null, as every key made before grants
existed) has full access.
"""

from __future__ import annotations

import secrets
import string
import time
from dataclasses import dataclass
from typing import Any

from daemon.base.clock import Clock
from daemon.engine.access.grants import FULL, Grant
from daemon.engine.storage.db import Database

CACHE_SECONDS = 60.0
_ALPHABET = string.ascii_uppercase + string.digits


@dataclass(frozen=True)
class AccessKey:
    access_key_id: str
    secret: str
    description: str
    created_at: int
    grant: Grant | None = None  # None: full access

    @property
    def rights(self) -> Grant:
        """What the key may do: its grant, or everything."""
        return self.grant or FULL


class AccessKeyStore:
    def __init__(self, db: Database, keyspace: str, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        t = f"{keyspace}.access_keys"
        cols = "access_key_id, secret, description, created_at, grant_actions, grant_queues"
        self._insert = db.prepare(f"INSERT INTO {t} ({cols}) VALUES (?, ?, ?, ?, ?, ?) IF NOT EXISTS")
        self._get = db.prepare(f"SELECT {cols} FROM {t} WHERE access_key_id = ?")
        self._delete = db.prepare(f"DELETE FROM {t} WHERE access_key_id = ?")
        self._list = f"SELECT {cols} FROM {t}"
        self._cache: dict[str, tuple[float, AccessKey | None]] = {}

    async def create(self, description: str = "", grant: Grant | None = None) -> AccessKey:
        """A new key; ``grant`` limits it (``Grant.parse(["ReceiveMessage"], ["user-42"])``),
        None gives it full access."""
        key = AccessKey(
            "CQ" + "".join(secrets.choice(_ALPHABET) for _ in range(18)),
            secrets.token_urlsafe(30),
            description,
            self.clock.now_ms(),
            grant,
        )
        actions, queues = (list(grant.actions), list(grant.queues)) if grant else (None, None)
        await self.db.run(
            self._insert, [key.access_key_id, key.secret, key.description, key.created_at, actions, queues]
        )
        return key

    async def get(self, access_key_id: str) -> AccessKey | None:
        hit = self._cache.get(access_key_id)
        if hit and time.monotonic() - hit[0] < CACHE_SECONDS:
            return hit[1]
        rows = await self.db.run(self._get, [access_key_id])
        key = _key(rows[0]) if rows else None
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[access_key_id] = (time.monotonic(), key)
        return key

    async def list(self) -> list[AccessKey]:
        rows = await self.db.run_all(self._list)
        return sorted((_key(r) for r in rows), key=lambda k: k.created_at)

    async def delete(self, access_key_id: str) -> None:
        await self.db.run(self._delete, [access_key_id])
        self._cache.pop(access_key_id, None)


def _key(r: Any) -> AccessKey:
    grant = Grant(tuple(r.grant_actions or ()), tuple(r.grant_queues or ())) if r.grant_actions is not None else None
    return AccessKey(r.access_key_id, r.secret, r.description or "", r.created_at or 0, grant)

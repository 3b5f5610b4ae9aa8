"""Shared secrets (the ``secrets`` table): one random value per name, the same for every server.

The first server that needs a secret creates it with a lightweight transaction
(``INSERT ... IF NOT EXISTS``) and everyone, including a server that lost that race, then reads
the winner's value. So receipt handles signed by one ``casque serve`` are honoured by all the others
behind the same load balancer, without a secret in any config file.
"""

from __future__ import annotations

import os

from daemon.base.clock import Clock
from daemon.engine.storage.db import Database

RECEIPT_KEY = "receipt-hmac"


class SecretStore:
    def __init__(self, db: Database, keyspace: str, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        self._create = db.prepare(
            f"INSERT INTO {keyspace}.secrets (name, value, created_at) VALUES (?, ?, ?) IF NOT EXISTS"
        )
        self._read = db.prepare(f"SELECT value FROM {keyspace}.secrets WHERE name = ?")
        self._cache: dict[str, bytes] = {}

    async def get_or_create(self, name: str, size: int = 32) -> bytes:
        """The secret called ``name``, created (random, ``size`` bytes) if nobody has yet."""
        if name in self._cache:
            return self._cache[name]
        rows = await self.db.run(self._read, [name])
        if not rows:
            await self.db.run(self._create, [name, os.urandom(size), self.clock.now_ms()])
            rows = await self.db.run(self._read, [name])
        value = bytes(rows[0].value)
        self._cache[name] = value
        return value

"""Cooldowns: a name that stays taken for a fixed time, the same for every process of a cluster.

SQS refuses a second PurgeQueue of a queue within 60 s, and a CreateQueue of a name deleted less
than 60 s ago, whichever server the first call went to. Each is a row of the ``leases`` table
(engine/cluster/lease.py: a name, a holder, a TTL) written with that TTL: Cassandra forgets it when the
time is up, so nothing ever has to clean it up, and no new table is needed. ``claim`` is a
lightweight transaction (two servers can't both win the same purge); ``start``/``active`` are a
plain write and read (a deletion marker has one writer, and any reader after it sees it).
"""

from __future__ import annotations

import math

from daemon.engine.storage.db import Database


class Cooldowns:
    def __init__(self, db: Database, keyspace: str, holder: str = "casque") -> None:
        self.db = db
        self.holder = holder
        t = f"{keyspace}.leases"
        self._claim = db.prepare(f"INSERT INTO {t} (name, holder) VALUES (?, ?) IF NOT EXISTS USING TTL ?")
        self._start = db.prepare(f"INSERT INTO {t} (name, holder) VALUES (?, ?) USING TTL ?")
        self._read = db.prepare(f"SELECT holder FROM {t} WHERE name = ?")

    async def claim(self, name: str, seconds: float) -> bool:
        """Take ``name`` for ``seconds``; False if it is still taken (by anyone)."""
        rows = await self.db.run(self._claim, [name, self.holder, _ttl(seconds)])
        return bool(rows and rows[0].applied)

    async def start(self, name: str, seconds: float) -> None:
        """Mark ``name`` taken for ``seconds`` from now (again from now if it already was)."""
        await self.db.run(self._start, [name, self.holder, _ttl(seconds)])

    async def active(self, name: str) -> bool:
        return bool(await self.db.run(self._read, [name]))


def _ttl(seconds: float) -> int:
    return max(1, math.ceil(seconds))

"""Who listens for wake hints (engine/hints.py): the ``hint_listeners`` table.

Each listener (a ``casque run`` daemon for its queues, ``casque serve`` for every queue: ``*``)
writes its row with a short TTL and rewrites it every few seconds, so a listener that died is
forgotten within the TTL and producers never aim datagrams at a port for long after its owner has
gone. Listeners are few (one per daemon or server process), so every row lives in one partition
and a producer learns them all with one single-partition read, which it caches for a few seconds.

Not the ``daemons`` heartbeat table: that one is written every 10 s with a one-hour TTL for
operators, holds no address, and ``casque serve`` (whose SQS long polls want hints too) is no
daemon there.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass
from typing import Any

from daemon.engine.db import Database

SLOT = 0
EVERY_QUEUE = "*"


@dataclass(frozen=True)
class ListenerEntry:
    address: str  # "host:port" (or "[v6]:port")
    queues: frozenset[str]
    heartbeat: int

    def serves(self, queue: str) -> bool:
        return EVERY_QUEUE in self.queues or queue in self.queues


class HintDirectory:
    """Statements are prepared on first use, not at connect: a client of a keyspace whose schema
    predates this table still connects and sends (it just finds no listener)."""

    def __init__(self, db: Database, keyspace: str) -> None:
        self.db = db
        self.table = f"{keyspace}.hint_listeners"

    async def _prepared(self, cql: str) -> Any:
        return await asyncio.to_thread(self.db.prepare, cql.format(t=self.table, slot=SLOT))

    async def register(self, address: str, queues: list[str], now_ms: int, ttl_s: int) -> None:
        stmt = await self._prepared("INSERT INTO {t} (slot, address, queues, host, pid, heartbeat) VALUES ({slot}, ?, ?, ?, ?, ?) USING TTL ?")
        await self.db.run(stmt, [address, set(queues), socket.gethostname(), os.getpid(), now_ms, ttl_s])

    async def remove(self, address: str) -> None:
        await self.db.run(await self._prepared("DELETE FROM {t} WHERE slot = {slot} AND address = ?"), [address])

    async def live(self) -> list[ListenerEntry]:
        """Every registered listener (rows vanish with their TTL once their listener stops)."""
        rows = await self.db.run(await self._prepared("SELECT address, queues, heartbeat FROM {t} WHERE slot = {slot}"))
        return [ListenerEntry(r.address, frozenset(r.queues or ()), r.heartbeat or 0) for r in rows]

"""Daemon heartbeats: one row per running daemon in the ``daemons`` table, rewritten by the worker
every 10 s with what it serves and how busy it is, so an operator (the console's daemons page) can
see which daemons are alive without reaching into their processes.

Daemons are few (tens, not millions), so all rows share one partition and listing them is one read.
A row expires an hour after its last heartbeat; until then a silent daemon shows as stale.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from daemon.engine.storage.db import Database

SLOT = 0
STALE_AFTER_MS = 30_000  # three missed heartbeats
_COLS = "daemon, host, pid, queues, concurrency, in_flight, started_at, heartbeat, version"


@dataclass
class Heartbeat:
    daemon: str
    host: str
    pid: int
    queues: list[str] = field(default_factory=list)
    concurrency: int = 0
    in_flight: int = 0
    started_at: int = 0
    heartbeat: int = 0
    version: str = ""

    def age_ms(self, now_ms: int) -> int:
        return max(0, now_ms - self.heartbeat)

    def stale(self, now_ms: int) -> bool:
        return self.age_ms(now_ms) > STALE_AFTER_MS


def this_process(queues: list[str], concurrency: int, started_at: int, version: str) -> Heartbeat:
    host, pid = socket.gethostname(), os.getpid()
    return Heartbeat(f"{host}:{pid}", host, pid, list(queues), concurrency, 0, started_at, started_at, version)


class Heartbeats:
    def __init__(self, db: Database, keyspace: str) -> None:
        self.db = db
        t = f"{keyspace}.daemons"
        self._write = db.prepare(f"INSERT INTO {t} (slot, {_COLS}) VALUES ({SLOT},?,?,?,?,?,?,?,?,?)")
        self._list = db.prepare(f"SELECT {_COLS} FROM {t} WHERE slot = {SLOT}")

    async def beat(self, hb: Heartbeat) -> None:
        await self.db.run(
            self._write,
            [
                hb.daemon,
                hb.host,
                hb.pid,
                hb.queues,
                hb.concurrency,
                hb.in_flight,
                hb.started_at,
                hb.heartbeat,
                hb.version,
            ],
        )

    async def list(self) -> list[Heartbeat]:
        rows = await self.db.run(self._list)
        return sorted(
            (
                Heartbeat(
                    r.daemon,
                    r.host or "",
                    r.pid or 0,
                    list(r.queues or []),
                    r.concurrency or 0,
                    r.in_flight or 0,
                    r.started_at or 0,
                    r.heartbeat or 0,
                    r.version or "",
                )
                for r in rows
            ),
            key=lambda h: (-h.heartbeat, h.daemon),
        )

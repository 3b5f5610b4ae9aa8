"""Who listens for wake hints (engine/wake/hints.py), and where: the ``hint_listeners`` table, and the
addresses a listener binds and advertises.

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
import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import Any

from daemon.engine.storage.db import Database

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
        stmt = await self._prepared(
            "INSERT INTO {t} (slot, address, queues, host, pid, heartbeat) VALUES ({slot}, ?, ?, ?, ?, ?) USING TTL ?"
        )
        await self.db.run(stmt, [address, set(queues), socket.gethostname(), os.getpid(), now_ms, ttl_s])

    async def remove(self, address: str) -> None:
        await self.db.run(await self._prepared("DELETE FROM {t} WHERE slot = {slot} AND address = ?"), [address])

    async def live(self) -> list[ListenerEntry]:
        """Every registered listener (rows vanish with their TTL once their listener stops)."""
        rows = await self.db.run(await self._prepared("SELECT address, queues, heartbeat FROM {t} WHERE slot = {slot}"))
        return [ListenerEntry(r.address, frozenset(r.queues or ()), r.heartbeat or 0) for r in rows]


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` into (host, port); ValueError naming the expected form."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid hint address {text!r}: expected host:port, e.g. 10.0.0.5:0 (0 picks a free port)")
    return host.strip("[]"), int(port)


def split_host(text: str) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` into (host, port or 0)."""
    if text.startswith("[") or text.count(":") == 1:
        host, sep, port = text.rpartition(":")
        if sep and port.isdigit() and not host.endswith(":"):
            return parse_address(text)
    return text.strip("[]"), 0


def bind_host(contact_points: list[str], port: int) -> str:
    """The address this host uses to reach Cassandra (a UDP connect sends nothing: the kernel only
    picks the route), or 127.0.0.1 when Cassandra is local: where other producers can reach us."""
    first = contact_points[0] if contact_points else "127.0.0.1"
    try:
        info = socket.getaddrinfo(first, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(info[0], socket.SOCK_DGRAM) as probe:
            probe.connect(info[4])
            host = probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"
    return "127.0.0.1" if host.startswith("127.") or host == "::1" else host


def listen_addresses(
    address: str, advertise: str, contact_points: list[str], cassandra_port: int
) -> tuple[tuple[str, int], tuple[str, int]]:
    """Where a listener binds and what it advertises, from ``hints.address`` and ``hints.advertise``
    (each ``host``, ``host:port`` or empty): by default the address that reaches Cassandra, on a
    free port; a wildcard bind (0.0.0.0) advertises that address too."""
    try:
        bind = split_host(address) if address else (bind_host(contact_points, cassandra_port), 0)
        host, port = split_host(advertise) if advertise else (bind[0], 0)
    except ValueError as exc:
        raise ValueError(f"hints.address/hints.advertise: {exc}") from None
    if host in ("", "0.0.0.0", "::"):
        host = bind_host(contact_points, cassandra_port)
    return bind, (_ip(host), port)


def _ip(host: str) -> str:
    """A name is resolved once, here, so producers' ``sendto`` never waits on DNS."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        return str(socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)[0][4][0])
    except OSError as exc:
        raise ValueError(
            f"hints.advertise/hints.address: cannot resolve {host!r} ({exc}): give an IP address"
        ) from None


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

"""The idle phase of the many-queues scenario (bench/many_queues.py): Cassandra reads per second while
every queue sits idle, the server up and no client connected (issue 28: "≈ 0").

Two counts over the same window, because each can hide what the other sees:
  * the node's own: the ``count`` of Cassandra 5's virtual tables ``system_views.local_read_latency``
    (single-partition reads) and ``local_scan_latency`` (range reads), summed over the bench's keyspace:
    every read any client made of those tables, the server's and anything else's (the node is shared:
    another run in the same keyspace would show here, which is why a measuring run uses a keyspace of its own);
  * the server's: the CQL reads ``casque serve`` itself sent (bench/many_queues_serve.py counts them).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from .env import progress

if TYPE_CHECKING:
    from .mq_serve import Server

VIEWS = ("local_read_latency", "local_scan_latency")


async def node_reads(db: Any, keyspace: str) -> dict[str, int]:
    """Reads the node has served on each table of ``keyspace`` since it started (both views summed)."""
    out: dict[str, int] = {}
    for view in VIEWS:
        rows = await db.run(f"SELECT table_name, count FROM system_views.{view} WHERE keyspace_name = %s", [keyspace])
        for r in rows:
            out[r.table_name] = out.get(r.table_name, 0) + int(r.count)
    return out


async def idle(db: Any, keyspace: str, server: Server, seconds: float) -> dict[str, Any]:
    """The reads of an idle window: per second on the node, per second from the server, and by table."""
    progress(f"  idle: {seconds:g} s with the server up and no client; counting the node's reads")
    # the server writes its counts every 0.5 s: two periods first, so the last requests served land before
    await asyncio.sleep(1.5)
    before, s0, t0 = await node_reads(db, keyspace), server.stats(), time.time()
    await asyncio.sleep(seconds)
    after, s1, t1 = await node_reads(db, keyspace), server.stats(), time.time()
    by_table = {t: after[t] - before.get(t, 0) for t in after if after[t] - before.get(t, 0)}
    node = sum(by_table.values())
    served = s1.get("cql_reads", 0) - s0.get("cql_reads", 0)
    same_process = s1.get("pid") == s0.get("pid")
    return {
        "seconds": t1 - t0,
        "node_reads": node,
        "node_reads_per_s": node / (t1 - t0),
        "by_table": by_table,
        "server_cql_reads": served if same_process else None,
        "server_cql_reads_per_s": served / (t1 - t0) if same_process else None,
    }

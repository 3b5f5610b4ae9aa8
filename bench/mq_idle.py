"""The idle phase of the many-queues scenario (bench/many_queues.py): Cassandra reads per second while
every queue sits idle, the server up and no client connected ("≈ 0").

Two counts over the same window, because each can hide what the other sees:
  * the node's own: the ``count`` of Cassandra 5's virtual tables ``system_views.local_read_latency``
    (single-partition reads) and ``local_scan_latency`` (range reads), summed over the bench's keyspace:
    every read any client made of those tables, the server's and anything else's (the node is shared:
    another run in the same keyspace would show here, which is why a measuring run uses a keyspace of its own);
  * the server's: the CQL reads ``casque serve`` itself sent (bench/many_queues_serve.py counts them),
    and its requests by the engine function that sent them (which loop reads while nothing happens).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from .cqlcount import _short
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


async def idle(db: Any, keyspace: str, server: Server, seconds: float, settle_s: float = 0.0) -> dict[str, Any]:
    """The reads of an idle window: per second on the node, per second from the server, and by table. The
    window opens ``settle_s`` after the last client request: until then the server's sweep is still settling
    the queues just used (engine/consume/sweep.py), which is the cost of use, not of idleness."""
    if settle_s:
        progress(f"  idle: {settle_s:g} s for the queues just used to settle (the sweep's lag and one pass)")
        await asyncio.sleep(settle_s)
    progress(f"  idle: {seconds:g} s with the server up and no client; counting the node's reads")
    flag = server.stats_file.with_name(server.stats_file.name + ".by-caller")
    flag.touch()  # the server counts its requests by engine function from now on (bench/many_queues_serve.py)
    # the server writes its counts every 0.5 s: two periods first, so the last requests served land before
    await asyncio.sleep(1.5)
    before, s0, t0 = await node_reads(db, keyspace), server.stats(), time.time()
    await asyncio.sleep(seconds)
    after, s1, t1 = await node_reads(db, keyspace), server.stats(), time.time()
    flag.unlink()
    c0, c1 = s0.get("by_caller") or {}, s1.get("by_caller") or {}
    callers = {k: v - c0.get(k, 0) for k, v in c1.items() if v - c0.get(k, 0)}
    r0, r1 = s0.get("by_statement") or {}, s1.get("by_statement") or {}
    selects: Counter[str] = Counter()
    for k, v in r1.items():
        selects[_short(k)] += v - r0.get(k, 0)
    by_table = {t: after[t] - before.get(t, 0) for t in after if after[t] - before.get(t, 0)}
    node = sum(by_table.values())
    served = s1.get("cql_reads", 0) - s0.get("cql_reads", 0)
    same_process = s1.get("pid") == s0.get("pid")
    return {
        "settle_s": settle_s,
        "seconds": t1 - t0,
        "node_reads": node,
        "node_reads_per_s": node / (t1 - t0),
        "by_table": by_table,
        "server_cql_reads": served if same_process else None,
        "server_cql_reads_per_s": served / (t1 - t0) if same_process else None,
        # the server's CQL requests (reads and writes) in the window by the engine function that sent them
        "server_by_caller": dict(sorted(callers.items(), key=lambda kv: -kv[1])[:12]),
        "server_reads_by_statement": {k: n for k, n in selects.most_common(12) if n},
    }

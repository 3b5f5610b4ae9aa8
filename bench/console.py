"""What the console's pages cost: ``python -m bench.console [--queues 200,5000]``.

In a scratch keyspace it creates N empty queues (the settings given), then times the queues page
(one page of 25 by token, counts for those 25) and a queue page through the ASGI client, for each
N, so the numbers show whether the cost grows with the number of queues (it must not). The
keyspace is dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx

from daemon.base.config import ConsoleSettings, Settings
from daemon.engine.client import Casque
from daemon.engine.storage.db import Database
from daemon.engine.storage.schema import apply_schema
from daemon.http.console import build_console

KEYSPACE = "casque_bench_console"


async def grow(cq: Casque, target: int, have: int, shards: int, buckets: int) -> None:
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with sem:
            await cq.create_queue(f"q{i:07d}", if_missing=True, shards=shards, buckets=buckets)

    await asyncio.gather(*(one(i) for i in range(have, target)))


async def timed(client: httpx.AsyncClient, url: str, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        r = await client.get(url)
        assert r.status_code == 200, r.text[:300]
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


async def main(sizes: list[int], shards: int, buckets: int) -> None:
    s = Settings()
    s.cassandra.keyspace = KEYSPACE
    db = Database(s.cassandra).connect()
    apply_schema(db, KEYSPACE, s.schema)
    db.close()
    cq = await Casque.connect(s)
    app = build_console(cq, ConsoleSettings(admin_password="bench", page_size=25))
    have = 0
    print(f"queues of {shards} shards x {buckets} buckets; median of 5 requests")
    print(f"{'queues':>8} {'/queues ms':>11} {'/queues/q0000000 ms':>20}")
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://bench", auth=("admin", "bench"), timeout=120
        ) as c:
            for n in sizes:
                await grow(cq, n, have, shards, buckets)
                have = n
                print(f"{n:>8} {await timed(c, '/queues'):>11.0f} {await timed(c, '/queues/q0000000'):>20.0f}")
    finally:
        await cq.db.run(f"DROP KEYSPACE IF EXISTS {KEYSPACE}")
        await cq.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m bench.console")
    ap.add_argument("--queues", default="200,5000", help="comma-separated queue counts")
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--buckets", type=int, default=24)
    a = ap.parse_args()
    asyncio.run(main([int(x) for x in a.queues.split(",")], a.shards, a.buckets))

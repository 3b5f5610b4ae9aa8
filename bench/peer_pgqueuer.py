"""Peer: pgqueuer (PostgreSQL, asyncpg). The worker is ``python -m bench.peer_pgqueuer``, which
calls ``pgqueuer.run`` exactly as ``pgq run bench.peer_pgqueuer:main`` would (that CLI fails to
parse its own ``--log-level`` default in this release).

pgqueuer dequeues in batches with ``FOR UPDATE SKIP LOCKED``, wakes on LISTEN/NOTIFY and writes
completions through a buffered log; the bench raises the batch size from 10 to 16 (at most half
of the task limit, which pgqueuer requires) for throughput.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from pgqueuer import AsyncpgDriver, Job, PgQueuer, run

from .peer_record import record

DSN = os.environ.get("BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5439/casque_bench")
CONCURRENCY = int(os.environ.get("BENCH_PEER_CONCURRENCY", "32"))
BATCH = int(os.environ.get("BENCH_PGQ_BATCH", "16"))


@asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    conn = await asyncpg.connect(DSN)
    pgq = PgQueuer(AsyncpgDriver(conn))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        record(float(json.loads(job.payload or b"{}").get("t", 0)))

    try:
        yield pgq
    finally:
        await conn.close()


if __name__ == "__main__":
    asyncio.run(run(main, batch_size=BATCH, max_concurrent_tasks=max(CONCURRENCY, 2 * BATCH)))

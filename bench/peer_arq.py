"""Peer: arq (asyncio, Redis). The worker is ``arq bench.peer_arq.WorkerSettings``.

arq reads up to ``queue_read_limit`` job ids per poll and sleeps up to ``poll_delay`` (0.5 s by
default) between polls, so its default caps a busy worker at a few hundred jobs/s; the bench
lowers ``poll_delay`` to 10 ms (its docs: "duration between polling the queue for new jobs") and
keeps no results (``keep_result = 0``), as a throughput set-up would.
"""

from __future__ import annotations

import os
from typing import Any

from arq.connections import RedisSettings

from .peer_record import record

REDIS = RedisSettings(host="127.0.0.1", port=int(os.environ.get("BENCH_REDIS_PORT", "6391")), database=2)
CONCURRENCY = int(os.environ.get("BENCH_PEER_CONCURRENCY", "32"))
POLL_DELAY = float(os.environ.get("BENCH_ARQ_POLL_DELAY", "0.01"))


async def noop(ctx: dict[str, Any], t: float) -> None:
    record(t)


class WorkerSettings:
    functions = [noop]
    redis_settings = REDIS
    max_jobs = CONCURRENCY
    poll_delay = POLL_DELAY
    keep_result = 0
    job_timeout = 300

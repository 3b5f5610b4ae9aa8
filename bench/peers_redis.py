"""The peers on Redis (bench/peers.py): Celery (acks_late), arq and Dramatiq, each a ``PeerDriver`` whose
pending count is read from Redis itself, so "acked" means what the broker holds, not what a worker says.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

from .peers_driver import PeerDriver, _bin, _version
from .services import redis_url


class CeleryDriver(PeerDriver):
    name = "Celery"
    senders = 2
    pool = "threads"

    def config(self) -> dict[str, str]:
        return {
            "version": _version("celery"),
            "broker": f"Redis {redis_url(1)}",
            "pool": f"{self.pool}, --concurrency {self.concurrency}",
            "settings": "task_acks_late, worker_prefetch_multiplier=64, task_ignore_result, "
            "worker_disable_rate_limits, "
            "--without-gossip --without-mingle --without-heartbeat",
            "producer": "task.apply_async(producer=...) on a held producer connection, 2 threads",
        }

    def worker_cmd(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.peer_celery",
            "worker",
            "--pool",
            self.pool,
            "--concurrency",
            str(self.concurrency),
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            "bench@%h",
        ]

    async def open(self) -> None:
        import redis.asyncio as aioredis

        from . import peer_celery

        self.app = peer_celery.app
        self.task = peer_celery.noop
        self.redis = aioredis.Redis.from_url(redis_url(1))

    async def close(self) -> None:
        await self.redis.aclose()

    async def reset(self) -> None:
        await self.redis.flushdb()

    def _send_sync(self, count: int, t: float) -> None:
        with self.app.producer_or_acquire() as producer:
            for _ in range(count):
                self.task.apply_async((t,), producer=producer)

    async def send(self, count: int, t: float) -> None:
        await asyncio.to_thread(self._send_sync, count, t)

    async def pending(self) -> int:
        async with self.redis.pipeline(transaction=False) as p:
            p.llen("celery")
            p.hlen("unacked")
            queued, unacked = await p.execute()
        return int(queued) + int(unacked)


class ArqDriver(PeerDriver):
    name = "arq"

    def config(self) -> dict[str, str]:
        from . import peer_arq

        return {
            "version": _version("arq"),
            "broker": f"Redis {redis_url(2)}",
            "settings": f"max_jobs={self.concurrency}, poll_delay={peer_arq.POLL_DELAY}s (default 0.5 s), "
            "keep_result=0",
            "producer": "ArqRedis.enqueue_job, 500 concurrent per send, 4 senders",
        }

    def worker_cmd(self) -> list[str]:
        return [_bin("arq"), "bench.peer_arq.WorkerSettings"]

    async def open(self) -> None:
        from arq import create_pool

        from . import peer_arq

        self.pool = await create_pool(peer_arq.REDIS)

    async def close(self) -> None:
        await self.pool.aclose()

    async def reset(self) -> None:
        await self.pool.flushdb()

    async def send(self, count: int, t: float) -> None:
        await asyncio.gather(*(self.pool.enqueue_job("noop", t) for _ in range(count)))

    async def pending(self) -> int:
        return int(await self.pool.zcard("arq:queue"))


class DramatiqDriver(PeerDriver):
    name = "Dramatiq"
    senders = 2

    def config(self) -> dict[str, str]:
        from . import peer_dramatiq

        return {
            "version": _version("dramatiq"),
            "broker": f"Redis {peer_dramatiq.URL} (RedisBroker)",
            "worker": f"dramatiq --processes 1 --threads {self.concurrency}",
            "settings": f"defaults: default middleware, prefetch 2 × threads = {2 * self.concurrency}, ack after the "
            "actor, no result backend",
            "producer": "actor.send (one Redis script call per message), 2 threads",
        }

    def worker_cmd(self) -> list[str]:
        return [_bin("dramatiq"), "bench.peer_dramatiq", "--processes", "1", "--threads", str(self.concurrency)]

    async def open(self) -> None:
        from . import peer_dramatiq

        self.broker = peer_dramatiq.broker
        self.actor = peer_dramatiq.noop
        self.msgs = f"{self.broker.namespace}:{peer_dramatiq.QUEUE}.msgs"  # a message's body, from enqueue to ack

    async def close(self) -> None:
        self.broker.close()

    async def reset(self) -> None:
        await asyncio.to_thread(self.broker.client.flushdb)

    def _send_sync(self, count: int, t: float) -> None:
        for _ in range(count):
            self.actor.send(t)

    async def send(self, count: int, t: float) -> None:
        await asyncio.to_thread(self._send_sync, count, t)

    async def pending(self) -> int:
        # redis-py types its commands for both clients (Awaitable[int] | int); Dramatiq's is the synchronous one
        hlen: Callable[[str], Any] = self.broker.client.hlen
        return int(await asyncio.to_thread(hlen, self.msgs))

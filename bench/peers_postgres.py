"""The peers on PostgreSQL (bench/peers.py): pgqueuer and procrastinate, each a ``PeerDriver`` whose
pending count is read from its job table, so "acked" means what the database holds.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .peers_driver import PeerDriver, _bin, _version
from .services import PG_PORT, pg_dsn


class PgQueuerDriver(PeerDriver):
    name = "pgqueuer"
    batch = 16
    database = "postgres"

    def config(self) -> dict[str, str]:
        return {
            "version": _version("pgqueuer"),
            "broker": f"PostgreSQL 127.0.0.1:{PG_PORT} (synchronous_commit=off), asyncpg {_version('asyncpg')}",
            "settings": f"batch_size={self.batch} (default 10), "
            f"max_concurrent_tasks={max(self.concurrency, 2 * self.batch)}",
            "producer": "Queries.enqueue with lists (one INSERT per 500 jobs), 4 senders on a pool",
        }

    def worker_cmd(self) -> list[str]:
        return [sys.executable, "-m", "bench.peer_pgqueuer"]

    async def open(self) -> None:
        import asyncpg
        from pgqueuer import AsyncpgPoolDriver, Queries

        self.db = await asyncpg.create_pool(pg_dsn(), min_size=2, max_size=6)
        self.queries = Queries(AsyncpgPoolDriver(self.db))
        if not await self.queries.has_table("pgqueuer"):
            await self.queries.install()

    async def close(self) -> None:
        await self.db.close()

    async def reset(self) -> None:
        await self.queries.clear_queue()
        await self.queries.clear_queue_log()

    async def send(self, count: int, t: float) -> None:
        payload = json.dumps({"t": t}).encode()
        await self.queries.enqueue(["noop"] * count, [payload] * count, [0] * count)

    async def pending(self) -> int:
        return int(await self.db.fetchval("SELECT count(*) FROM pgqueuer"))


class ProcrastinateDriver(PeerDriver):
    name = "procrastinate"
    database = "postgres"

    def config(self) -> dict[str, str]:
        return {
            "version": _version("procrastinate"),
            "broker": f"PostgreSQL 127.0.0.1:{PG_PORT} (synchronous_commit=off), PsycopgConnector, psycopg "
            f"{_version('psycopg')} (binary)",
            "worker": f"procrastinate --log-level=warning worker --concurrency {self.concurrency}",
            "settings": f"pool max_size={self.concurrency + 1} (concurrency + 1, as its docs size it for short jobs); "
            "defaults otherwise: LISTEN/NOTIFY, one job per fetch, delete_jobs=never; async task",
            "producer": "task.batch_defer_async (one INSERT per 500 jobs), 4 senders on the connector's pool",
        }

    def worker_cmd(self) -> list[str]:
        return [
            _bin("procrastinate"),
            "--log-level=warning",
            "--app=bench.peer_procrastinate.app",
            "worker",
            "--concurrency",
            str(self.concurrency),
        ]

    async def open(self) -> None:
        from . import peer_procrastinate

        self.app = peer_procrastinate.app
        self.connector = peer_procrastinate.connector  # the app's, as its own type (App types it as any connector)
        self.task = peer_procrastinate.noop
        await self.app.open_async()
        if not await self._fetchval("SELECT to_regclass('procrastinate_jobs') IS NOT NULL"):
            await self.app.schema_manager.apply_schema_async()  # what `procrastinate schema --apply` runs

    async def close(self) -> None:
        await self.app.close_async()

    async def _fetchval(self, sql: str) -> Any:
        async with self.connector.pool.connection() as conn:
            row = await (await conn.execute(sql)).fetchone()
        return row[0] if row else None

    async def reset(self) -> None:
        async with self.connector.pool.connection() as conn:
            await conn.execute("TRUNCATE procrastinate_jobs CASCADE")

    async def send(self, count: int, t: float) -> None:
        jobs: list[dict[str, Any]] = [{"t": t} for _ in range(count)]  # procrastinate's JSONDict
        await self.task.batch_defer_async(*jobs)

    async def pending(self) -> int:
        return int(await self._fetchval("SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"))

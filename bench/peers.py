"""Part 4: peers on the same machine, in the same run: Celery (Redis, acks_late), arq (Redis),
Dramatiq (Redis), pgqueuer (PostgreSQL) and procrastinate (PostgreSQL), each running the same
workload as casque.

The workload: N no-op tasks sent as fast as each system's producer API allows, one worker
process, at most C tasks running at once (``--concurrency C`` / ``max_jobs`` / ``--threads C`` /
``--max-concurrent-tasks`` / procrastinate's ``--concurrency C``; casque: its best consumers/batch
setting, handler concurrency C). Each worker notes send→start latency in the task
(bench/peer_record.py). "Acked" is read from the broker: Celery's queue and unacked hash empty,
arq's queue sorted set empty, Dramatiq's message hash empty, pgqueuer's job table empty,
procrastinate's jobs all past ``todo``/``doing``. Every system first gets 200 warm-up tasks (not
counted) so connections and imports are done before the clock starts. casque runs first and last,
and its ratio uses the mean of the two, so a drift of the machine's load during the section does
not favour it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from daemon.engine.client import Casque

from .casque_run import RunResult, run_casque
from .env import ROOT, cpu_seconds, out_dir, progress
from .plan import Plan
from .produce import send_fast, send_paced
from .services import PG_PORT, REDIS_PORT, children_of, pg_dsn, postgres_server, redis_server, redis_url
from .stats import Latency, cdf_points

WARMUP = 200


def _version(module: str) -> str:
    from importlib.metadata import version

    try:
        return version(module)
    except Exception:
        return "?"


class PeerDriver:
    """What the runner needs from one peer: its worker command, a sender, and a pending count."""

    name = ""
    senders = 4
    database = "redis"  # whose server's CPU the run counts: "redis" or "postgres"

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency

    def config(self) -> dict[str, str]:
        raise NotImplementedError

    def worker_cmd(self) -> list[str]:
        raise NotImplementedError

    def server_pids(self) -> list[int]:
        return []

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def reset(self) -> None: ...

    async def send(self, count: int, t: float) -> None:
        raise NotImplementedError

    async def pending(self) -> int:
        raise NotImplementedError


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


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
        return int(await asyncio.to_thread(self.broker.client.hlen, self.msgs))


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
        self.task = peer_procrastinate.noop
        await self.app.open_async()
        if not await self._fetchval("SELECT to_regclass('procrastinate_jobs') IS NOT NULL"):
            await self.app.schema_manager.apply_schema_async()  # what `procrastinate schema --apply` runs

    async def close(self) -> None:
        await self.app.close_async()

    async def _fetchval(self, sql: str) -> Any:
        async with self.app.connector.pool.connection() as conn:
            row = await (await conn.execute(sql)).fetchone()
        return row[0] if row else None

    async def reset(self) -> None:
        async with self.app.connector.pool.connection() as conn:
            await conn.execute("TRUNCATE procrastinate_jobs CASCADE")

    async def send(self, count: int, t: float) -> None:
        await self.task.batch_defer_async(*({"t": t} for _ in range(count)))

    async def pending(self) -> int:
        return int(await self._fetchval("SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"))


def drivers(concurrency: int) -> list[PeerDriver]:
    """Every peer, in the order each round runs them (Redis ones, then PostgreSQL ones)."""
    return [
        CeleryDriver(concurrency),
        ArqDriver(concurrency),
        DramatiqDriver(concurrency),
        PgQueuerDriver(concurrency),
        ProcrastinateDriver(concurrency),
    ]


async def run_peer(driver: PeerDriver, n: int, rate: float | None = None, label: str = "") -> RunResult:
    """One measured run of a peer: reset, start its worker, warm up, send N, wait until all acked."""
    label = label or driver.name
    rec = out_dir("runs", f"peer_{label}")
    for f in rec.glob("*.txt"):
        f.unlink()
    await driver.reset()
    env = dict(
        os.environ,
        BENCH_PEER_OUT=str(rec),
        BENCH_PEER_CONCURRENCY=str(driver.concurrency),
        BENCH_REDIS_PORT=str(REDIS_PORT),
        BENCH_PG_DSN=pg_dsn(),
        BENCH_PGQ_BATCH=str(getattr(driver, "batch", 16)),
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    with open(out_dir("runs") / f"peer_{label}.log", "wb") as log:
        proc = subprocess.Popen(driver.worker_cmd(), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            await driver.send(WARMUP, 0.0)
            await _until_empty(driver, proc, 120.0, "warm-up")
            server0 = cpu_seconds(driver.server_pids())
            worker0 = cpu_seconds(children_of(proc.pid))
            sent = await (
                send_fast(driver.send, n, senders=driver.senders) if rate is None else send_paced(driver.send, n, rate)
            )
            # procrastinate takes 30,000 at 100-300/s here
            end = await _until_empty(driver, proc, max(180.0, n / 25), "run")
            worker_cpu = cpu_seconds(children_of(proc.pid)) - worker0
            server_cpu = cpu_seconds(driver.server_pids()) - server0
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    samples = [float(x) for f in sorted(rec.glob("*.txt")) for x in f.read_text().split()]
    duration = end - sent.first
    return RunResult(
        system=driver.name,
        label=label,
        n=n,
        throughput=n / duration,
        send_rate=sent.rate,
        latency=Latency.of(samples),
        duration_s=duration,
        settings=driver.config(),
        cpu={"worker_s": worker_cpu, "server_s": server_cpu},
        samples_ms=samples,
        offered_rate=rate,
    )


async def _until_empty(driver: PeerDriver, proc: subprocess.Popen[bytes], timeout: float, what: str) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"the {driver.name} worker exited with {proc.returncode} during the {what}: see bench/out/runs/"
            )
        if await driver.pending() == 0:
            return time.time()
        await asyncio.sleep(0.01)
    raise RuntimeError(f"{driver.name}: messages still pending after {timeout:.0f}s ({what})")


async def run(cq: Casque, plan: Plan, best: dict[str, Any]) -> dict[str, Any]:
    c = plan.concurrency
    n = plan.peer_n
    progress(f"4. peers: {n:,} no-op tasks each, concurrency {c}, one worker process each, {plan.peer_rounds} round(s)")
    results: list[RunResult] = []

    async def casque_run(tag: str, rate: float | None = None) -> RunResult:
        r = await run_casque(
            cq,
            n if rate is None else int(rate * plan.equal_seconds),
            best["consumers"],
            best["batch_size"],
            label=f"peers_casque_{tag}",
            concurrency=c,
            rate=rate,
        )
        progress(
            f"  {'casque':<13} {r.throughput:8.0f} msg/s  p50 {r.latency.p50:8.1f} ms  p99 {r.latency.p99:8.1f} ms  "
            f"({tag})"
        )
        return r

    peers = drivers(c)
    with redis_server() as redis_proc, postgres_server() as pg_pid:
        for d in peers:
            await d.open()
            if d.database == "postgres":  # a backend per connection: read them when asked
                d.server_pids = lambda pid=pg_pid: children_of(pid)  # type: ignore[method-assign]
            else:
                d.server_pids = lambda pid=redis_proc.pid: [pid]  # type: ignore[method-assign]
        try:
            for rnd in range(1, plan.peer_rounds + 1):  # casque, then each peer, round after round
                results.append(await casque_run(f"round{rnd}"))
                for d in peers:
                    r = await run_peer(d, n, label=f"{d.name}_round{rnd}")
                    results.append(r)
                    progress(
                        f"  {d.name:<13} {r.throughput:8.0f} msg/s  p50 {r.latency.p50:8.1f} ms  p99 "
                        f"{r.latency.p99:8.1f} ms  "
                        f"(sent at {r.send_rate:.0f}/s, round {rnd})"
                    )
            results.append(await casque_run("last"))
            mean = {
                name: sum(r.throughput for r in results if r.system == name)
                / sum(1 for r in results if r.system == name)
                for name in ["casque"] + [d.name for d in peers]
            }
            slowest = min(
                tp for name, tp in mean.items() if name != "casque"
            )  # issue 15: half the slowest *peer's* maximum
            equal_rate = max(20.0, round(slowest / 2))
            progress(
                f"  equal load: every system offered {equal_rate:.0f} msg/s for {plan.equal_seconds:.0f}s (half the "
                "slowest peer's mean)"
            )
            equal: list[RunResult] = [await casque_run("equal", rate=equal_rate)]
            for d in peers:
                r = await run_peer(d, int(equal_rate * plan.equal_seconds), rate=equal_rate, label=f"{d.name}_equal")
                equal.append(r)
                progress(
                    f"  {d.name:<13} p50 {r.latency.p50:8.1f} ms  p95 {r.latency.p95:8.1f} ms  p99 "
                    f"{r.latency.p99:8.1f} ms  max {r.latency.max:8.1f} ms"
                )
        finally:
            for d in peers:
                await d.close()
    return {
        "n": n,
        "concurrency": c,
        "rounds": plan.peer_rounds,
        "systems": ["casque"] + [d.name for d in peers],
        "runs": [r.as_dict() for r in results],
        "mean_throughput": mean,
        "casque_throughput": mean["casque"],
        "ratios": {name: mean["casque"] / tp for name, tp in mean.items() if name != "casque"},
        "equal_rate": equal_rate,
        "equal": [r.as_dict() for r in equal],
        "cdf": {r.system: cdf_points(r.samples_ms, 200) for r in equal},
    }

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

This module holds the runner (``run``, ``run_peer``); the drivers live beside it: bench/peers_driver.py
(the interface), peers_redis.py (Celery, arq, Dramatiq) and peers_postgres.py (pgqueuer, procrastinate),
re-exported here as before the split.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from daemon.engine.client import Casque

from .casque_run import RunResult, run_casque
from .env import ROOT, cpu_seconds, out_dir, progress
from .peers_driver import PeerDriver, _bin, _version
from .peers_postgres import PgQueuerDriver, ProcrastinateDriver
from .peers_redis import ArqDriver, CeleryDriver, DramatiqDriver
from .plan import Plan
from .produce import send_fast, send_paced
from .services import REDIS_PORT, children_of, pg_dsn, postgres_server, redis_server
from .stats import Latency, cdf_points

__all__ = [  # the names this module had before its drivers moved out
    "WARMUP",
    "ArqDriver",
    "CeleryDriver",
    "DramatiqDriver",
    "PeerDriver",
    "PgQueuerDriver",
    "ProcrastinateDriver",
    "_bin",
    "_version",
    "drivers",
    "run",
    "run_peer",
]

WARMUP = 200


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


@asynccontextmanager
async def serving(peers: list[PeerDriver]) -> AsyncIterator[None]:
    """Redis and PostgreSQL running, and these drivers open on them (each told which server processes to read
    the CPU of), for the body of the ``async with``."""
    with redis_server() as redis_proc, postgres_server() as pg_pid:
        for d in peers:
            await d.open()
            if d.database == "postgres":  # a backend per connection: read them when asked
                d.server_pids = lambda: children_of(pg_pid)  # type: ignore[method-assign]
            else:
                d.server_pids = lambda: [redis_proc.pid]  # type: ignore[method-assign]
        try:
            yield
        finally:
            for d in peers:
                await d.close()


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
            warmup=WARMUP,  # as every peer gets (run_peer): measured from a warm daemon, not its start
        )
        progress(
            f"  {'casque':<13} {r.throughput:8.0f} msg/s  p50 {r.latency.p50:8.1f} ms  p99 {r.latency.p99:8.1f} ms  "
            f"({tag})"
        )
        return r

    peers = drivers(c)
    async with serving(peers):
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
            name: sum(r.throughput for r in results if r.system == name) / sum(1 for r in results if r.system == name)
            for name in ["casque"] + [d.name for d in peers]
        }
        slowest = min(tp for name, tp in mean.items() if name != "casque")  # half the slowest *peer's* maximum
        equal_rate = max(20.0, round(slowest / 2))
        progress(
            f"  equal load: every system offered {equal_rate:.0f} msg/s for {plan.equal_seconds:.0f}s (half the "
            "slowest peer's mean)"
        )
        # casque's last: right after its own full-load run (casque_run("last")) the box is still busy with it, and each
        # peer's comes long after its own, so every system is measured at least one equal phase after any full load.
        equal: list[RunResult] = []
        for d in peers:
            r = await run_peer(d, int(equal_rate * plan.equal_seconds), rate=equal_rate, label=f"{d.name}_equal")
            equal.append(r)
            progress(
                f"  {d.name:<13} p50 {r.latency.p50:8.1f} ms  p95 {r.latency.p95:8.1f} ms  p99 "
                f"{r.latency.p99:8.1f} ms  max {r.latency.max:8.1f} ms"
            )
        equal.insert(0, await casque_run("equal", rate=equal_rate))
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

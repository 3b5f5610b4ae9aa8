"""Fault scenarios shared by the reliability tests (reduced size) and bench/soak.py (full size).

Each scenario runs real daemon processes against a real Cassandra, counts what was sent, what the
handlers recorded, what was lost and what ran twice, and returns the counts; the caller asserts.
"""

from __future__ import annotations

import asyncio
import random
import signal
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from daemon.engine.client import Casque
from daemon.engine.send.producer import Job
from daemon.testing.daemonproc import Daemon, records, start_daemon, until, write_config


@dataclass
class Outcome:
    sent: int
    processed: int
    lost: int
    duplicated: int
    same_attempt_twice: int
    kills: int = 0
    seconds: float = 0.0
    notes: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.notes.items())
        return (
            f"sent={self.sent} processed={self.processed} lost={self.lost} duplicated={self.duplicated} "
            f"same_attempt_twice={self.same_attempt_twice} kills={self.kills} seconds={self.seconds:.1f} {extra}"
        ).strip()


def count(sent: list[str], record: Path) -> Outcome:
    """Lost = sent but never recorded; duplicated = extra deliveries; a second delivery of the same
    attempt number would mean two consumers took the same message (a lock failure)."""
    rows = records(record)
    deliveries = Counter(r[1] for r in rows)
    attempts: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        attempts[r[1]].append(r[2])
    same = sum(len(a) - len(set(a)) for a in attempts.values())
    return Outcome(
        sent=len(sent),
        processed=len(set(deliveries) & set(sent)),
        lost=len(set(sent) - set(deliveries)),
        duplicated=sum(n - 1 for n in deliveries.values()),
        same_attempt_twice=same,
    )


async def send_all(cq: Casque, queue: str, n: int, task: str = "test.record") -> list[str]:
    sent: list[str] = []
    for start in range(0, n, 5000):
        sent += await cq.send_many(queue, [Job(task, i) for i in range(start, min(n, start + 5000))])
    return sent


async def finish(procs: list[Daemon], sent: list[str], record: Path, timeout: float) -> None:
    """Wait until every sent message was recorded, then stop the daemons gracefully (always)."""
    sent_set = set(sent)
    try:
        await until(lambda: sent_set <= {r[1] for r in records(record)}, timeout, "every message processed")
    finally:
        for p in procs:
            p.signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)


async def kill_chaos(
    cq: Casque,
    queue: str,
    tmp: Path,
    keyspace: str,
    n: int,
    kills: int,
    daemons: int = 3,
    consumers: int = 4,
    seed: int = 7,
) -> Outcome:
    """``daemons`` processes work through ``n`` messages while a loop kill -9s a random one
    ``kills`` times (restarting it at once). Timeout 3 s, so the killed work comes back quickly."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    await cq.create_queue(queue, shards=8, timeout=3, max_attempts=50)
    sent = await send_all(cq, queue, n)
    record = tmp / "record.txt"
    cfg = write_config(tmp / "chaos.toml", keyspace, [queue], consumers=consumers, batch_size=50)
    procs: list[Daemon] = [start_daemon(cfg, record, tmp / f"log-{i}") for i in range(daemons)]
    rng = random.Random(seed)
    done = 0
    try:
        per_kill = max(1, n // (kills + 2))
        for k in range(kills):
            target = (k + 1) * per_kill
            await until(partial(_processed, record, target), 300, f"{target} processed before kill {k + 1}")
            victim = rng.randrange(daemons)
            procs[victim].kill9()
            procs[victim] = start_daemon(cfg, record, tmp / f"log-{victim}")
            done += 1
    finally:
        await finish(procs, sent, record, 300)
    out = count(sent, record)
    out.kills = done
    out.seconds = loop.time() - started
    return out


async def race(
    cq: Casque, queue: str, tmp: Path, keyspace: str, n: int, offsets: list[int], consumers: int, shards: int
) -> Outcome:
    """Daemons (one per offset, clocks skewed by it) race over few shards; the 10-minute timeout
    outlasts the run, so any second delivery is a violation of the lock protocol."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    await cq.create_queue(queue, shards=shards, timeout=600, max_attempts=3)
    sent = await send_all(cq, queue, n)
    record = tmp / "record.txt"
    cfg = write_config(tmp / "race.toml", keyspace, [queue], consumers=consumers, batch_size=50)
    procs = [
        start_daemon(cfg, record, tmp / f"log-{i}", env={"CASQUE_CLOCK_OFFSET_MS": str(off)})
        for i, off in enumerate(offsets)
    ]
    await finish(procs, sent, record, 600)
    out = count(sent, record)
    out.seconds = loop.time() - started
    rows = await cq.db.run_all(
        f"SELECT daemon, contention, received FROM {keyspace}.daemon_stats WHERE queue = %s", [queue]
    )
    latest: dict[str, tuple[int, int]] = {}
    for r in rows:  # newest first: keep each daemon's newest row
        latest.setdefault(r.daemon, (r.contention or 0, r.received or 0))
    out.notes["lock_contention"] = sum(c for c, _ in latest.values())
    return out


def _processed(record: Path, target: int) -> bool:
    """At least ``target`` messages are in the handlers' record."""
    return len(records(record)) >= target

"""Creating many queues: the old path (an LWT per queue) beside the claim protocol, in one run.

    python -m bench.queue_creates [--count N] [--old-count N] [--runs R] [--chunk C] [--concurrency K]

Both paths run in a keyspace of this bench's own (``casque_bench_creates``), created here and dropped
at the end: never ``casque``'s or the tests'. Each run creates ``--count`` new tiny queues (1 x 1)
by the new path (``QueueStore.create_many``: claim, read, write a chunk at a time,
engine/queues/bulk_create.py) and ``--old-count`` by the old one, reproduced here as it was
(``INSERT ... IF NOT EXISTS`` then the ``queue_names`` write, 64 queues in flight). Runs alternate
old and new so both see the same box; the figures are each path's median of the runs, the rate in
queues/s and the p99 of one unit (one chunk for the new path, one queue for the old path), and
where the time goes: this client's CPU and the local Cassandra node's CPU (from /proc, the JVM
running ``CassandraDaemon``; other work against the node counts too on a shared box) per 1,000
queues, beside the box's load average.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from daemon.base.config import Settings
from daemon.engine.client import Casque
from daemon.engine.queues.bulk_create import CHUNK, CONCURRENCY
from daemon.engine.queues.names import partition_of
from daemon.engine.queues.settings import settings_from_defaults
from daemon.engine.storage.db import Database
from daemon.engine.storage.schema import apply_schema

KEYSPACE = "casque_bench_creates"
OLD_CONCURRENCY = 64
_OLD_INSERT = (
    "INSERT INTO {ks}.queues (name, shards, buckets, bucket_seconds, lock_ttl_ms, timeout_ms, max_attempts, "
    "retention_s, max_payload_bytes, priorities, history, expire_after_s, fifo, created_at, updated_at) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) IF NOT EXISTS"
)


def node_pid() -> int | None:
    """The local Cassandra node's pid (the JVM whose command line names CassandraDaemon), if any."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"CassandraDaemon" in (entry / "cmdline").read_bytes():
                    return int(entry.name)
            except OSError:
                continue
    return None


def cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of ``pid`` so far (0 without one)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed(path: Any, count: int, pid: int | None) -> dict[str, float]:
    """Run one path and add its CPU per 1,000 queues (this client's, the node's) and the load average."""
    node, client = cpu_s(pid), time.process_time()
    result: dict[str, float] = await path
    result["client_cpu_ms_per_1k"] = (time.process_time() - client) * 1e6 / count
    result["node_cpu_ms_per_1k"] = (cpu_s(pid) - node) * 1e6 / count
    result["load"] = os.getloadavg()[0]
    return result


def p99(samples: list[float]) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * 0.99))] if s else 0.0


async def new_path(cq: Casque, names: list[str], chunk: int, concurrency: int) -> dict[str, float]:
    """The claim protocol, as ``create_queues`` runs it (its counts carry each chunk's time)."""
    defaults = cq.settings.queue_defaults
    started = time.monotonic()
    counts = await cq.stores.queues.create_many(
        (settings_from_defaults(n, defaults, shards=1, buckets=1) for n in names),
        concurrency=concurrency,
        chunk=chunk,
    )
    seconds = time.monotonic() - started
    assert counts.created == len(names), f"created {counts.created} of {len(names)}"
    return {"queues_per_s": len(names) / seconds, "p99_ms": p99(counts.chunk_s) * 1000, "seconds": seconds}


async def old_path(cq: Casque, names: list[str]) -> dict[str, float]:
    """The path before issue 28: one LWT per queue and one plain write of its name, 64 in flight."""
    db, ks = cq.db, cq.settings.cassandra.keyspace
    insert = db.prepare(_OLD_INSERT.format(ks=ks))
    index = db.prepare(f"INSERT INTO {ks}.queue_names (prefix, name) VALUES (?, ?)")
    defaults = cq.settings.queue_defaults
    source = iter(names)
    took: list[float] = []

    async def worker() -> None:
        for name in source:
            qs = settings_from_defaults(name, defaults, shards=1, buckets=1)
            began, now = time.monotonic(), db.clock.now_ms()
            values = [qs.name, 1, 1, qs.bucket_seconds, qs.lock_ttl_ms, qs.timeout_ms, qs.max_attempts]
            values += [qs.retention_s, qs.max_payload_bytes, {0}, False, 0, None, now, now]
            rows = await db.run(insert, values)
            assert rows[0].applied
            await db.run(index, [partition_of(name), name])
            took.append(time.monotonic() - began)

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(OLD_CONCURRENCY)))
    seconds = time.monotonic() - started
    return {"queues_per_s": len(names) / seconds, "p99_ms": p99(took) * 1000, "seconds": seconds}


def names_of(prefix: str, count: int) -> list[str]:
    tag = uuid.uuid4().hex[:6]
    return [f"{prefix}-{tag}-{i:07d}" for i in range(count)]


def settings_for(keyspace: str) -> Settings:
    s = copy.deepcopy(Settings())
    s.cassandra.keyspace = keyspace
    return s


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    settings = settings_for(KEYSPACE)
    db = Database(settings.cassandra).connect()
    try:
        apply_schema(db, KEYSPACE, settings.schema)
    finally:
        db.close()
    cq = await Casque.connect(settings)
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    pid = node_pid()
    try:
        for run in range(args.runs):
            if args.old_count:
                old = old_path(cq, names_of("old", args.old_count))
                runs["old"].append(await timed(old, args.old_count, pid))
                print(f"run {run + 1} old: {_line(runs['old'][-1])}", flush=True)
            new = new_path(cq, names_of("new", args.count), args.chunk, args.concurrency)
            runs["new"].append(await timed(new, args.count, pid))
            print(f"run {run + 1} new: {_line(runs['new'][-1])}", flush=True)
    finally:
        await cq.close()
        if not args.keep:
            drop(settings)
    return {path: _median(r) for path, r in runs.items() if r}


def drop(settings: Settings) -> None:
    """Drop this bench's own keyspace (the name is this module's constant, never casque's or the tests')."""
    db = Database(settings.cassandra).connect()
    try:
        db.execute(f"DROP KEYSPACE IF EXISTS {KEYSPACE}")
    finally:
        db.close()


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def _line(r: dict[str, float]) -> str:
    return (
        f"{r['queues_per_s']:,.0f} queues/s, p99 of one unit {r['p99_ms']:.0f} ms, {r['seconds']:.1f} s; CPU per 1,000"
        f" queues: client {r['client_cpu_ms_per_1k']:.0f} ms, node {r['node_cpu_ms_per_1k']:.0f} ms;"
        f" load {r['load']:.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.queue_creates", description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=100_000, help="queues created by the new path per run")
    p.add_argument("--old-count", type=int, default=None, help="queues created by the old path per run (--count)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--chunk", type=int, default=CHUNK, help=f"names per chunk (default {CHUNK})")
    p.add_argument("--concurrency", type=int, default=CONCURRENCY, help=f"chunks in flight (default {CONCURRENCY})")
    p.add_argument("--keep", action="store_true", help="keep the bench keyspace (to look at it)")
    args = p.parse_args(argv)
    if args.old_count is None:
        args.old_count = args.count
    result = asyncio.run(measure(args))
    print(f"median of {args.runs} runs:")
    for path, r in result.items():
        print(f"  {path}: {_line(r)}")
    if "old" in result:
        print(f"  new / old: {result['new']['queues_per_s'] / result['old']['queues_per_s']:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

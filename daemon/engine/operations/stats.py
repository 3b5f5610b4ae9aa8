"""Queue statistics read from Cassandra, cheaply: ``casque stats``.

Per queue, every shard row is read from its cursors onward (buckets x shards reads, each bounded by
the row's *live* messages, never by its history), so the counts of waiting, scheduled and in-flight
messages are exact at the moment each row is read. Throughput is an estimate: the sum over daemons
of their acked-counter deltas in their periodic stats rows (written every 10 s).
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

from daemon.base.model import QueueSettings
from daemon.engine.observe.behind import in_flight_behind
from daemon.engine.observe.samples import recent_rates
from daemon.engine.storage.table import STATE_BACKOFF, STATE_IN_FLIGHT, all_rows
from daemon.engine.stores import Stores

STATS_EVERY_S = 10.0
THROUGHPUT_WINDOW_MS = 120_000


@dataclass
class QueueStats:
    queue: str
    waiting_due: int = 0
    scheduled: int = 0
    in_flight: int = 0
    poisoned: int = 0
    oldest_due_age_s: float | None = None
    shards: int = 0
    per_shard: list[int] = field(default_factory=list)
    skew: float | None = None
    acked_per_s: float | None = None
    daemons: int = 0
    exact: list[str] = field(
        default_factory=lambda: [
            "waiting_due",
            "scheduled",
            "in_flight",
            "poisoned",
            "oldest_due_age_s",
            "per_shard",
            "skew",
        ]
    )
    estimated: list[str] = field(default_factory=lambda: ["acked_per_s (from daemon stats rows, every 10 s)"])

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


Cursors = dict[tuple[int, int], dict[int, int]]


@dataclass
class Depth:
    """Live messages of a queue at one moment, counted exactly from its shard rows."""

    waiting_due: int = 0
    scheduled: int = 0
    in_flight: int = 0
    oldest_due_ms: int | None = None
    per_shard: list[int] = field(default_factory=list)


async def count_depth(
    stores: Stores, qs: QueueSettings, now: int, parallel: int = 32, cursors: Cursors | None = None, pace_s: float = 0.0
) -> Depth:
    """Read every shard row (of every layout, after a reshard) from its cursors (buckets x shards
    reads) and count what is live. ``cursors`` (kept by a caller that reads the queue repeatedly,
    like the gauges) saves the cursor read of each row: one read per row and lane instead of two.
    ``pace_s``: a pause after each row, so a count running beside takes trickles instead of
    bursting (the count is then spread over rows x pace_s / parallel seconds)."""
    d = Depth(per_shard=[0] * qs.span()[0])
    sem = asyncio.Semaphore(parallel)

    async def one_row(bucket: int, shard: int) -> None:
        async with sem:
            rows = await live_rows(stores, qs, bucket, shard, cursors)
            if pace_s:
                await asyncio.sleep(pace_s)
        for r in rows:
            if r.state == STATE_IN_FLIGHT:
                d.in_flight += 1
            elif r.state == STATE_BACKOFF and (r.visible_at or 0) > now:  # in place: a retry waits where it is
                d.scheduled += 1
            elif r.due <= now:
                d.waiting_due += 1
                d.oldest_due_ms = r.due if d.oldest_due_ms is None else min(d.oldest_due_ms, r.due)
            else:
                d.scheduled += 1
        d.per_shard[shard] += len(rows)

    await asyncio.gather(*(one_row(b, s) for b, s in all_rows(qs)))
    return d


async def queue_stats(
    stores: Stores, queue: str, now_ms: int | None = None, parallel: int = 32, cursors: Cursors | None = None
) -> QueueStats:
    qs = await stores.queues.get(queue, fresh=True)
    now = now_ms if now_ms is not None else stores.clock.now_ms()
    d = await count_depth(stores, qs, now, parallel, cursors)
    st = QueueStats(
        queue=queue,
        waiting_due=d.waiting_due,
        scheduled=d.scheduled,
        in_flight=d.in_flight,
        shards=qs.shards,
        per_shard=d.per_shard,
    )
    st.poisoned = await stores.poison.count(queue)
    st.oldest_due_age_s = (now - d.oldest_due_ms) / 1000 if d.oldest_due_ms is not None else None
    total = sum(st.per_shard)
    st.skew = round(max(st.per_shard) / (total / len(st.per_shard)), 3) if total else None
    st.acked_per_s, st.daemons = await _throughput(stores, queue, now)
    return st


async def live_rows(
    stores: Stores, qs: QueueSettings, bucket: int, shard: int, known: Cursors | None = None
) -> list[Any]:
    """Live messages of one row: read from each lane's cursor, so consumed history is never scanned.
    A cursor remembered from an earlier read is as good as the current one (nothing live is ever
    behind a cursor; it only rescans what was consumed since), so with ``known`` it is not re-read."""
    cursors = known.get((bucket, shard)) if known is not None else None
    if cursors is None:
        static = await stores.db.run(stores.table.read_cursors, [qs.name, bucket, shard])
        cursors = dict(static[0].cursors or {}) if static else {}
    out: list[Any] = []
    seen = dict(cursors)
    safe = stores.clock.now_ms() - stores.settings.worker.clock_tolerance_ms
    for rank in qs.ranks():
        rows = await stores.db.run_all(stores.table.count_from, [qs.name, bucket, shard, rank, cursors.get(rank, 0)])
        for r, value in (rows[0].cursors or {}).items() if rows else ():
            seen[r] = max(seen.get(r, 0), value)
        if not rows:  # nothing live in this lane: the consumers' own rule moves its cursor to now - tolerance
            seen[rank] = max(seen.get(rank, 0), safe)
        out += [r for r in rows if r.task is not None]  # not a standard queue's check entry or ghost (take/flights.py)
        out += await in_flight_behind(
            stores.db, stores.table, (qs.name, bucket, shard, rank), cursors.get(rank, 0), rows
        )
    if known is not None:
        known[(bucket, shard)] = seen
    return out


async def _throughput(stores: Stores, queue: str, now: int) -> tuple[float | None, int]:
    rows = await stores.samples.read(queue, now - THROUGHPUT_WINDOW_MS)
    return recent_rates(rows, now, THROUGHPUT_WINDOW_MS)[1], len({r.daemon for r in rows})


def daemon_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"

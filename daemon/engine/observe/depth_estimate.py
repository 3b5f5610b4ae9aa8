"""A queue's depth (waiting, in flight, delayed) for what machines poll (SQS's Approximate*
counts: an autoscaler asks every few seconds), reading a bounded number of rows per call whatever
the queue holds. ``casque stats`` (engine/operations/stats.py) stays exact: it reads every live message.

Each call reads, for every priority lane of every shard row, at most ``HEAD`` rows from the lane's
cursor (one request per lane). A lane with fewer rows than that is counted exactly, now: a small
queue's counts are exact. A lane that fills its head is *large*: its count is the one a background
pass made (every live row of the lane, read in pages and paced at ``BUDGET`` rows per second, so it
never bursts on the node), started by a call that found it missing or older than ``REFRESH_S``
seconds, at most one pass per queue at a time per process. Until the first pass of a large lane
ends, the lane reports what its head saw (a lower bound).

Why not extrapolate from samples: rows sort by (due, id) and a batch send puts hundreds of rows
on one due millisecond, so a lane is clumps with gaps between them, and a density sampled on a probe
can be off by an order of magnitude. Counting is exact; only its age is bounded.

Bounds, with R = shard rows (buckets x shards, of every layout) and P = priority lanes:
  - per call: requests <= R (cursors, first call in a process) + R x P; rows <= R + R x P x HEAD;
  - background: at most BUDGET rows/s per queue being refreshed, one pass per REFRESH_S at most;
  - error: a large lane's count is its exact count at its pass, so it lags by at most REFRESH_S
    plus the pass's duration (its rows / BUDGET: 5 s for 100,000 rows, 50 s for 1M); SQS's own
    counts are approximate and may lag about a minute.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from daemon.base.logs import get_logger
from daemon.base.lru import Lru
from daemon.base.model import QueueSettings
from daemon.engine.observe.behind import in_flight_behind
from daemon.engine.storage.db import Database
from daemon.engine.storage.paging import pages
from daemon.engine.storage.table import STATE_IN_FLIGHT, MessageTable, all_rows

HEAD = 32
REFRESH_S = 5.0
BUDGET = 20_000  # rows per second a background pass reads
PAGE = 1000
log = get_logger("casque.depth")
Lane = tuple[str, int, int, int]  # queue, bucket, shard, rank


@dataclass
class Counts:
    waiting: float = 0.0
    in_flight: float = 0.0
    delayed: float = 0.0

    def add(self, other: Counts) -> None:
        self.waiting += other.waiting
        self.in_flight += other.in_flight
        self.delayed += other.delayed


@dataclass
class Estimate(Counts):
    """The depth, with what it cost: ``requests`` and ``rows`` read by this call (not by a
    background pass), ``exact`` when every lane was read to its end by this call."""

    exact: bool = True
    requests: int = 0
    rows: int = 0
    counted_at: int | None = None  # oldest background pass used (epoch ms), if any


class DepthEstimator:
    """One per process: keeps each row's cursors (as good as the current ones: nothing live is ever
    behind a cursor) and each large lane's last count."""

    def __init__(self, db: Database, table: MessageTable, lanes_cached: int = 100_000, parallel: int = 32) -> None:
        self.db = db
        self.table = table
        self.parallel = parallel
        self._cursors: Lru[tuple[str, int, int], dict[int, int]] = Lru(lanes_cached)
        self._large: Lru[Lane, tuple[float, int, Counts]] = Lru(lanes_cached)  # lane -> (monotonic, epoch ms, counts)
        self._passes: dict[str, asyncio.Task[None]] = {}

    async def estimate(self, qs: QueueSettings, now: int) -> Estimate:
        est = Estimate()
        sem = asyncio.Semaphore(self.parallel)
        large: dict[Lane, Counts] = {}

        async def row(bucket: int, shard: int) -> None:
            async with sem:
                cursors = await self._row_cursors(qs.name, bucket, shard, est)
                for rank in qs.ranks():
                    lane = (qs.name, bucket, shard, rank)
                    counts, whole = await self._head(est, lane, cursors.get(rank, 0), now)
                    if whole:
                        est.add(counts)
                    else:
                        large[lane] = counts

        await asyncio.gather(*(row(b, s) for b, s in all_rows(qs)))
        if large:
            self._use_passes(est, large, now)
            self._refresh(qs, list(large))
        return est

    def passes_running(self) -> int:
        """Background passes under way (their reads are not the calls')."""
        return sum(1 for t in self._passes.values() if not t.done())

    async def _row_cursors(self, queue: str, bucket: int, shard: int, est: Estimate) -> dict[int, int]:
        known = self._cursors.get((queue, bucket, shard))
        if known is None:
            static = await self.db.run(self.table.read_cursors, [queue, bucket, shard])
            est.requests, est.rows = est.requests + 1, est.rows + len(static)
            known = dict(static[0].cursors or {}) if static else {}
            self._cursors.put((queue, bucket, shard), known)
        return known

    async def _head(self, est: Estimate, lane: Lane, cursor: int, now: int) -> tuple[Counts, bool]:
        """Count the lane's first HEAD rows; and whether that was all of it."""
        queue, bucket, shard, rank = lane
        head = await self.db.run(self.table.count_head, [queue, bucket, shard, rank, cursor, HEAD])
        est.requests, est.rows = est.requests + 1, est.rows + len(head)
        if head and head[0].cursors:
            self._cursors.put((queue, bucket, shard), dict(head[0].cursors))
        behind = await in_flight_behind(self.db, self.table, lane, cursor, head)  # in place (observe/behind.py)
        return classify(head + behind, now), len(head) < HEAD

    def _use_passes(self, est: Estimate, large: dict[Lane, Counts], now: int) -> None:
        est.exact = False
        for lane, head in large.items():
            found = self._large.get(lane)
            est.add(found[2] if found else head)  # no pass yet: what the head saw, a lower bound
            if found:
                est.counted_at = found[1] if est.counted_at is None else min(est.counted_at, found[1])

    def _refresh(self, qs: QueueSettings, large: list[Lane]) -> None:
        """Start a background pass over the large lanes if one is due and none is running."""
        running = self._passes.get(qs.name)
        if running is not None and not running.done():
            return
        stale = [
            lane for lane in large if (hit := self._large.get(lane)) is None or time.monotonic() - hit[0] > REFRESH_S
        ]
        if stale:
            self._passes[qs.name] = asyncio.create_task(self._pass(qs.name, stale))

    async def _pass(self, queue: str, lanes: list[Lane]) -> None:
        try:
            for lane in lanes:
                await self._count_lane(lane)
        except Exception as exc:  # a background pass must never take the server down; the next call starts another
            log.warning("depth_pass_failed", queue=queue, error=str(exc))
        finally:
            self._passes.pop(queue, None)

    async def _count_lane(self, lane: Lane) -> None:
        queue, bucket, shard, rank = lane
        cursor = (self._cursors.get((queue, bucket, shard)) or {}).get(rank, 0)
        at = int(time.time() * 1000)
        counts = Counts()
        async for rows in pages(self.db, self.table.count_from, [queue, bucket, shard, rank, cursor], size=PAGE):
            counts.add(classify(rows + await in_flight_behind(self.db, self.table, lane, cursor, rows), at))
            await asyncio.sleep(len(rows) / BUDGET)  # the pass's rate limit, not a wait for a condition
        self._large.put(lane, (time.monotonic(), at, counts))


def classify(rows: list[Any], now: int) -> Counts:
    """In flight while its visibility lasts (an in-flight column past its due is visible again:
    the next receive takes it, so SQS counts it in ApproximateNumberOfMessages), else waiting if
    due, else delayed. ``casque stats`` counts in flight by state alone (it is for people)."""
    c = Counts()
    for r in rows:
        if r.task is None:  # a standard queue's check entry or ghost (engine/take/flights.py), not a message
            continue
        visible = (
            r.visible_at if r.visible_at is not None else r.due
        )  # a FIFO message is in flight in place (engine/take/fifo.py)
        if r.state == STATE_IN_FLIGHT and visible > now:
            c.in_flight += 1
        elif visible <= now:
            c.waiting += 1
        else:
            c.delayed += 1
    return c

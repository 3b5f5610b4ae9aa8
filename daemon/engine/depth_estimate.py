"""A queue's depth (waiting, in flight, delayed) from a bounded number of rows, whatever it holds:
what machines poll (SQS's Approximate* counts; an autoscaler asks every few seconds).

``casque stats`` (engine/stats.py) reads every live message: exact, and for a 1M-message queue 1M
rows per call. Here each priority lane of each shard row is read from its cursor for at most
``HEAD`` rows. A lane with fewer is counted exactly (so a small queue's counts are exact). A lane
with more is estimated past its head, in two ranges split at now (due <= now: waiting; due > now:
delayed or in flight): the last due time of the range is read backwards (one row), the range is cut
into ``PIECES`` equal stretches of due time, and each stretch is probed for ``PROBE`` rows from its
start. A probe that ends inside its stretch counts it exactly; one that fills up extrapolates at
its own density to the stretch's end, and splits it between in flight and the rest in the
proportion the probe saw. Sampling each stretch (not only the head) keeps a queue filled in bursts
close: the error is that of a density assumed even within a stretch (measured in
tests/test_sqs_counts.py, and in docs/sqs.md).

Bound, per call, with R = shard rows (buckets x shards, of every layout) and P = priority lanes:
    requests <= R (cursors; only the first call in a process) + R x P x (1 + 2 x (1 + PIECES))
    rows     <= R + R x P x (HEAD + 2 x (1 + PIECES x PROBE))
A lane's cursor comes back with its head read (the static column), so later calls start from it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from daemon.base.lru import Lru
from daemon.base.model import QueueSettings
from daemon.engine.db import Database
from daemon.engine.table import STATE_IN_FLIGHT, MessageTable, all_rows

HEAD = 100
PIECES = 4
PROBE = 50
FAR = 1 << 62  # a due time past every message


@dataclass
class Estimate:
    """Approximate depth; ``exact`` when every lane was read to its end."""

    waiting: float = 0.0
    in_flight: float = 0.0
    delayed: float = 0.0
    exact: bool = True

    def add(self, in_flight: float, other: float, past: bool) -> None:
        self.in_flight += in_flight
        if past:
            self.waiting += other
        else:
            self.delayed += other


class DepthEstimator:
    """One per process: remembers each row's cursors (as good as the current ones: nothing live is
    ever behind a cursor) so a lane costs its reads only."""

    def __init__(self, db: Database, table: MessageTable, rows_cached: int = 100_000, parallel: int = 32) -> None:
        self.db = db
        self.table = table
        self.parallel = parallel
        self._cursors: Lru[tuple[str, int, int], dict[int, int]] = Lru(rows_cached)

    async def estimate(self, qs: QueueSettings, now: int) -> Estimate:
        est = Estimate()
        sem = asyncio.Semaphore(self.parallel)

        async def row(bucket: int, shard: int) -> None:
            async with sem:
                cursors = await self._row_cursors(qs.name, bucket, shard)
                for rank in qs.ranks():
                    await self._lane(est, (qs.name, bucket, shard), rank, cursors.get(rank, 0), now)

        await asyncio.gather(*(row(b, s) for b, s in all_rows(qs)))
        return est

    async def _row_cursors(self, queue: str, bucket: int, shard: int) -> dict[int, int]:
        known = self._cursors.get((queue, bucket, shard))
        if known is None:
            static = await self.db.run(self.table.read_cursors, [queue, bucket, shard])
            known = dict(static[0].cursors or {}) if static else {}
            self._cursors.put((queue, bucket, shard), known)
        return known

    async def _lane(self, est: Estimate, pk: tuple[str, int, int], rank: int, cursor: int, now: int) -> None:
        head = await self.db.run(self.table.count_head, [*pk, rank, cursor, HEAD])
        if head and head[0].cursors:
            self._cursors.put(pk, dict(head[0].cursors))
        for r in head:
            in_flight = r.state == STATE_IN_FLIGHT
            est.add(1 if in_flight else 0, 0 if in_flight else 1, r.due <= now)
        if len(head) < HEAD:
            return
        est.exact = False
        last = head[-1].due
        if last < now:
            await self._range(est, pk, rank, last, now, True)
        await self._range(est, pk, rank, max(last, now), FAR, False)

    async def _range(self, est: Estimate, pk: tuple[str, int, int], rank: int, low: int, high: int, past: bool) -> None:
        """Estimate the lane's messages with low < due <= high: its last due time, then PIECES probes."""
        found = await self.db.run(self.table.last_due, [*pk, rank, low, high])
        if not found:
            return
        end = found[0].due
        cuts = [low + (end - low) * i // PIECES for i in range(PIECES)] + [end]
        probes = await asyncio.gather(*(self.db.run(self.table.count_span, [*pk, rank, cuts[i], end, PROBE]) for i in range(PIECES)))
        for i, rows in enumerate(probes):
            in_flight, other = _piece(rows, cuts[i + 1], last_piece=i == PIECES - 1)
            est.add(in_flight, other, past)


def _piece(rows: list[Any], stop: int, last_piece: bool) -> tuple[float, float]:
    """(in flight, other) of one stretch ending at ``stop``, from a probe of its first rows."""
    inside = [r for r in rows if r.due < stop or (last_piece and r.due <= stop)]
    if not inside:
        return 0.0, 0.0
    count: float = len(inside)
    if len(rows) == len(inside) == PROBE and rows[-1].due < stop:  # the probe filled up inside: more follow
        span = max(1, inside[-1].due - inside[0].due)
        count += (len(inside) - 1) * (stop - inside[-1].due) / span
    share = sum(1 for r in inside if r.state == STATE_IN_FLIGHT) / len(inside)
    return count * share, count * (1 - share)

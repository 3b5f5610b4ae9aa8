"""The daemons' stats rows (``daemon_stats``) read as time series: the console's one-hour chart of
depth and rates, and its sent/s and acked/s columns.

Each daemon writes its cumulative counters per queue every 10 s and, about every 60 s, the queue's depth
counted exactly from its shard rows. Nothing is counted per message on a shared row. Rates come from
the difference of one daemon's counters between two of its rows, summed over daemons.

Sent/s is *derived*, not counted (producers write no stats): every message sent is either still
live (waiting, scheduled or in flight) or has left through an ack or the poison queue, so
sent = change in live messages + acked + poisoned over the same interval. A cancel or purge in
that interval makes it read low; the console labels it an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cassandra.query import UNSET_VALUE

from daemon.engine.storage.db import Database

DEPTH_EVERY_S = 60.0
_COLS = (
    "at, daemon, received, acked, retried, poisoned, timed_out, contention, empty_polls, in_flight, depth_waiting, "
    "depth_scheduled, depth_in_flight"
)


@dataclass
class Point:
    """One step of the chart: depth at its end (None when no daemon sampled it) and rates over it."""

    at: int
    waiting: int | None
    scheduled: int | None
    in_flight: int | None
    acked_per_s: float
    sent_per_s: float | None


@dataclass
class Counters:
    """A daemon's cumulative counts for one queue (the dispatcher keeps them; the stats row stores them)."""

    received: int = 0
    acked: int = 0
    retried: int = 0
    poisoned: int = 0
    timed_out: int = 0
    failed_acks: int = 0


class Samples:
    def __init__(self, db: Database, keyspace: str) -> None:
        self.db = db
        t = f"{keyspace}.daemon_stats"
        self._write = db.prepare(f"INSERT INTO {t} ({_COLS}, queue) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
        self._read = db.prepare(f"SELECT {_COLS} FROM {t} WHERE queue = ? AND at >= ?")

    async def write(
        self,
        queue: str,
        at: int,
        daemon: str,
        c: Counters,
        contention: int,
        empty_polls: int,
        in_flight: int,
        depth: tuple[int, int, int] | None = None,
    ) -> None:
        """One stats row; ``depth`` (waiting, scheduled, in flight) only when sampled (never a null)."""
        w, s, f = depth if depth is not None else (UNSET_VALUE,) * 3
        await self.db.run(
            self._write,
            [
                at,
                daemon,
                c.received,
                c.acked,
                c.retried,
                c.poisoned,
                c.timed_out,
                contention,
                empty_polls,
                in_flight,
                w,
                s,
                f,
                queue,
            ],
        )

    async def read(self, queue: str, since_ms: int) -> list[Any]:
        return await self.db.run_all(self._read.bind([queue, since_ms]))


def series(rows: list[Any], now_ms: int, window_ms: int = 3_600_000, step_ms: int = 60_000) -> list[Point]:
    """``window_ms`` of rows as points every ``step_ms``, oldest first."""
    start = now_ms - window_ms
    steps = window_ms // step_ms
    acked = [0.0] * steps
    poisoned = [0.0] * steps
    depth: list[tuple[int, int, int, int] | None] = [
        None
    ] * steps  # (at, waiting, scheduled, in flight), latest in the step
    for points in _by_daemon(rows).values():
        for prev, cur in zip(points, points[1:]):
            i = (cur.at - start - 1) // step_ms  # step i covers (start + i*step, start + (i+1)*step]
            if 0 <= i < steps and cur.at > prev.at:
                acked[i] += max(0, (cur.acked or 0) - (prev.acked or 0))
                poisoned[i] += max(0, (cur.poisoned or 0) - (prev.poisoned or 0))
        for r in points:
            i = (r.at - start - 1) // step_ms
            if 0 <= i < steps and r.depth_waiting is not None and (depth[i] is None or depth[i][0] < r.at):
                depth[i] = (r.at, r.depth_waiting, r.depth_scheduled or 0, r.depth_in_flight or 0)
    out: list[Point] = []
    last_live: int | None = None
    for i in range(steps):
        d = depth[i]
        live = sum(d[1:]) if d else None
        sent = None
        if live is not None and last_live is not None:
            sent = max(0.0, (live - last_live + acked[i] + poisoned[i]) / (step_ms / 1000))
        out.append(
            Point(
                start + (i + 1) * step_ms,
                d[1] if d else None,
                d[2] if d else None,
                d[3] if d else None,
                acked[i] / (step_ms / 1000),
                sent,
            )
        )
        last_live = live if live is not None else last_live
    return out


def recent_rates(rows: list[Any], now_ms: int, window_ms: int = 300_000) -> tuple[float | None, float | None]:
    """(sent/s, acked/s) over the last ``window_ms``: None where the rows can't tell (acked/s needs
    two rows of one daemon; sent/s also needs two depth samples)."""
    recent = [r for r in rows if r.at >= now_ms - window_ms]
    acked = poisoned = 0.0
    counted = 0
    for points in _by_daemon(recent).values():
        first, last = points[0], points[-1]
        if last.at > first.at:
            span = (last.at - first.at) / 1000
            acked += max(0, (last.acked or 0) - (first.acked or 0)) / span
            poisoned += max(0, (last.poisoned or 0) - (first.poisoned or 0)) / span
            counted += 1
    if not counted:
        return None, None
    sampled = sorted((r for r in recent if r.depth_waiting is not None), key=lambda r: r.at)
    if len(sampled) < 2 or sampled[-1].at == sampled[0].at:
        return None, round(acked, 1)
    first, last = sampled[0], sampled[-1]
    change = (_live(last) - _live(first)) / ((last.at - first.at) / 1000)
    return round(max(0.0, change + acked + poisoned), 1), round(acked, 1)


def _live(r: Any) -> int:
    return (r.depth_waiting or 0) + (r.depth_scheduled or 0) + (r.depth_in_flight or 0)


def _by_daemon(rows: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in rows:
        out.setdefault(r.daemon, []).append(r)
    for points in out.values():
        points.sort(key=lambda r: r.at)
    return out

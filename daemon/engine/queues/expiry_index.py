"""The expiry index: which expiring queues can fall due now, without reading the ones that can't.

``queue_expiry`` says, per expiring queue, when it was last used; reading all of it every minute
costs in proportion to the queues that exist. ``queue_expiry_due`` holds a *candidate* per queue at
the time its expiry could fall due (``active_at + expire_after``), partitioned by day and ordered by
that time, so the reaper (engine/operations/reaper.py) reads only the slice due since its last pass:
about one bounded read a minute when nothing is due, whatever the number of queues.

What keeps it right:
  - the invariant: every ``queue_expiry`` row has a candidate due no later than its real due time.
    The create path writes one at ``created + expire_after`` (engine/queues/bulk_create.py, with the chunk); sends and
    receives move ``active_at`` later but write nothing here: the candidate is then early, and the
    reaper, which re-reads the queue's row before acting, moves it to the new due time (one write).
    A busy queue thus costs the reaper one read and two writes per ``expire_after``, not one per
    activity mark (every 5 minutes per process), and writers that do not know this table (an older
    version) stay covered;
  - a candidate is written due at least ``expire_after`` (>= 60 s) after its writer's now, so a
    reaper that already swept past it could miss it only with clocks more than 60 s apart;
  - the marker row (day -1, named for the reaper's lease) says a reaper swept within
    ``LOOKBACK_DAYS``; a reaper taking over reads that far back. Without it (the first pass after
    the upgrade that added this table, or no reaper for that long) the reaper first writes a
    candidate for every ``queue_expiry`` row: the one full read, once (``backfill``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from cassandra.query import PreparedStatement

from daemon.base.logs import get_logger
from daemon.engine.storage.db import Database
from daemon.engine.storage.paging import pages

log = get_logger("casque.expiry")
DAY_MS = 86_400_000
LOOKBACK_DAYS = 2  # a reaper taking over reads this far back; the marker lives this long
MARKER_DAY = -1  # the partition holding the "swept lately" marker (due days are >= 0)
MARKER_EVERY_MS = 3_600_000  # a reaper renews the marker at most this often
SCHEDULE_BATCH = 100  # candidates per batch of a bulk create (a batch's size stays far below the node's limits)
BACKFILL_WRITES = 64  # candidate writes in flight at once during a backfill


def day_of(due_at: int) -> int:
    return due_at // DAY_MS


class ExpiryIndex:
    """Statements are prepared on first use: a process on a keyspace whose schema predates this
    table still starts (its reaper logs that the index is missing until ``casque schema apply``)."""

    def __init__(self, db: Database, keyspace: str, marker: str = "queue_expiry") -> None:
        self.db = db
        self.marker = marker  # the marker's row: the reaper's lease name (a test's own lease, its own marker)
        self.table = f"{keyspace}.queue_expiry_due"
        self._all = f"SELECT name, expire_after_s, active_at FROM {keyspace}.queue_expiry"

    def _q(self, cql: str) -> PreparedStatement:
        return self.db.prepare(cql.format(t=self.table, marker_day=MARKER_DAY, ttl=LOOKBACK_DAYS * 86_400))

    async def schedule(self, name: str, due_at: int) -> None:
        """A candidate: ``name`` may expire at ``due_at`` (ms)."""
        await self.db.run(
            self._q("INSERT INTO {t} (day, due_at, name) VALUES (?, ?, ?)"), [day_of(due_at), due_at, name]
        )

    async def schedule_many(self, names: list[str], due_at: int) -> None:
        """Candidates for queues created together (one chunk of a bulk create), all due at ``due_at``: one
        partition (one day), in single-partition batches of at most ``SCHEDULE_BATCH``, sent at once."""
        stmt = self._q("INSERT INTO {t} (day, due_at, name) VALUES (?, ?, ?)")
        batches = []
        for i in range(0, len(names), SCHEDULE_BATCH):
            batch = self.db.batch()
            for name in names[i : i + SCHEDULE_BATCH]:
                batch.add(stmt, (day_of(due_at), due_at, name))
            batches.append(self.db.run(batch))
        await asyncio.gather(*batches)

    async def drop(self, name: str, due_at: int) -> None:
        await self.db.run(
            self._q("DELETE FROM {t} WHERE day = ? AND due_at = ? AND name = ?"), [day_of(due_at), due_at, name]
        )

    async def due(self, after: int, upto: int) -> AsyncIterator[tuple[int, str]]:
        """Candidates due in ``(after, upto]``: one paged slice per day the span touches."""
        for day in range(day_of(after), day_of(upto) + 1):
            stmt = self._q("SELECT due_at, name FROM {t} WHERE day = ? AND due_at > ? AND due_at <= ?")
            async for rows in pages(self.db, stmt, [day, after, upto]):
                for r in rows:
                    yield r.due_at, r.name

    async def swept_lately(self) -> bool:
        """True if a reaper swept within ``LOOKBACK_DAYS`` (so reading that far back is enough)."""
        stmt = self._q("SELECT name FROM {t} WHERE day = {marker_day} AND due_at = 0 AND name = ?")
        return bool(await self.db.run(stmt, [self.marker]))

    async def mark_swept(self) -> None:
        stmt = self._q("INSERT INTO {t} (day, due_at, name) VALUES ({marker_day}, 0, ?) USING TTL {ttl}")
        await self.db.run(stmt, [self.marker])

    async def backfill(self, now: int) -> int:
        """A candidate for every ``queue_expiry`` row (due now at the earliest): the one full read,
        when no reaper swept lately. Returns how many were written."""
        written = 0
        async for rows in pages(self.db, self._all):
            expiring = [r for r in rows if r.expire_after_s]
            for i in range(0, len(expiring), BACKFILL_WRITES):
                chunk = expiring[i : i + BACKFILL_WRITES]
                await asyncio.gather(*(self.schedule(r.name, max(real_due(r), now)) for r in chunk))
                written += len(chunk)
        return written


def real_due(r: Any) -> int:
    """When a ``queue_expiry`` row's queue falls due (ms)."""
    return int(r.active_at or 0) + int(r.expire_after_s) * 1000

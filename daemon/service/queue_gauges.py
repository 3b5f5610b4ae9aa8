"""Computing the queue gauges (base/queue_metrics.py): one daemon at a time, every interval.

Every daemon with metrics on runs this loop, but only the holder of the ``queue_gauges`` lease
(engine/cluster/lease.py) reads the queues; the others only renew their bid. A round takes the
queues listed in ``metrics.queue_gauges_queues``, else the queues used in the last hour or two (the
``active_queues`` index: one read, not a listing of every queue), and reads each with
``queue_stats`` (buckets x shards rows from their cursors, plus one poison count): the cost of
``casque stats`` for those queues, once per interval per cluster, never per scrape. A round that
takes longer than the interval just delays the next one.
"""

from __future__ import annotations

import asyncio
import time

from daemon.base import queue_metrics
from daemon.base.errors import CasqueError
from daemon.base.logs import get_logger
from daemon.engine.client import Casque
from daemon.engine.operations.stats import Cursors

log = get_logger("casque.queue_gauges")
LEASE = "queue_gauges"
QUEUES_AT_ONCE = 8  # x 8 reads each: at most 64 reads in flight, small queues read side by side
#: Queues gauged per round when metrics.queue_gauges_queues is empty: at most this many of those
#: used lately. A cluster of a million busy per-user queues would otherwise export a million series
#: per gauge and read every row of each every interval; list the queues that matter instead.
MAX_GAUGED = 1000


class QueueGauges:
    def __init__(
        self,
        cq: Casque,
        holder: str,
        interval: float,
        only: list[str] | None = None,
        lease: str = LEASE,
        max_queues: int = MAX_GAUGED,
    ) -> None:
        self.cq = cq
        self.max_queues = max_queues
        self.interval = interval
        self.only = only or []
        self.lease = cq.stores.lease(lease, holder, ttl_s=3 * interval)
        self.published: set[str] = set()
        self.rounds = 0
        #: Each row's cursors as last seen: later rounds read one query per row and lane.
        self.cursors: dict[str, Cursors] = {}

    async def run(self) -> None:
        try:
            while True:
                await self.tick()
                await asyncio.sleep(self.interval)
        finally:
            await asyncio.shield(self.stop())

    async def tick(self) -> bool:
        """One turn: compute and publish when holding the lease, else publish nothing."""
        if not await self.lease.hold():
            self._withdraw()
            return False
        queue_metrics.HOLDER.set(1)
        try:
            await self.round()
        except CasqueError as exc:
            log.warning("queue_gauges_failed", error=str(exc))
        return True

    async def round(self) -> None:
        started = time.monotonic()
        names = list(self.only) or await self.active_queues()
        sem = asyncio.Semaphore(QUEUES_AT_ONCE)

        async def one(name: str) -> None:
            async with sem:
                try:
                    s = await self.cq.observe.stats(name, parallel=8, cursors=self.cursors.setdefault(name, {}))
                except CasqueError as exc:  # e.g. deleted meanwhile: the others still count
                    log.warning("queue_gauge_failed", queue=name, error=str(exc))
                    return
            queue_metrics.publish(name, s.waiting_due, s.scheduled, s.in_flight, s.poisoned, s.oldest_due_age_s)

        await asyncio.gather(*(one(n) for n in names))
        queue_metrics.forget(self.published - set(names))
        for gone in set(self.cursors) - set(names):
            del self.cursors[gone]
        self.published = set(names)
        queue_metrics.UPDATED.set(time.time())
        queue_metrics.ROUND_SECONDS.set(time.monotonic() - started)
        self.rounds += 1

    async def active_queues(self) -> list[str]:
        """The queues gauged when none are listed: those used in the last hour or two, anywhere in the
        cluster (engine/cluster/activity.py ``recent``: one read), at most ``max_queues``. A million
        idle queues cost nothing here; before, the first ``max_queues`` in token order, used or not."""
        names = await self.cq.stores.activity.recent(self.max_queues)
        if len(names) >= self.max_queues:
            log.warning(
                "queue_gauges_capped",
                gauged=self.max_queues,
                fix="list the queues to gauge in metrics.queue_gauges_queues",
            )
        return names

    def _withdraw(self) -> None:
        queue_metrics.HOLDER.set(0)
        queue_metrics.forget(self.published)
        self.published = set()

    async def stop(self) -> None:
        self._withdraw()
        await self.lease.release()

"""Computing the queue gauges (base/queue_metrics.py): one daemon at a time, every interval.

Every daemon with metrics on runs this loop, but only the holder of the ``queue_gauges`` lease
(engine/cluster/lease.py) reads the queues; the others only renew their bid. A round lists every queue
(paged) and reads each with ``queue_stats`` (buckets x shards rows from their cursors, plus one
poison count): the cost of ``casque stats`` for all queues, once per interval per cluster, never per
scrape. A round that takes longer than the interval just delays the next one.
"""

from __future__ import annotations

import asyncio
import time

from daemon.base import queue_metrics
from daemon.base.errors import CasqueError
from daemon.base.logs import get_logger
from daemon.engine.client import Casque
from daemon.engine.observe.stats import Cursors

log = get_logger("casque.queue_gauges")
LEASE = "queue_gauges"
QUEUES_AT_ONCE = 8  # x 8 reads each: at most 64 reads in flight, small queues read side by side
#: Queues gauged per round when metrics.queue_gauges_queues is empty: the first ones in token order.
#: A cluster of a million per-user queues would otherwise export a million series per gauge and
#: read every row of every queue each interval; list the queues that matter instead.
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
        names = list(self.only) or await self.first_queues()
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

    async def first_queues(self) -> list[str]:
        """The queues gauged when none are listed: the first ``max_queues`` in token order, read a
        page at a time (never the whole table)."""
        names: list[str] = []
        async for page in self.cq.admin.pages(min(self.max_queues, 1000)):
            names += [q.name for q in page][: self.max_queues - len(names)]
            if len(names) >= self.max_queues:
                log.warning(
                    "queue_gauges_capped",
                    gauged=self.max_queues,
                    fix="list the queues to gauge in metrics.queue_gauges_queues",
                )
                break
        return names

    def _withdraw(self) -> None:
        queue_metrics.HOLDER.set(0)
        queue_metrics.forget(self.published)
        self.published = set()

    async def stop(self) -> None:
        self._withdraw()
        await self.lease.release()

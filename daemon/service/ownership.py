"""Which rows this daemon holds (engine/take/holds.py), and keeping those holds alive.

Per served queue, one loop:
  - every ``PEERS_EVERY_S`` it reads the daemons table (one partition) and splits the queue's
    shards among the live daemons that serve it by rendezvous hashing (``owned_shards``): every
    daemon computes the same split on its own, and a daemon joining or leaving moves only its share;
  - every tick it holds the current time bucket's row of each owned shard (and the previous row
    for one clock tolerance after a bucket ends, and the next one just before it starts: the
    rows that messages falling due now live in), renewing each hold a third of a lock TTL after
    its last column, and releases every other row.

Consumers still visit every shard, held or not: a row another daemon holds is found busy by the
ordinary lock and then left alone for a while that doubles up to a lock TTL (consumer.py), so
an owner that falls behind is helped once it lets go. A daemon with peers lets all its rows go
when it has had no room for more messages for ``SATURATED_TICKS`` ticks, so a busy daemon never
keeps work from an idle one. It holds no row of a queue that pull clients read (engine/consume/consumer.py ``settings``:
their receives would find every held row busy). When a daemon dies its holds expire within a lock TTL and the
others take its rows by the ordinary lock; once its heartbeat is stale (``STALE_AFTER_MS``) they
split its shards for holding.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from daemon.base import metrics
from daemon.base.errors import CasqueError
from daemon.base.logs import get_logger
from daemon.base.model import QueueSettings
from daemon.engine.client import Casque
from daemon.engine.consume.consumer import Consumer
from daemon.engine.operations.stats import daemon_id
from daemon.engine.take.holds import Row, owned_shards

log = get_logger("casque.ownership")
PEERS_EVERY_S = 5.0
#: Ticks in a row without room for more messages after which a daemon with peers gives its rows up.
SATURATED_TICKS = 2


class Ownership:
    def __init__(
        self,
        cq: Casque,
        consumers: dict[str, Consumer],
        stopping: asyncio.Event,
        has_room: Callable[[], bool],
        me: str | None = None,
    ) -> None:
        self.cq = cq
        self.has_room = has_room
        self._full_ticks = 0
        self._held: dict[str, int] = {}
        self.consumers = consumers
        self.stopping = stopping
        self.me = me or daemon_id()
        self.heartbeats = cq.stores.heartbeats  # the peers' beats: who shares the rows
        self.tolerance_ms = cq.settings.worker.clock_tolerance_ms
        self._peers: list[tuple[str, list[str]]] = []
        self._peers_at = 0.0
        self._warm_tick: float | None = None

    async def warm(self) -> None:
        """Hold the owned rows once, before the consumers start. Acquired while the consumers
        already run, a hold races their first takes of the same rows and both sides back off,
        leaving the rows idle while the first messages fall due."""
        self._warm_tick = await self._tick()

    async def run(self) -> None:
        """Keep the holds until ``stopping``; then release them, so another daemon takes over now."""
        try:
            if self._warm_tick is not None:  # warm() has just done the first tick
                await self._rest(self._warm_tick)
            while not self.stopping.is_set():
                await self._rest(await self._tick())
        finally:
            await asyncio.shield(self.release_all())

    async def _rest(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass

    async def release_all(self) -> None:
        for consumer in self.consumers.values():
            qs = consumer.last_settings
            if qs is not None:
                await consumer.holds.release_all(qs)
                metrics.HELD_ROWS.labels(qs.name).set(0)

    async def _tick(self) -> float:
        """One round over the queues; returns the seconds until the next one is needed."""
        await self._refresh_peers()
        self._full_ticks = 0 if self.has_room() else self._full_ticks + 1
        ticks = [1.0]
        for queue, consumer in self.consumers.items():
            try:
                qs = await consumer.settings()
                peers = self._serving(queue)
                if consumer.accepts is not None:  # pull clients consume this queue: a held row would keep them out
                    wanted: set[Row] = set()
                elif self._full_ticks >= SATURATED_TICKS and set(peers) - {self.me}:
                    wanted = set()  # full: let a daemon with room take our rows
                else:
                    wanted = self._wanted(qs, owned_shards(self.me, peers, queue, qs.span()[0]))
                await consumer.holds.keep(qs, wanted, renew_ms=qs.lock_ttl_ms // 3)
            except CasqueError as exc:
                log.warning("holds_not_kept", queue=queue, error=str(exc))
                continue
            held = len(consumer.holds.rows())
            if held != self._held.get(queue):
                self._held[queue] = held
                log.info("rows_held", queue=queue, rows=held, shards=qs.shards)
            metrics.HELD_ROWS.labels(queue).set(held)
            ticks.append(qs.lock_ttl_ms / 6000)
        return min(ticks)

    def _wanted(self, qs: QueueSettings, shards: set[int]) -> set[Row]:
        now = self.cq.clock.now_ms()
        start = now // qs.bucket_ms
        buckets = {start % qs.buckets}
        if now - start * qs.bucket_ms < self.tolerance_ms:
            buckets.add((start - 1) % qs.buckets)
        if (start + 1) * qs.bucket_ms - now < qs.lock_ttl_ms:
            buckets.add((start + 1) % qs.buckets)
        return {(b, s) for b in buckets for s in shards if s < qs.shards}

    async def _refresh_peers(self) -> None:
        loop = asyncio.get_running_loop()
        if self._peers_at and loop.time() - self._peers_at < PEERS_EVERY_S:
            return
        try:
            beats = await self.heartbeats.list()
        except CasqueError as exc:
            log.warning("peers_not_read", error=str(exc))
            return
        now = self.cq.clock.now_ms()
        self._peers = [(hb.daemon, hb.queues) for hb in beats if not hb.stale(now)]
        self._peers_at = loop.time()

    def _serving(self, queue: str) -> list[str]:
        return [d for d, queues in self._peers if queue in queues]

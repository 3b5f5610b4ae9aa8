"""Growing a busy queue's shards by itself: a tiny queue stays one row until its rate needs more.

A per-user queue starts as 1 shard x 1 bucket (docs/design.md, "Many queues"): one row, the cheapest
idle queue. One row is also one lock: every take of the queue waits for the others, so past some
send rate the row, not Cassandra, is the limit. A queue that opted in (a ``casque.max_shards``
attribute above its shards: every standard queue created over SQS, daemon/http/sqs/queue_shape.py)
is resharded to twice its shards, capped, when the sends this process made to it over a window pass
``grow_rate`` per shard. What it rests on:

* counting costs a dict increment per send (``SendCounts``, on only in a process that runs a
  ``ShardGrowth``), and each window's counts are dropped whole: memory follows the queues sent to
  in one window, not the queues that exist;
* the decision is this process's own sends (like fair queues, engine/send/fairness.py): with several
  servers a queue grows when one server's share of its sends passes the threshold;
* one process reshards a queue: the holder of its lease ``grow:<queue>`` (engine/cluster/lease.py),
  and the reshard itself is an LWT conditional on the old layout (engine/operations/reshard.py), so two
  growths can't both apply;
* no message moves: the old layout drains (every reader visits it, lookups try it), and the holder
  runs ``finish`` each window from the moment it is allowed (60 s after the change, when no client
  can still send with a cached old layout) until no live message is left in the old rows. A process
  killed at any point leaves either the old layout (the LWT did not apply) or the new one with the
  old draining: both are states a manual ``casque queue reshard`` goes through, and nothing is
  lost in either (tests/test_reshard.py). The next process that sees the queue busy takes the lease
  once it expires and finishes the drain.
"""

from __future__ import annotations

import asyncio

from daemon.base import metrics
from daemon.base.errors import CasqueError, QueueNotFound, UsageError
from daemon.base.logs import get_logger
from daemon.base.model import QueueSettings
from daemon.engine.cluster.lease import Lease
from daemon.engine.operations.reshard import SETTLE_MS, finish, reshard
from daemon.engine.stores import Stores

log = get_logger("casque.growth")
MAX_SHARDS = "casque.max_shards"  # the queue attribute that opts a queue in (0 or absent: never grows)


class SendCounts:
    """Messages sent per queue by this process since the last ``take`` (off until a grower turns it on)."""

    def __init__(self) -> None:
        self.on = False
        self._counts: dict[str, int] = {}

    def add(self, queue: str, n: int = 1) -> None:
        if self.on:
            self._counts[queue] = self._counts.get(queue, 0) + n

    def take(self) -> dict[str, int]:
        counts, self._counts = self._counts, {}
        return counts


class ShardGrowth:
    """Every window: grow the queues sent to faster than ``rate`` per shard, and finish the drains
    of the queues this process grew (or found draining while busy)."""

    def __init__(
        self,
        st: Stores,
        counts: SendCounts,
        holder: str,
        rate: float,
        window_ms: int,
        settle_ms: int = SETTLE_MS,
    ) -> None:
        self.st = st
        self.counts = counts
        self.holder = holder
        self.rate = rate
        self.window_ms = window_ms
        self.settle_ms = settle_ms
        self.draining: dict[str, Lease] = {}  # queues this process finishes, with their lease
        counts.on = rate > 0
        self._since = st.clock.now_ms()

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.window_ms / 1000)
                await self.tick()
        finally:
            await asyncio.shield(self._release_all())

    async def tick(self) -> None:
        """One window: judge each queue sent to, then advance the drains."""
        now = self.st.clock.now_ms()
        seconds = max(0.001, (now - self._since) / 1000)
        self._since = now
        for queue, sent in self.counts.take().items():
            try:
                await self.consider(queue, sent / seconds)
            except QueueNotFound:
                continue
            except CasqueError as exc:  # judged again next window
                log.warning("queue_growth_failed", queue=queue, error=str(exc))
        for queue in list(self.draining):
            await self._advance(queue)

    async def consider(self, queue: str, rate: float) -> QueueSettings | None:
        """Grow ``queue`` if ``rate`` (sends/s) passes the threshold for its shards and its cap allows;
        returns the new settings, or None."""
        qs = await self.st.queues.get(queue)  # cached: the sends just read it
        busy = rate >= self.rate * qs.shards
        orphan = bool(qs.draining) and queue not in self.draining
        if qs.fifo or not (busy or orphan):  # a FIFO group lives in one row: never resharded
            return None
        cap = await self._cap(qs)
        if orphan and cap:
            await self._adopt(queue)  # a drain left by a process that died (or a manual reshard): finish it
        if not busy or not cap or qs.shards >= cap:
            return None
        lease = self.draining.get(queue) or self._lease(queue)
        if not await lease.hold():
            return None
        qs = await self.st.queues.get(queue, fresh=True)  # grown meanwhile? (never shrink from a stale copy)
        if qs.shards >= cap or rate < self.rate * qs.shards:
            return None
        shards = min(2 * qs.shards, cap)
        try:
            new = await reshard(self.st, queue, shards=shards)
        except UsageError as exc:  # another process changed it meanwhile: judged again next window
            log.info("queue_growth_skipped", queue=queue, reason=str(exc))
            return None
        self.draining[queue] = lease
        metrics.QUEUES_GROWN.inc()
        log.info("queue_grown", queue=queue, shards_before=qs.shards, shards=shards, sends_per_s=round(rate, 1))
        return new

    async def _cap(self, qs: QueueSettings) -> int:
        text = (await self.st.attributes.get(qs.name)).attributes.get(MAX_SHARDS, "0")
        return int(text) if text.isdigit() else 0

    def _lease(self, queue: str) -> Lease:
        return self.st.lease(f"grow:{queue}", self.holder, ttl_s=3 * self.window_ms / 1000)  # renewed each window

    async def _adopt(self, queue: str) -> None:
        lease = self._lease(queue)
        if await lease.hold():
            self.draining[queue] = lease

    async def _advance(self, queue: str) -> None:
        """Renew the lease and try to finish the drain (refused while too recent: tried next window)."""
        lease = self.draining[queue]
        if not await lease.hold():
            del self.draining[queue]  # lost it (Cassandra unreachable, or expired): the new holder finishes
            return
        try:
            left = await finish(self.st, queue, self.settle_ms)
        except QueueNotFound:  # deleted meanwhile: nothing left to drain
            left = 0
        except UsageError:  # too soon after the change, or changed meanwhile
            return
        except CasqueError as exc:
            log.warning("queue_growth_finish_failed", queue=queue, error=str(exc))
            return
        if left == 0:
            del self.draining[queue]
            await lease.release()
            log.info("queue_growth_finished", queue=queue)

    async def _release_all(self) -> None:
        for lease in self.draining.values():
            await lease.release()

"""``Observe``: what the facade offers for watching queues and daemons (``cq.observe``).

Exact counts and statistics (engine/operations/stats.py), a message's history, the daemons' heartbeats and
their throughput samples, a FIFO queue's groups: read-only operations over the stores, so the
faces (cli, console, gauges) never reach a store or rebuild one.
"""

from __future__ import annotations

import uuid
from typing import Any

from daemon.base.model import QueueSettings
from daemon.engine.cluster.heartbeats import Heartbeat
from daemon.engine.observe.fifo_groups import FifoGroups, fifo_groups
from daemon.engine.observe.history import HistoryRow
from daemon.engine.operations import stats
from daemon.engine.operations.stats import Cursors, Depth, QueueStats
from daemon.engine.stores import Stores


class Observe:
    def __init__(self, stores: Stores) -> None:
        self.st = stores

    async def stats(self, queue: str, parallel: int = 32, cursors: Cursors | None = None) -> QueueStats:
        return await stats.queue_stats(self.st, queue, parallel=parallel, cursors=cursors)

    async def depth(
        self, qs: QueueSettings, now: int, parallel: int = 32, cursors: Cursors | None = None, pace_s: float = 0.0
    ) -> Depth:
        return await stats.count_depth(self.st, qs, now, parallel, cursors, pace_s)

    async def live_rows(self, qs: QueueSettings, bucket: int, shard: int) -> list[Any]:
        return await stats.live_rows(self.st, qs, bucket, shard)

    async def history(
        self, queue: str, days: int = 7, key: str | None = None, message_id: uuid.UUID | None = None
    ) -> list[HistoryRow]:
        return await self.st.history.read(queue, self.st.clock.now_ms(), days, key=key, message_id=message_id)

    async def daemons(self) -> list[Heartbeat]:
        return await self.st.heartbeats.list()

    async def samples(self, queue: str, since_ms: int) -> list[Any]:
        """The daemons' periodic stats rows of ``queue`` since then (engine/observe/samples.py)."""
        return await self.st.samples.read(queue, since_ms)

    async def fifo_groups(self, qs: QueueSettings, now: int) -> FifoGroups:
        return await fifo_groups(self.st.db, self.st.table, qs, now)

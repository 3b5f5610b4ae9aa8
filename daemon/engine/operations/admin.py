"""``QueueAdmin``: an operator's actions on whole queues, as the facade offers them (``cq.admin``).

Listing and changing queues, purging and deleting them (engine/operations/queue_actions.py), resharding
(engine/operations/reshard.py), and the poison queue: reading it, replaying it, emptying it. Each call is a
named operation over the stores, so the faces (cli, console, SQS endpoint) never reach a store.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

from daemon.base.model import QueueSettings
from daemon.engine.delivery.poison import PoisonRecord
from daemon.engine.operations import queue_actions, reshard
from daemon.engine.stores import Stores


class QueueAdmin:
    def __init__(self, stores: Stores) -> None:
        self.st = stores

    # ---- queues ---------------------------------------------------------------------------
    async def page(
        self, after: int | None = None, limit: int = 25, contains: str = ""
    ) -> tuple[list[QueueSettings], int | None]:
        """One page of queues in token order (and the next page's token; None after the last)."""
        return await self.st.queues.page(after, limit, contains)

    def pages(self, size: int = 1000) -> AsyncIterator[list[QueueSettings]]:
        """Every queue, a page of ``size`` at a time (one bounded read per page)."""
        return self.st.queues.pages(size)

    async def names_matching(self, prefix: str, after: str | None, limit: int) -> tuple[list[str], bool]:
        """Up to ``limit`` queue names starting with ``prefix`` after ``after`` (and whether more follow)."""
        return await self.st.queues.names.matching(prefix, after, limit)

    async def update(self, name: str, **changes: Any) -> QueueSettings:
        return await self.st.queues.update(name, **changes)

    async def purge(self, queue: str, sent_before_ms: int | None = None) -> int:
        return await queue_actions.purge(self.st, queue, sent_before_ms=sent_before_ms)

    async def delete(self, queue: str) -> int:
        return await queue_actions.delete_queue(self.st, queue)

    async def reshard(
        self, queue: str, shards: int | None = None, buckets: int | None = None, bucket_seconds: int | None = None
    ) -> QueueSettings:
        return await reshard.reshard(self.st, queue, shards, buckets, bucket_seconds)

    async def finish_reshard(self, queue: str) -> int:
        return await reshard.finish(self.st, queue)

    # ---- the poison queue -------------------------------------------------------------------
    async def poisoned(
        self, queue: str, limit: int | None = 1000, after: uuid.UUID | None = None
    ) -> list[PoisonRecord]:
        return await self.st.poison.list(queue, limit, after=after)

    async def poisoned_one(self, queue: str, message_id: uuid.UUID) -> PoisonRecord | None:
        return await self.st.poison.get(queue, message_id)

    async def poison_count(self, queue: str) -> int:
        return await self.st.poison.count(queue)

    async def purge_poison(self, queue: str) -> None:
        await self.st.poison.purge(queue)

    async def replay(
        self, queue: str, ids: list[uuid.UUID] | None = None, task: str | None = None
    ) -> tuple[list[str], list[str]]:
        return await queue_actions.replay(self.st, queue, ids, task)

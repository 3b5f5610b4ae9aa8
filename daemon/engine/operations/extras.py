"""``Extras``: a queue's SQS attributes, tags and dead-letter links, as the facade offers them
(``cq.extras``).

What has no casque meaning (SQS's DelaySeconds, Policy, RedrivePolicy, tags, ...) is stored as text
beside the queue's typed settings (engine/queues/attributes.py, read through a 5 s cache); the dead-letter
links are kept both ways (engine/queues/dead_letter_sources.py). The SQS endpoint reads and writes them
here, never through the stores.
"""

from __future__ import annotations

import builtins

from daemon.engine.queues.attributes import QueueExtras
from daemon.engine.stores import Stores


class Extras:
    def __init__(self, stores: Stores) -> None:
        self.st = stores

    async def get(self, queue: str, fresh: bool = False) -> QueueExtras:
        """The queue's attributes and tags (cached up to 5 s unless ``fresh``)."""
        return await self.st.attributes.get(queue, fresh)

    async def set(self, queue: str, put: dict[str, str], drop: builtins.set[str], now_ms: int) -> None:
        """Set ``put``, remove ``drop``; a changed dead-letter target moves the link too."""
        await self.st.attributes.set(queue, put, drop, now_ms)

    async def tag(self, queue: str, put: dict[str, str], drop: builtins.set[str]) -> None:
        await self.st.attributes.tag(queue, put, drop)

    def forget(self, queue: str) -> None:
        """Drop this process's cached copy (the queue was deleted)."""
        self.st.attributes.forget(queue)

    async def names_page(self, after: str | None, limit: int) -> list[str]:
        """Up to ``limit`` queue names after ``after``, in token order (one bounded read)."""
        return await self.st.attributes.names_page(after, limit)

    async def dead_letter_sources(self, target: str, after: str | None, limit: int) -> tuple[list[str], bool]:
        """The queues whose dead-letter queue is ``target`` (a page, and whether more follow)."""
        return await self.st.attributes.sources.page(target, after, limit)

    async def is_dead_letter_target(self, queue: str) -> bool:
        return await self.st.attributes.sources.is_target(queue)

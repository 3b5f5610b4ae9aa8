"""Pull clients as peers of a daemon: which served queues they read, and what the daemon leaves them.

A daemon and pull clients (``casque serve``'s SQS receivers, ``cq.receive``) may read one queue
(docs/design.md, "Push and pull on one queue"). Every ``LOOK_EVERY_S`` this loop reads, per served
queue, who pulled from it lately (engine/cluster/pull_readers.py: a receive within the last 45-60 s). While
a queue has pull readers, the daemon's consumer of it:

  - takes only the tasks this daemon has a handler for and leaves the others in their rows, the
    cursor never past them (engine/consume/consumer.py ``share``), so a pull reader receives them; they are
    never poisoned as unknown tasks;
  - holds none of the queue's rows (service/ownership.py): a held row would keep every pull
    reader out of it, so every take on the queue goes by the ordinary lock protocol, which is what
    keeps two consumers from taking the same message (docs/design.md, "The lock protocol").

Once no pull reader has received from the queue for the reader TTL (60 s), the daemon takes every
task again: an unknown one is poisoned with its reason, as the delivery contract promises (nothing
is looped on forever).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from daemon.base.logs import get_logger
from daemon.engine.client import Casque
from daemon.engine.consume.consumer import Consumer

log = get_logger("casque.pull_peers")
LOOK_EVERY_S = 5.0


class PullPeers:
    def __init__(
        self, cq: Casque, consumers: dict[str, Consumer], handles: Callable[[str], bool], stopping: asyncio.Event
    ) -> None:
        self.cq = cq
        self.consumers = consumers
        self.handles = handles
        self.stopping = stopping
        self.readers: dict[str, int] = {}  # queue -> pull readers seen at the last look

    async def run(self) -> None:
        """Look every ``LOOK_EVERY_S`` until ``stopping``."""
        while not self.stopping.is_set():
            try:
                await asyncio.wait_for(self.stopping.wait(), timeout=LOOK_EVERY_S)
            except TimeoutError:
                pass
            if not self.stopping.is_set():
                await self.look()

    async def look(self) -> None:
        """One read per served queue; a queue whose read fails keeps what was decided before."""
        for queue, consumer in self.consumers.items():
            try:
                readers = await self.cq.observe.pull_readers(queue)
            except Exception as exc:  # a node down, or a keyspace whose schema predates the table
                log.warning(
                    "pull_readers_not_read",
                    queue=queue,
                    error=str(exc),
                    fix="if the table is missing, run 'casque schema apply' (docs/design.md, 'Push and pull on one "
                    "queue')",
                )
                continue
            shared = bool(readers)
            if shared != (consumer.accepts is not None):
                consumer.share(self.handles if shared else None)
                log.info(
                    "pull_readers",
                    queue=queue,
                    readers=len(readers),
                    shared=shared,
                    rule="tasks without a handler are left for the pull readers; no rows held"
                    if shared
                    else "every task taken; unknown tasks poisoned",
                )
            self.readers[queue] = len(readers)

"""The dispatcher: the daemon's consumers, handlers and outcomes put together.

    fetch_loop.py      N consumer coroutines per queue: wait for room -> fetch due messages -> start them
    room.py            the in-flight limit, counting fetches under way too
    idle_watch.py      while idle one scout polls; wake-ups and the poll's timing
    handler_runner.py  one message: slots -> deadline -> run the handler
    outcomes.py        the retry/poison policy, and the counters
    ack_buffer.py      acks coalesced for a few ms and written as one batch per row

Nothing that isn't due is ever fetched, and at most ``in_flight`` messages are held at once, so
memory stays bounded however deep the queue. An ack lost in a crash only means a redelivery
(at-least-once).

A FIFO queue (engine/take/fifo.py): a take gives the daemon at most one message per group, and the
group stays blocked while it is in flight, also through a retry's backoff (engine/delivery/acks.py retries
it in place). Once its ack (or poison) is written, the group's next message is announced like a
send (``Casque.deliverable_now``), so it is taken at once, not at the row's next rescan.
"""

from __future__ import annotations

import asyncio

from daemon.base.config import WorkerSettings
from daemon.base.model import Message
from daemon.engine.client import Casque
from daemon.engine.consume.consumer import Consumer
from daemon.engine.observe.samples import Counters
from daemon.service.ack_buffer import AckBuffer
from daemon.service.fetch_loop import FetchLoop
from daemon.service.handler_runner import HandlerRunner
from daemon.service.hooks import Hooks
from daemon.service.idle_watch import IdleWatch
from daemon.service.outcomes import Outcomes
from daemon.service.ownership import Ownership
from daemon.service.registry import Registry
from daemon.service.room import Room
from daemon.service.visibility import Visibility

__all__ = ["AckBuffer", "Dispatcher"]


class Dispatcher:
    """Builds the parts for the queues a daemon serves, runs them, and stops them."""

    def __init__(
        self, cq: Casque, registry: Registry, settings: WorkerSettings, queues: list[str], hooks: Hooks | None = None
    ) -> None:
        self.cq = cq
        self.registry = registry
        self.settings = settings
        self.queues = queues
        #: Middleware around each handler call, retry and poison (hooks.py); the worker's chain
        #: starts with its own metrics and history observers, then the registry's middleware.
        self.hooks = hooks or Hooks(registry.middleware)
        self.visibility = Visibility(cq.stores.acker, cq.clock, settings.clock_tolerance_ms)
        # The column falls due hold after the deadline; a message is taken take_ahead before it is due.
        self.consumers = {
            q: cq.consumer(q, hold_ms=self.visibility.hold_ms, ahead_ms=settings.take_ahead_ms) for q in queues
        }
        for consumer in self.consumers.values():  # on a queue pull clients consume, the rest is left to them
            consumer.handles = lambda task: registry.get(task) is not None
        self.stopping = asyncio.Event()
        self.outcomes = Outcomes(cq, self.hooks, self.visibility, queues)
        self.acks = AckBuffer(cq, written=self.outcomes.finished)
        self.runner = HandlerRunner(cq, registry, settings, self.visibility, self.hooks, self.outcomes, self.acks)
        self.room = Room(settings.in_flight, self.stopping)
        self.watch = IdleWatch(cq, settings, self.consumers, self.stopping)
        self.fetching = FetchLoop(
            settings, self.room, self.watch, self.acks, self._start, lambda: self.outcomes.fifo_finished
        )
        self.ownership = (
            Ownership(cq, self.consumers, self.stopping, lambda: len(self.tasks) < settings.in_flight)
            if settings.hold_rows
            else None
        )

    # What the worker reads (gauges, stats rows, shutdown).
    @property
    def tasks(self) -> set[asyncio.Task[None]]:
        return self.room.tasks

    @property
    def busy_consumers(self) -> int:
        return self.fetching.busy_consumers

    @property
    def counters(self) -> Counters:
        return self.outcomes.counters

    @property
    def per_queue(self) -> dict[str, Counters]:
        return self.outcomes.per_queue

    def _start(self, consumer: Consumer, m: Message) -> None:
        """A fetched message is received: its handling runs as a task holding its room."""
        self.outcomes.count(m, "received")
        self.room.run(self.runner.process(consumer, m))

    async def warm(self, burst: bool = False) -> None:
        """Before serving: hold the rows this daemon owns (service/ownership.py ``warm``), so the
        first takes are already the two-round-trip kind, and load every row's cursors
        (Consumer.warm). Burst mode holds nothing (see run). First: which queues pull clients consume
        (``Consumer.settings``), whose rows are not held."""
        for consumer in self.consumers.values():
            await consumer.settings()
        if self.ownership is not None and not burst:
            await self.ownership.warm()
        for consumer in self.consumers.values():
            await consumer.warm()

    async def run(self, burst: bool = False) -> None:
        """Serve until ``stopping`` is set (or, in burst mode, until nothing due is left)."""
        self.acks.start()
        loops = [
            asyncio.create_task(self.fetching.consume(q, c, slot, burst), name=f"casque-consumer-{q}-{slot}")
            for q, c in self.consumers.items()
            for slot in range(self.settings.consumers)
        ]
        # No holds in burst mode: it ends when a round finds nothing, and a hold being acquired
        # makes that round's take of the same row find it busy (a message left behind).
        holds = asyncio.create_task(self.ownership.run(), name="casque-holds") if self.ownership and not burst else None
        try:
            await asyncio.gather(*loops)
        finally:
            for t in loops:
                t.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            self.watch.close()
            self.stopping.set()  # the holds loop releases every held row as it ends
            if holds is not None:
                await asyncio.gather(holds, return_exceptions=True)

    async def drain(self, timeout_ms: int) -> bool:
        """Let in-flight handlers finish (up to ``timeout_ms``), flush acks. True if all finished."""
        self.stopping.set()
        self.room.open()
        pending = set(self.tasks)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=timeout_ms / 1000)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await self.acks.close()
        self.runner.close()
        return not pending

    async def abort(self) -> None:
        """Stop at once: cancel every handler. Un-acked messages come back after their timeout."""
        self.stopping.set()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*list(self.tasks), return_exceptions=True)
        await self.acks.close()
        self.runner.close()

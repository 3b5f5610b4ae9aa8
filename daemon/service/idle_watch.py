"""Waiting for work: one consumer per queue (the scout) polls it, the others wait to be woken.

An idle daemon costs one round of peeks per poll, not one per consumer. The scout sleeps until
its next poll of every row, until a wake-up (engine/wake/wakeups.py: a send in this process or a hint
from another) kicks it, or until a message known to be coming falls due. While wake-ups flow the
poll is only the safety poll (``max_poll_interval``). Durations are ms here (loop time in ms too);
asyncio takes seconds at the sleep.

Every wait here is a park on the engine's ``QueueWaiter`` (engine/wake/wakeups.py), the one the long polls
park on: one way to park, to wake one, n or all, with every deadline on one loop timer (``Deadlines``). Per queue
the daemon has two waiters of its own, not the receives' (``Wakeups.enter``): ``waiters``, where the other
consumers park until called in (its ``scout`` is the slot of the consumer that keeps watch), and ``alarms``, the
scout's, which a wake-up kicks. A send must wake one parked poll, kick the scout and perhaps call a helper in: one
shared waiter would give its one wake to one of them. A kick is kept while the scout fetches (the scout parks from
the generation its last sleep ended at), a wake of a consumer is not (the scout's next poll finds its work).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from daemon.base.config import WorkerSettings
from daemon.engine.client import Casque
from daemon.engine.consume.consumer import Consumer
from daemon.engine.wake.wakeups import Deadlines, QueueWaiter


class IdleWatch:
    """Per queue: the scout, its poll delay and next poll, the consumers waiting, the kicks."""

    def __init__(
        self, cq: Casque, settings: WorkerSettings, consumers: dict[str, Consumer], stopping: asyncio.Event
    ) -> None:
        self.cq = cq
        self.consumers = consumers
        self.stopping = stopping
        self.settings = settings  # read at each poll: a reload (SIGHUP) changes the poll intervals
        self.slots = settings.consumers
        #: Wake-ups seen within this window mean the producers announce their sends (two safety polls).
        self.flowing_ms = 2 * settings.max_poll_interval_ms
        self.idle: dict[tuple[str, int], bool] = {}  # per (queue, slot): its last fetch found nothing
        self.delay_ms: dict[str, int] = {}  # per queue: the scout's poll delay, poll_interval..max_poll_interval
        self._poll_at_ms: dict[str, float] = {}  # per queue: when the next poll of every row is due (loop ms)
        deadlines = Deadlines()
        self.waiters = {q: QueueWaiter(cq.clock, deadlines) for q in consumers}  # per queue: the consumers waiting
        self.alarms = {q: QueueWaiter(cq.clock, deadlines) for q in consumers}  # per queue: the scout's sleep
        self._slept = dict.fromkeys(consumers, 0)  # per queue: the alarm's generation when the scout last woke
        self._unsubscribe = [cq.stores.wakeups.subscribe(q, self._hinted(q)) for q in consumers]

    def close(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        for waiter in [*self.waiters.values(), *self.alarms.values()]:
            waiter.close()

    def _hinted(self, queue: str) -> Any:
        """A wake-up for ``queue``: tell the consumer which row, and wake its scout so it looks now,
        or sleeps until just before the message is due."""
        consumer, alarm = self.consumers[queue], self.alarms[queue]

        def listener(due_ms: int, placement: int | None) -> None:
            consumer.hint(due_ms, placement)
            alarm.wake()
            if consumer.names.pending() > 1:  # more named rows than the scout: call a helper in
                self.wake(queue, 1)

        return listener

    def poll_due(self, queue: str, always: bool = False) -> bool:
        """True if the poll of every row is due (or ``always``: burst mode); the caller then owns
        it (no second poll until ``polled``)."""
        if not always and _loop_ms() < self._poll_at_ms.get(queue, 0.0):
            return False
        self._poll_at_ms[queue] = math.inf
        return True

    def polled(self, queue: str, found: bool, flowing: bool) -> None:
        """After the poll of every row: when the next one is due. While wake-ups flow, it is only
        the safety poll (``max_poll_interval``): sends announce themselves. Otherwise work found
        (an old client, the Spark loader, hints off) may be followed by more, so the poll drops to
        ``poll_interval``, and nothing found doubles it up to ``max_poll_interval``. A poll after
        every take would make the scout peek every row many times a second, under load a large
        share of the node's reads."""
        poll_ms, max_poll_ms = self.settings.poll_interval_ms, self.settings.max_poll_interval_ms
        delay = self.delay_ms.get(queue, poll_ms)
        if flowing:
            delay = max_poll_ms
        elif found:
            delay = poll_ms
        else:
            delay = min(delay * 2, max_poll_ms)
        self.delay_ms[queue] = delay
        self._poll_at_ms[queue] = _loop_ms() + delay

    def until_poll_ms(self, queue: str, consumer: Consumer) -> float:
        """How long the scout may sleep: until its next poll, or a message known to be coming."""
        until = self._poll_at_ms.get(queue, 0.0) - _loop_ms()  # inf while another consumer polls
        delay = min(self.settings.max_poll_interval_ms, max(0.0, until))
        upcoming = consumer.names.next_due()  # back off while idle, but wake exactly when it falls due
        if upcoming is None:
            return delay
        return max(0.0, min(delay, upcoming - self.cq.clock.now_ms()))

    async def wait_for_work(self, queue: str) -> None:
        """Wait until the scout (or a wake-up) calls this consumer in. No timeout: the scout is a
        coroutine of this process and never stops while we run (with a timeout, every idle
        consumer would go round every shard on its own, reading for nothing)."""
        waiter = self.waiters[queue]
        # The generation is read here, not before the fetch: a wake while no consumer waited is not
        # kept (the scout's next poll finds its work).
        await self._park(waiter, waiter.generation, None)

    def wake(self, queue: str, n: int | None = None) -> None:
        """Wake ``n`` waiting consumers of ``queue`` (None: all). One per row with known work:
        waking every consumer for a small take sends each round every row, a burst of reads that
        delays the takes and so makes the next one bigger."""
        self.waiters[queue].wake(n)

    def all_idle(self) -> bool:
        expected = len(self.consumers) * self.slots
        return len(self.idle) == expected and all(self.idle.values())

    async def sleep(self, queue: str, ms: float) -> None:
        """The scout sleeps ``ms``, or until stopping or a wake-up kicks it (also one that came while it fetched)."""
        alarm = self.alarms[queue]
        await self._park(alarm, self._slept[queue], ms / 1000)
        self._slept[queue] = alarm.generation

    async def _park(self, waiter: QueueWaiter, generation: int, timeout_s: float | None) -> None:
        """``waiter.park`` (at once if woken since ``generation``), ended early by stopping."""
        # The park's task is made before anything else runs, so a wake from here on still ends it.
        park = asyncio.ensure_future(waiter.park(generation, timeout_s))
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            both: list[asyncio.Future[Any]] = [park, stop]
            await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            park.cancel()


def _loop_ms() -> float:
    return asyncio.get_running_loop().time() * 1000

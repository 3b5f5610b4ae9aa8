"""The fetch loop: N consumer coroutines per queue wait for room, fetch due messages, start them.

    consumer coroutine:  wait for room -> fetch a batch of due messages -> start one task per message
                         -> more work known? go on / wake helpers : wait for work (idle_watch.py)

Nothing that isn't due is ever fetched, and at most ``in_flight`` messages are held at once
(room.py). One loop per consumer, in the spirit of arq's worker: everything it decides is in
``_consume``; waiting, waking and the poll's timing are idle_watch.py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from daemon.base.config import WorkerSettings
from daemon.base.errors import CasqueError
from daemon.base.logs import get_logger
from daemon.base.model import Message
from daemon.engine.consume.consumer import Consumer
from daemon.service.ack_buffer import AckBuffer
from daemon.service.idle_watch import IdleWatch
from daemon.service.room import Room

log = get_logger("casque.dispatcher")


class FetchLoop:
    """The consumers' loops of one daemon, over every queue it serves."""

    def __init__(
        self,
        settings: WorkerSettings,
        room: Room,
        watch: IdleWatch,
        acks: AckBuffer,
        start: Callable[[Consumer, Message], None],
        fifo_finished: Callable[[], int],
    ) -> None:
        self.settings = settings
        self.room = room
        self.watch = watch
        self.acks = acks
        self.stopping = room.stopping
        self._start = start  # hands one fetched message to its handler (a task counted by room)
        self._fifo_finished = fifo_finished  # FIFO messages finished so far (outcomes.py)
        self.busy_consumers = 0

    async def consume(self, queue: str, consumer: Consumer, slot: int, burst: bool) -> None:
        watch = self.watch
        while not self.stopping.is_set():
            room = await self.room.wait()
            if self.stopping.is_set():
                return
            asked = min(self.settings.batch_size, room)
            # A poll of every row when it is due, by whichever consumer comes first (under load
            # there is no idle scout, and messages no wake-up named would wait until the load
            # ends); in burst mode always (it ends on a poll that found nothing). Otherwise the
            # scout, woken by a send, visits the rows named, and so does every other consumer
            # while wake-ups name them.
            polling = watch.poll_due(queue, always=burst)
            scout = watch.waiters[queue].scout == slot
            finished_before = self._fifo_finished()
            full = polling or (not scout and not consumer.names.flowing(watch.flowing_ms))
            messages = await self._fetch(queue, consumer, slot, asked, scout or polling, full)
            if polling:
                watch.polled(queue, bool(messages), consumer.names.flowing(watch.flowing_ms))
            watch.idle[(queue, slot)] = not messages
            if messages:
                for m in messages:
                    self._start(consumer, m)
                await self._after_work(queue, consumer, slot, len(messages), asked)
                continue
            if burst and watch.all_idle():
                await self._wait_in_flight()
                if self._fifo_finished() != finished_before:  # a FIFO group moved on since this fetch read: not the end
                    continue
                # Not while another consumer's fetch is under way: this one may have found the row
                # busy with that take (a FIFO group's next messages, seen ending bursts early).
                if watch.all_idle() and not self.room.tasks and not self.busy_consumers:
                    self.stopping.set()
                    return
            if not watch.waiters[queue].claim_scout(slot):
                await watch.wait_for_work(queue)  # another consumer of this queue keeps watch
                continue
            await watch.sleep(queue, watch.until_poll_ms(queue, consumer))

    async def _fetch(
        self, queue: str, consumer: Consumer, slot: int, asked: int, peek_all: bool, full: bool
    ) -> list[Message]:
        """One take of up to ``asked`` messages, its room promised while it runs. ``peek_all``: peek
        at every shard's rows in one round trip first (consumer.py)."""
        self.busy_consumers += 1
        self.room.ask(asked)
        try:
            return await consumer.fetch(asked, slot, peek_all=peek_all, full=full)
        except CasqueError as exc:
            retry_in = round(self.watch.delay_ms.get(queue, 0) / 1000, 2)
            log.error("fetch_failed", queue=queue, error=str(exc), retry_in=retry_in)
            return []
        finally:
            self.busy_consumers -= 1
            self.room.release(asked)

    async def _after_work(self, queue: str, consumer: Consumer, slot: int, got: int, asked: int) -> None:
        """More work known: with wake-ups flowing it is named by shard (a send, a take that filled
        its batch, a peek that found more rows due): this consumer goes on to one named shard and
        wakes one more per other one (one consumer going from row to row alone falls behind under
        load; waking them all for a small take sends each round every row). Without wake-ups (old
        clients, the Spark loader), a big take calls every consumer to go round the rows. A few
        messages: the scout waits for the next send or its poll instead of calling every consumer
        to go round every shard for them (that storm of reads would delay pickup and the fetches).
        Any other consumer looks once more: it may wait only after a fetch that found nothing
        (its last fetch counts as idle, or burst mode would never end)."""
        watch = self.watch
        named = consumer.names.pending()
        flowing = consumer.names.flowing(watch.flowing_ms)
        if named or (not flowing and got >= max(4, asked // 50)):
            watch.waiters[queue].resign_scout(slot)
            watch.wake(queue, named - 1 if flowing else None)
            return
        if watch.waiters[queue].claim_scout(slot):
            await watch.sleep(queue, watch.until_poll_ms(queue, consumer))

    async def _wait_in_flight(self) -> None:
        while self.room.tasks:
            await asyncio.gather(*list(self.room.tasks), return_exceptions=True)
        await self.acks.flush()

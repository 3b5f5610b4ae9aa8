"""The ack buffer: acks coalesced for a few milliseconds and written as one batch per row.

An ack lost in a crash only means a redelivery (at-least-once), so an ack need not be written
before the next message starts; batching them spares the node a write per message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from daemon.base.errors import CasqueError
from daemon.base.logs import get_logger
from daemon.base.model import Message
from daemon.engine.client import Casque

log = get_logger("casque.dispatcher")


class AckBuffer:
    """Coalesces acks for ``delay_ms`` and writes them in one batch per row, up to
    ``writers`` batches at once: under load a slow ack write must not hold back the acks
    behind it (their timeout columns would come due while they wait)."""

    def __init__(
        self,
        cq: Casque,
        delay_ms: int = 4,
        max_items: int = 256,
        writers: int = 4,
        written: Callable[[Message], None] | None = None,
    ) -> None:
        self.cq = cq
        self.written = written  # told of each message once its ack is written (a FIFO group moves on)
        self.delay_ms = delay_ms
        self.max_items = max_items
        self._items: list[Message] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._writers = asyncio.Semaphore(writers)
        self._writing: set[asyncio.Task[None]] = set()
        self.failed = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="casque-acks")

    def add(self, m: Message) -> None:
        self._items.append(m)
        self._wake.set()

    async def _run(self) -> None:
        while not self._closing:
            await self._wake.wait()
            if not self._closing and len(self._items) < self.max_items:
                await asyncio.sleep(self.delay_ms / 1000)
            await self._writers.acquire()
            self._wake.clear()
            items, self._items = self._items, []
            task = asyncio.create_task(self._write(items))
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)

    async def _write(self, items: list[Message]) -> None:
        try:
            if items:
                await self.cq.stores.acker.ack(items)
                for m in items:
                    if self.written is not None:
                        self.written(m)
        except CasqueError as exc:  # they will come back after their timeout: at-least-once
            self.failed += len(items)
            log.error("ack_failed", count=len(items), error=str(exc))
        finally:
            self._writers.release()

    async def flush(self) -> None:
        """Write what is buffered now, and wait for the writes already under way. The write is a
        tracked task from the moment its items leave the buffer: a second flush at the same time
        (two consumers ending a burst round together) must wait for it too, not find the buffer
        empty and return while those acks are unwritten (a FIFO group's next message would not
        be free yet, and burst mode ended with it left in the queue)."""
        self._wake.clear()
        items, self._items = self._items, []
        if items:
            task = asyncio.create_task(self._write_when_free(items))
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)
        if self._writing:
            await asyncio.gather(*list(self._writing), return_exceptions=True)

    async def _write_when_free(self, items: list[Message]) -> None:
        await self._writers.acquire()
        await self._write(items)

    async def close(self) -> None:
        """Write every buffered ack. The background task is asked to stop, never cancelled: a
        cancel while it awaits a write would drop acks it has already taken from the buffer (their
        messages would be delivered again after their timeout)."""
        if self._task:
            self._closing = True
            self._wake.set()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.flush()

"""The in-flight limit: room for a fetch is ``in_flight`` less the running messages and what the
fetches under way may return.

Without the second part every consumer saw the same room at once and the daemon ran up to
``in_flight`` + consumers x batch_size messages (tests/test_liveness.py counted 28 running at
``in_flight`` 10). Memory stays bounded however deep the queue: nothing more is ever fetched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine


class Room:
    """Counts running message tasks and promised fetches against ``in_flight``."""

    def __init__(self, in_flight: int, stopping: asyncio.Event) -> None:
        self.in_flight = in_flight
        self.stopping = stopping
        self.tasks: set[asyncio.Task[None]] = set()  # one per message being handled
        self._asked = 0  # messages the fetches under way may return
        self._event = asyncio.Event()

    def free(self) -> int:
        return self.in_flight - len(self.tasks) - self._asked

    async def wait(self) -> int:
        """Room for a fetch (returned at once while stopping: the caller checks ``stopping``)."""
        while self.free() <= 0 and not self.stopping.is_set():
            self._event.clear()
            await self._event.wait()
        return self.free()

    def ask(self, asked: int) -> None:
        """Room promised to a fetch: other consumers wait for what is left."""
        self._asked += asked

    def release(self, asked: int) -> None:
        """A fetch ended: what it asked for and did not get is room again."""
        self._asked -= asked
        self._freed()

    def open(self) -> None:
        """Let every waiter go (shutdown)."""
        self._event.set()

    def run(self, work: Coroutine[None, None, None]) -> None:
        """Run one message's handling as a task that holds its room until it ends."""
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._freed()

    def _freed(self) -> None:
        if self.free() > 0:
            self._event.set()

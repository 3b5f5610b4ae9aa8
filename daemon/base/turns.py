"""Group commit: the calls made for one key in one turn of the event loop run as one, in the next turn.

A request to Cassandra costs this process more CPU than anything else a send or a delete does (the hand-offs between
the loop and the driver's I/O thread, which cost less the more requests share them), so concurrent callers (an SQS
server's requests, a web app's handlers) each writing in a request of its own paid that many times. Their items are
held until the loop's next turn and handed to one call: no timer, no wait beyond that turn. Every caller gets that
call's answer, or its error (each may retry, as after any failed write). Used for a row's sends
(engine/send/producer.py, whose sends of one turn share a row) and a queue's deletes (engine/delivery/settle.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
Run = Callable[[list[T]], Awaitable[R]]


class TurnGroups(Generic[T, R]):
    def __init__(self) -> None:
        self.held: dict[Hashable, tuple[list[T], Run[T, R], asyncio.Future[R]]] = {}

    async def join(self, key: Hashable, items: list[T], run: Run[T, R]) -> R:
        """``run`` of ``items`` and those the other calls for ``key`` in this turn gave (the first caller's ``run``):
        its answer, or its error."""
        held = self.held.get(key)
        if held is None:
            loop = asyncio.get_running_loop()
            held = self.held[key] = ([], run, loop.create_future())
            loop.call_soon(self._flush, key)
        held[0].extend(items)
        return await asyncio.shield(held[2])  # a caller cancelled leaves the others' call alone

    def _flush(self, key: Hashable) -> None:
        items, run, done = self.held.pop(key)
        asyncio.ensure_future(run(items)).add_done_callback(lambda t: _settle(t, done))


def _settle(task: asyncio.Future[R], done: asyncio.Future[R]) -> None:
    if task.cancelled():
        done.cancel()
    elif (exc := task.exception()) is not None:
        done.set_exception(exc)
    else:
        done.set_result(task.result())

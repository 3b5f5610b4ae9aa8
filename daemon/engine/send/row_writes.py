"""Group commit: the messages sent for one row in one turn of the event loop are written in one request.

A request to Cassandra costs this process more CPU than anything else a send does (the hand-offs between the loop and
the driver's I/O thread, which cost less the more requests share them), so concurrent senders (an SQS server's
requests, a web app's handlers) each writing its message in a request of its own paid that many times. The sends of
one turn share a row (``Producer._placements``), their writes wait for the loop's next turn, and go together as the
per-partition batch one ``send_many`` of them would write: no timer, no wait beyond that turn. Every sender is
answered when the batch is, and a failed batch fails each of its sends (each may retry, as after any failed write)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from daemon.base.model import Message, QueueSettings

Write = Callable[[QueueSettings, list[Message]], Awaitable[None]]
Row = tuple[str, int, int]  # (queue, bucket, shard)


class RowWrites:
    def __init__(self, write: Write) -> None:
        self.write_now = write
        self.held: dict[Row, tuple[QueueSettings, list[Message], asyncio.Future[None]]] = {}

    async def write(self, qs: QueueSettings, messages: list[Message]) -> None:
        """Write ``messages`` (of one row) with the others sent for that row in this turn; raises what the write
        raised."""
        row = (qs.name, messages[0].bucket, messages[0].shard)
        held = self.held.get(row)
        if held is None:
            loop = asyncio.get_running_loop()
            held = self.held[row] = (qs, [], loop.create_future())
            loop.call_soon(self._flush, row)
        held[1].extend(messages)
        await asyncio.shield(held[2])  # a sender cancelled leaves the others' write alone

    def _flush(self, row: Row) -> None:
        qs, messages, done = self.held.pop(row)
        asyncio.ensure_future(self.write_now(qs, messages)).add_done_callback(lambda t: _settle(t, done))


def _settle(task: asyncio.Future[None], done: asyncio.Future[None]) -> None:
    if task.cancelled():
        done.cancel()
    elif (exc := task.exception()) is not None:
        done.set_exception(exc)
    else:
        done.set_result(None)

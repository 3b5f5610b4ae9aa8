"""A parked long poll that catches what a send of this process hands it: the send writes the messages in flight for
that poll, and no take runs.

Why. A long poll woken by a send takes the message by the lock protocol: the look, the acquired write, the re-check,
the read and the take batch, five round trips after the send's own write, most of an SQS send-to-receive time.
When a poll of the queue is parked in this process it has looked and found nothing due, and it is waiting for
exactly this: so the send writes the message straight into flight for it (what a take would have written:
attempt 1, IN_FLIGHT, visible again at now + the poll's visibility timeout, with its check entry, in the row the send
would have used) and hands it over in memory. One write, no read, no lock.

What it rests on.
  - Nobody else can take it: it is never written due. Like any message in flight, it comes back when its visibility
    timeout passes without a delete (the take's redelivery path), so a poll that is gone by the time the write lands
    (its client left) loses nothing: the message is late by one visibility timeout, as a receive's answer lost on the
    wire is.
  - One poll per message: a claim (``QueueWaiter.catch``) takes the poll off the parked list in the same step of the
    event loop, so no second send and no wake-up can reach it; a claimed poll waits for the write's outcome, not for
    its deadline.
  - A write that failed is in doubt (it may have been applied): the send fails as any send would, and the poll goes
    back to looking. If the write did land, the message comes back after the visibility timeout.
Only messages due now, with no key and no schedule, on a standard queue: a FIFO message must wait its turn in its
group, and a keyed or delayed one is found where it is written.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from daemon.base.model import Message


@dataclass
class Catch:
    """What a parked poll takes (up to ``limit`` messages, invisible for ``visibility_ms``), and where the send puts
    them: ``messages`` is set to those written in flight for it, or None if the write failed."""

    limit: int
    visibility_ms: int
    messages: asyncio.Future[list[Message] | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    claimed: bool = False

    def deliver(self, messages: list[Message] | None) -> None:
        if not self.messages.done():
            self.messages.set_result(messages)

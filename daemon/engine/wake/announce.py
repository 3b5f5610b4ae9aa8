"""Announcing a write: wake this process's waiters and consumers, and hint the other processes.

A send (and a FIFO group moving on after a delete or an ack) is announced only after its write was
acknowledged: locally through ``Wakeups.notify`` (engine/wake/wakeups.py), to the other processes
listening for the queue through a fire-and-forget hint (engine/wake/hints.py), and in the due feed,
which finds it for their parked polls if the hint is lost (engine/wake/due_feed.py).
"""

from __future__ import annotations

from daemon.engine.queues.store import QueueStore
from daemon.engine.storage.placement import PLACEMENT_MASK
from daemon.engine.wake.due_feed import DueFeed
from daemon.engine.wake.hints import HintSender
from daemon.engine.wake.wakeups import Wakeups


class Announcer:
    """``send_hints`` off (config hints.send): wake this process only."""

    def __init__(
        self, wakeups: Wakeups, hints: HintSender, feed: DueFeed, queues: QueueStore, send_hints: bool
    ) -> None:
        self.wakeups = wakeups
        self.hints = hints
        self.feed = feed
        self.queues = queues
        self.send_hints = send_hints

    def announce(self, queue: str, entries: list[tuple[int, int]]) -> None:
        """Entries are (due ms, placement bits) of what was written."""
        for due, placement in entries:
            self.wakeups.notify(queue, due, placement)
        self.feed.add(queue, (due for due, _ in entries))
        if self.send_hints:
            qs = self.queues.cached(queue)
            self.hints.announce(queue, entries, tuple(s for s, _, _ in qs.layouts()) if qs else ())

    def unblocked(self, queue: str, due_ms: int, placement: int) -> None:
        """Something in that row became deliverable without a send (a FIFO group moved on; a message a daemon left for
        pull clients): like a send, announce it."""
        self.announce(queue, [(due_ms, placement & PLACEMENT_MASK)])

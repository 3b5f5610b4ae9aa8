"""``Pulling``: the facade's consumers and its pull API wiring (``cq.pulling``).

A daemon takes through consumers (``cq.consumer``); a pull client receives through the receiver
(engine/delivery/receive.py) and settles through its settler (engine/delivery/settle.py). Both read
the same rows with the same consumers, built here from the worker settings, so ``Casque`` keeps only
the calls users write (``cq.receive``, ``cq.delete``, ``cq.change_visibility``, ``cq.consumer``).
"""

from __future__ import annotations

from collections.abc import Callable

from daemon.engine.consume.consumer import Consumer
from daemon.engine.delivery.receive import Receiver
from daemon.engine.delivery.settle import Settler
from daemon.engine.stores import Stores


class Pulling:
    """Builds consumers and owns the receiver. ``unblocked(queue, due ms, placement)``: a FIFO
    group may move on after a delete or a visibility change; the facade announces it like a send."""

    def __init__(self, stores: Stores, unblocked: Callable[[str, int, int], None]) -> None:
        self.st = st = stores
        self.receiver = Receiver(
            st.db,
            st.table,
            st.queues,
            st.keys,
            st.secrets,
            st.wakeups,
            st.clock,
            self.consumer,
            st.due_feed,
            touch=self._received,
            attempts=st.receive_attempts,
            unblocked=unblocked,
        )

    @property
    def settler(self) -> Settler:
        """Deletes and visibility changes of received messages."""
        return self.receiver.settler

    def consumer(self, queue: str, hold_ms: int = 0, ahead_ms: int = 0) -> Consumer:
        """A consumer of one queue; share it between the coroutines of one process. ``hold_ms``,
        ``ahead_ms``: a daemon's margin past a timeout and its take-ahead (engine/take/step.py TakeOptions)."""
        w, st = self.st.settings.worker, self.st
        return Consumer(
            st.db,
            st.table,
            st.queues,
            st.dead_letters,  # the router poisons as the poison store does (take.step Poisoner)
            st.keys,
            st.clock,
            queue,
            tolerance_ms=w.clock_tolerance_ms,
            rescan_ms=w.rescan_interval_ms,
            lookahead_ms=max(1000, 2 * w.max_poll_interval_ms),
            hold_ms=hold_ms,
            ahead_ms=ahead_ms,
        )

    def served(self, queue: str) -> None:
        """A daemon polls ``queue``: it is in use, like a receive (idle expiry, engine/cluster/activity.py)."""
        self.st.activity.touch(queue)

    def _received(self, queue: str) -> None:
        """A receive on ``queue``: it is active (idle expiry, engine/cluster/activity.py)."""
        self.st.activity.touch(queue)

"""In-process wake-ups for parked long polls (engine/delivery/receive.py).

A long poll that found nothing parks on its queue's ``QueueWaiter``. What wakes it at once:
  - a send from this process (``Casque.send``/``send_many``), due now or, via a timer, when due;
  - a visibility change or a receive in this process (the message becomes visible again at a
    known time: a timer at that time);
  - the consumer's own peeks, which see messages due within the lookahead (a timer at their due);
  - a wake hint from another process (its ``notify`` calls arrive here), or, when the hint was lost,
    the due feed's entry for the queue (engine/wake/due_feed.py: one read a second per process).
A parked poll reads nothing and arms no timer of its own while it waits: its deadline is an entry in
the process's ``Deadlines``, which keeps one loop timer for all of them. A timer is armed only for a
due time someone announced.

A message available now wakes *one* parked poll of its queue (``wake(1)``), not all of them, and
not the polls of any other queue (a waiter per queue): N polls parked on N queues, one send, one
poll reads. A poll that took a full batch passes the wake on to the next parked one (there may be
more), and so does a woken poll that leaves without looking (cancelled); a timer (a due time this
process knows) still wakes every poll of the queue.

A send of this process may hand its messages to a parked poll instead of waking it (``catch``,
engine/wake/catch.py): the poll is taken off the parked list and gets the messages, written in flight for it.

A waiter exists only while some receive is running on its queue, so memory is bounded by the
number of concurrent long polls, never by the number of queues or messages sent. A daemon's
consumers park on waiters of their own (service/idle_watch.py), whose ``scout`` keeps watch.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable

from daemon.base.clock import Clock
from daemon.engine.wake.catch import Catch

MAX_TIMERS = 1024
#: uvloop fires a timer up to its millisecond resolution early: a deadline within it counts as come (otherwise the
#: timer is re-armed for the same instant and fires again and again until the clock gets there, a busy loop).
RESOLUTION_S = 0.001


class Deadlines:
    """When parked polls give up, for every waiter of a process: one loop timer, armed for the earliest deadline,
    instead of one per poll (a poll woken early leaves its entry, dropped when it comes round)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._count = 0
        self._handle: asyncio.Handle | None = None  # uvloop's call_at of a time passed is a plain Handle: no when()
        self._armed_at = 0.0

    def add(self, timeout_s: float, fut: asyncio.Future[None]) -> None:
        """Resolve ``fut`` (if still pending) ``timeout_s`` from now."""
        loop = asyncio.get_running_loop()
        at = loop.time() + timeout_s
        self._count += 1
        heapq.heappush(self._heap, (at, self._count, fut))
        if self._handle is None or at < self._armed_at:
            self._arm(loop)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        if self._heap:
            self._armed_at = self._heap[0][0]
            self._handle = loop.call_at(self._armed_at, self._fire)

    def _fire(self) -> None:
        self._handle = None
        loop = asyncio.get_running_loop()
        now = loop.time() + RESOLUTION_S
        while self._heap and (self._heap[0][0] <= now or self._heap[0][2].done()):
            _, _, fut = heapq.heappop(self._heap)
            if not fut.done():
                fut.set_result(None)
        self._arm(loop)


class QueueWaiter:
    def __init__(self, clock: Clock, deadlines: Deadlines | None = None) -> None:
        self.clock = clock
        self.deadlines = deadlines or Deadlines()
        self.generation = 0  # bumped by every wake: a poll that saw gen N parks only if still N
        self.receivers = 0
        self.scout: object | None = None  # who keeps watch among a daemon's consumers (its slot)
        self._parked: list[asyncio.Future[None]] = []
        self._catches: dict[asyncio.Future[None], Catch] = {}  # parked polls that take handed messages
        self._timers: list[int] = []
        self._handle: asyncio.TimerHandle | None = None
        self._handle_due: int | None = None

    async def park(self, generation: int, timeout_s: float | None, catch: Catch | None = None) -> None:
        """Sleep until woken, claimed (``catch.claimed``: a send hands it messages) or ``timeout_s`` (None: until
        woken); return at once if a wake came after ``generation``."""
        if generation != self.generation or (timeout_s is not None and timeout_s <= 0):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._parked.append(fut)
        if catch is not None:
            self._catches[fut] = catch
        if timeout_s is not None:
            self.deadlines.add(timeout_s, fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # woken, then cancelled before it could look: pass it on
                self.handoff()
            raise
        finally:
            self._catches.pop(fut, None)
            if fut in self._parked:
                self._parked.remove(fut)

    def claim_scout(self, who: object) -> bool:
        """``who`` keeps watch if nobody does; True if ``who`` is the scout."""
        if self.scout is None:
            self.scout = who
        return self.scout == who

    def resign_scout(self, who: object) -> None:
        """``who`` stops keeping watch (if it did); the next to claim the role takes it."""
        if self.scout == who:
            self.scout = None

    def catch(self) -> Catch | None:
        """Claim a parked poll that takes handed messages, the oldest: off the parked list at once, so nothing else
        reaches it. None: no such poll."""
        fut = next((f for f in self._parked if not f.done() and f in self._catches), None)
        if fut is None:
            return None
        self._parked.remove(fut)
        found = self._catches.pop(fut)
        found.claimed = True
        fut.set_result(None)
        return found

    def wake(self, n: int | None = None) -> None:
        """Something may be available: ``n`` parked polls look again, oldest first (None: every one). One message
        wakes one poll (``n=1``), and a poll between its look and its park looks again: the generation moved."""
        self.generation += 1
        if n is None:
            parked, self._parked = self._parked, []
            for fut in parked:
                if not fut.done():
                    fut.set_result(None)
            return
        for _ in range(n):
            self.handoff()

    def handoff(self) -> None:
        """Wake one parked poll, the oldest: one message may be there."""
        live = [fut for fut in self._parked if not fut.done()]
        if not live:
            self._parked = []
            return
        fut, self._parked = live[0], live[1:]
        fut.set_result(None)

    def at(self, due_ms: int) -> None:
        """Wake everyone at ``due_ms`` (now, if it has passed)."""
        now = self.clock.now_ms()
        if due_ms <= now:
            self.wake()
            return
        heapq.heappush(self._timers, due_ms)
        if len(self._timers) > MAX_TIMERS:  # the latest ones are re-found by the polls' peeks
            # trimmed to half, so the O(n log n) trim runs once per MAX_TIMERS / 2 new timers, not
            # on every delivery once full (bench/sqs_fifo.py)
            self._timers = heapq.nsmallest(MAX_TIMERS // 2, self._timers)
        self._arm(now)

    def _arm(self, now: int) -> None:
        if not self._timers:
            return
        first = self._timers[0]
        if self._handle_due is not None and self._handle_due <= first:
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle = asyncio.get_running_loop().call_later((first - now) / 1000, self._fire)
        self._handle_due = first

    def _fire(self) -> None:
        self._handle = self._handle_due = None
        now = self.clock.now_ms()
        if self._timers and self._timers[0] > now:  # fired early (RESOLUTION_S): a wake now would look for nothing
            self._arm(now)
            return
        while self._timers and self._timers[0] <= now:
            heapq.heappop(self._timers)
        self.wake()
        self._arm(now)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._handle_due = None
        self._timers.clear()


#: Told of every message that becomes available: (due_ms, placement bits of its id or None).
Listener = Callable[[int, "int | None"], None]


class Wakeups:
    """The waiters of the queues that have a receive running in this process, and the listeners
    (a daemon's consumers) that want to hear of every send to a queue they serve."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._waiters: dict[str, QueueWaiter] = {}
        self.deadlines = Deadlines()  # one timer for every parked poll's deadline
        self._listeners: dict[str, list[Listener]] = {}

    def subscribe(self, queue: str, listener: Listener) -> Callable[[], None]:
        """Call ``listener(due_ms, placement)`` for every notify on ``queue``; returns the
        unsubscribe function. The listener runs in the notifier's call: it must not block."""
        self._listeners.setdefault(queue, []).append(listener)

        def unsubscribe() -> None:
            listeners = self._listeners.get(queue, [])
            if listener in listeners:
                listeners.remove(listener)
            if not listeners:
                self._listeners.pop(queue, None)

        return unsubscribe

    def enter(self, queue: str) -> QueueWaiter:
        w = self._waiters.get(queue)
        if w is None:
            w = self._waiters[queue] = QueueWaiter(self.clock, self.deadlines)
        w.receivers += 1
        return w

    def leave(self, queue: str, w: QueueWaiter) -> None:
        w.receivers -= 1
        if w.receivers <= 0 and self._waiters.get(queue) is w:
            w.close()
            del self._waiters[queue]

    def notify(self, queue: str, due_ms: int, placement: int | None = None) -> None:
        """A message of ``queue`` is (or becomes, at ``due_ms``) available; ``placement`` (the low
        32 bits of its id, engine/storage/placement.py) names its shard when known. Free when nobody waits."""
        w = self._waiters.get(queue)
        if w is not None:
            if due_ms <= self.clock.now_ms():
                w.wake(1)
            else:
                w.at(due_ms)
        for listener in self._listeners.get(queue, ()):
            listener(due_ms, placement)

    def catch(self, queue: str) -> Catch | None:
        """A parked poll of ``queue`` in this process that takes messages handed to it (engine/wake/catch.py)."""
        w = self._waiters.get(queue)
        return None if w is None else w.catch()

    def watched(self) -> int:
        return len(self._waiters)

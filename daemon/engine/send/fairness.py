"""Fair queues: a tenant with a large backlog can't delay the others' messages.

On a standard queue, a message's group (SQS MessageGroupId) names its tenant. A group is *noisy*
when, among the sends this process made to the queue over the last ``window_ms``, it has at least
``floor`` and more than ``share`` of them (SQS's published rule counts in-flight messages the same
way: over 10 % and at least 30). A noisy group's messages are written one priority lane below the
one they asked for; consumers read a row's lanes highest first (engine/consume/consumer.py), so every quiet
tenant's message is taken before the noisy backlog, wherever it sits in due order, and the noisy
group still gets every turn the quiet ones leave. Order across a group's messages is not promised on
a standard queue, so moving some of them to another lane breaks nothing.

Each process judges by its own sends (no coordination): a tenant sending through several servers
is noisy on each of them by the same measure. What is kept is bounded: the queues sent to within the window
(``MAX_QUEUES`` idle ones besides) and ``MAX_GROUPS`` groups per queue and window (past it, unseen groups count as
quiet).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from daemon.base.clock import Clock
from daemon.base.lru import Lru

MAX_QUEUES = 1024  # idle queues whose windows are kept, besides those sent to within the window
MAX_GROUPS = 10_000


@dataclass
class _Window:
    started: int
    current: dict[str, int] = field(default_factory=dict)
    previous: dict[str, int] = field(default_factory=dict)
    current_total: int = 0
    previous_total: int = 0


class NoisyGroups:
    def __init__(self, clock: Clock, window_ms: int = 10_000, share: float = 0.10, floor: int = 30) -> None:
        self.clock = clock
        self.half_ms = window_ms // 2
        self.share = share
        self.floor = floor
        self._queues: Lru[str, _Window] = Lru(MAX_QUEUES, keep_s=window_ms / 1000)  # every queue sent to in the window

    def observe(self, queue: str, group: str) -> bool:
        """Count one send of ``group`` to ``queue``; True if the group is noisy now."""
        now = self.clock.now_ms()
        w = self._queues.get(queue)
        if w is None:
            w = _Window(now)
            self._queues.put(queue, w)
        if now - w.started >= self.half_ms:  # two half windows: the older is dropped as a whole
            stale = now - w.started >= 2 * self.half_ms
            w.previous, w.previous_total = ({}, 0) if stale else (w.current, w.current_total)
            w.current, w.current_total, w.started = {}, 0, now
        if group in w.current or len(w.current) < MAX_GROUPS:
            w.current[group] = w.current.get(group, 0) + 1
        w.current_total += 1
        mine = w.current.get(group, 0) + w.previous.get(group, 0)
        return mine >= self.floor and mine > self.share * (w.current_total + w.previous_total)

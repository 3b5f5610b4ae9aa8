"""The one source of time.

Every timestamp casque writes (due times, lock times, cursors) comes from a ``Clock``. Tests give one
consumer a clock that runs seconds ahead or behind, and the lock protocol must still hold (see
docs/design.md, "Clock tolerance").
"""

from __future__ import annotations

import time


class Clock:
    """Wall-clock milliseconds since the epoch, with an optional fixed offset (for skew tests)."""

    def __init__(self, offset_ms: int = 0) -> None:
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def now(self) -> float:
        """Seconds since the epoch, as ``time.time()`` would give with this clock's offset."""
        return self.now_ms() / 1000.0

    def elapsed_ms(self) -> int:
        """A monotonic reading in ms, for measuring how long something took (a lock's age): an NTP
        step of the wall clock must not make an old lock look young."""
        return time.monotonic_ns() // 1_000_000


class ManualClock(Clock):
    """A clock that only moves when told to: for the pure tests of trigger and placement math."""

    def __init__(self, start_ms: int) -> None:
        super().__init__(0)
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def elapsed_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        self._now += ms


SYSTEM_CLOCK = Clock()

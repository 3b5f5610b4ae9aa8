"""Clocks for fault tests, built on the engine's own time seam (daemon/base/clock.py)."""

from __future__ import annotations

from daemon.base.clock import ManualClock


class SteppingClock(ManualClock):
    """Time that moves ``step_ms`` every time anyone looks at it: a consumer whose process (or the
    node it waits on) stalls between each two steps of a take, as SIGSTOP or a long GC makes it.
    With ``step_ms = 0`` it is a plain manual clock."""

    def __init__(self, start_ms: int, step_ms: int = 0) -> None:
        super().__init__(start_ms)
        self.step_ms = step_ms

    def now_ms(self) -> int:
        self._now += self.step_ms
        return self._now

    def elapsed_ms(self) -> int:
        return self.now_ms()

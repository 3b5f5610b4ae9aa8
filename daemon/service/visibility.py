"""How long a taken message stays invisible, and keeping it so while the daemon holds it.

A taken message's timeout column falls due at a time written with the *taking* daemon's clock, but
every other consumer compares it with its own clock, which may lead ours by up to
``worker.clock_tolerance``. So a handler must have finished, and its outcome (ack, retry, poison)
must be written, ``clock_tolerance`` before the column falls due by our clock; otherwise a consumer
with a faster clock takes it while it still runs. The dispatcher therefore asks the take to place the
column ``hold`` = tolerance + 0.5 s beyond the timeout (``Consumer.hold_ms``): the handler gets its
whole timeout, the column falls due ``hold`` after it, and a message whose daemon died comes back
``timeout + hold`` after it was taken.

Time a message spends waiting (for its task's concurrency slot, for a sync thread, or in a sync
thread that runs past its timeout and can't be stopped) must not use up that timeout: ``kept`` moves
the column forward while the daemon holds the message but no deadline governs it. A column is only
ever moved while no other consumer can see it as due; past that point moving it would write a second
live copy next to the one another consumer took.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from daemon.base.clock import Clock
from daemon.base.errors import CasqueError
from daemon.base.model import Message
from daemon.engine.delivery.acks import Acker

OUTCOME_MS = 500  # time left to write a handler's outcome after its deadline
LEAD_MS = 1000  # how long before the last safe moment a held column is moved


class Visibility:
    def __init__(self, acker: Acker, clock: Clock, tolerance_ms: int) -> None:
        self.acker = acker
        self.clock = clock
        self.guard_ms = tolerance_ms
        self.hold_ms = self.guard_ms + OUTCOME_MS

    def runway_ms(self, m: Message) -> int:
        """How long a handler of ``m`` may still run (<= 0: too late to start it)."""
        return m.invisible_until - self.clock.now_ms() - self.hold_ms

    def held(self, m: Message) -> bool:
        """True while no consumer's clock (within the tolerance) can see ``m``'s column as due, so
        it may still be rewritten (retry, extend) without leaving a second live copy."""
        return self.clock.now_ms() < m.invisible_until - self.guard_ms

    async def extend_ms(self, m: Message, run_ms: int) -> None:
        """Let a handler run ``run_ms`` more from now: the column moves to now + run + hold."""
        await self.acker.extend_ms(m, run_ms + self.hold_ms)

    @contextlib.asynccontextmanager
    async def kept(self, m: Message, log: Any) -> AsyncIterator[None]:
        """Keep ``m`` invisible for as long as the block runs, whatever its timeout."""
        done = asyncio.Event()
        keeper = asyncio.create_task(self._keep(m, log, done))
        try:
            yield
        finally:
            done.set()
            await keeper  # never cancelled mid-write: a half-known column position would be unsafe

    async def _keep(self, m: Message, log: Any, done: asyncio.Event) -> None:
        lead = min(LEAD_MS, m.timeout_ms // 4)
        while not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), timeout=max(0, self.runway_ms(m) - lead) / 1000)
                return
            except TimeoutError:
                pass
            if self.runway_ms(m) <= 0:
                log.error("hold_lost", reason="too late to keep it invisible", comes_back_at_ms=m.invisible_until)
                return
            try:
                await self.extend_ms(m, m.timeout_ms)
            except CasqueError as exc:
                log.error("extend_failed", error=str(exc), comes_back_at_ms=m.invisible_until)
                return

"""Waiting until a long poll is parked: the condition the wake-up tests start from."""

from __future__ import annotations

import asyncio
import time

from daemon.engine.client import Casque


async def parked(cq: Casque, queue: str, deadline_s: float = 10.0) -> None:
    """Wait until a receive on ``queue`` is parked (polls a condition, with a deadline)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        w = cq.stores.wakeups._waiters.get(queue)
        if w is not None and w._parked:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no receive parked on {queue} within {deadline_s}s")

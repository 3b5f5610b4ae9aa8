"""When CPython's cyclic garbage collector walks the whole heap in ``casque serve``.

CPython runs a full collection once the objects promoted to its oldest generation since the last one number a
quarter of all it tracks. Long polls defeat that rule: a parked poll's objects (its request, its coroutines) live up to
20 s, long enough to be promoted, and are then freed by reference counting, not by the collector. So the rule fires
every few seconds whatever the number of parked polls, and each time walks all of them while nothing is served: every
message sent meanwhile waits out the pause (docs/design.md, "Long polls").

What the collector is for, cycles, does not need that pace: the young generations still collect at CPython's
defaults, and the whole heap is collected once every ``FULL_EVERY_S``.
"""

from __future__ import annotations

import asyncio
import gc

FULL_EVERY_S = 300.0
_NEVER = 1_000_000_000  # young collections between two full ones: not reached


async def collect_full_every(seconds: float = FULL_EVERY_S) -> None:
    """For the server's life: CPython's own full collections off, one every ``seconds`` instead (restored after)."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, _NEVER)
    try:
        while True:
            await asyncio.sleep(seconds)
            gc.collect()
    finally:
        gc.set_threshold(young, middle, old)

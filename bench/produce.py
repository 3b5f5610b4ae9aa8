"""Producers: send N messages as fast as possible, or at a fixed rate, through any system's client.

A system plugs in a ``Sender``: ``await send(count, t)`` sends ``count`` no-op messages whose
payload carries ``t``, the wall-clock time just before the send (the start of send→start latency).
The same two loops drive casque and every peer, so they see the same offered load.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Sender = Callable[[int, float], Awaitable[None]]


@dataclass
class Sent:
    count: int
    first: float  # wall time of the first send call
    last: float  # wall time the last send returned

    @property
    def rate(self) -> float:
        return self.count / max(1e-9, self.last - self.first)


async def send_fast(send: Sender, n: int, chunk: int = 500, senders: int = 4) -> Sent:
    """``senders`` concurrent loops, each sending chunks of ``chunk`` until ``n`` are sent."""
    remaining = [n]
    first = time.time()

    async def loop() -> None:
        while remaining[0] > 0:
            k = min(chunk, remaining[0])
            remaining[0] -= k
            await send(k, time.time())

    await asyncio.gather(*(loop() for _ in range(senders)))
    return Sent(n, first, time.time())


async def send_paced(send: Sender, n: int, rate: float, tick: float = 0.01, max_pending: int = 64) -> Sent:
    """Offer ``rate`` messages/s in small sends every ``tick`` seconds (open loop: a slow send does
    not slow the offered rate, up to ``max_pending`` sends in flight)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    first = time.time()
    sent = 0
    pending: set[asyncio.Task[None]] = set()
    gate = asyncio.Semaphore(max_pending)

    async def one(k: int) -> None:
        try:
            await send(k, time.time())
        finally:
            gate.release()

    i = 0
    while sent < n:
        i += 1
        target = min(n, int(rate * (loop.time() - start)) + 1)
        k = target - sent
        if k > 0:
            await gate.acquire()
            sent += k
            t = asyncio.create_task(one(k))
            pending.add(t)
            t.add_done_callback(pending.discard)
        await asyncio.sleep(max(0.0, start + i * tick - loop.time()))
    if pending:
        await asyncio.gather(*list(pending))
    return Sent(n, first, time.time())

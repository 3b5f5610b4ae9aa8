"""Counting lost and duplicated messages from what consumers actually got, for engine-level tests
(the daemon tests count from the handlers' record file instead: daemon/testing/chaos.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from daemon.engine.consume.consumer import Consumer


async def drain_ids(consumer: Consumer, limit: int = 100, rounds: int = 3) -> list[str]:
    """Fetch until a few full rounds come back empty; the id of every delivery, in order."""
    out: list[str] = []
    empty = 0
    while empty < rounds:
        got = await consumer.fetch(limit)
        out += [str(m.id) for m in got]
        empty = 0 if got else empty + 1
    return out


def ledger(sent: Iterable[str], delivered: Iterable[str]) -> tuple[int, int]:
    """(lost, duplicated): ids sent and never delivered, and deliveries beyond the first."""
    counts = Counter(delivered)
    return len(set(sent) - set(counts)), sum(n - 1 for n in counts.values())

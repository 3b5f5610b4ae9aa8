"""The byte budget of one take: how many messages, and how many payload bytes, one take batch may write.

A standard queue's take marks its messages in flight narrow, but a FIFO take rewrites each message whole and a
schedule's take writes its next occurrence, payload and all, in one single-partition batch; the budget counts every
payload as written (the bound holds for the worst).  Cassandra refuses a request or mutation past 16 MiB
whole, which would stall the row for good: so a take is bounded by bytes as well as by count.
"""

from __future__ import annotations

from typing import Any

#: Payload bytes one take may write (a FIFO message rewritten; a schedule's next occurrence counts too):
#: a quarter of Cassandra's 16 MiB native request and mutation limits, so a take is never refused.
TAKE_BYTES = 4 << 20
#: What a stored message costs in a take besides its payload (ids, task, headers, error, trigger).
MESSAGE_OVERHEAD = 512


class TakeBudget:
    """How much one take may still hold: a count (the caller's batch size) and payload bytes. The
    first message is always kept, so a row never stalls on one large message (payloads are capped
    at 4 MiB, engine/queues/store.py, so one message alone always fits)."""

    def __init__(self, count: int, size: int = TAKE_BYTES) -> None:
        self.count = count
        self.size = size
        self.used_count = 0
        self.used_size = 0

    def full(self) -> bool:
        return self.used_count >= self.count or self.used_size >= self.size

    def count_left(self) -> int:
        return max(0, self.count - self.used_count)

    def fit(self, rows: list[Any]) -> list[Any]:
        """The leading rows that still fit; they are counted as used."""
        kept: list[Any] = []
        for r in rows:
            cost = take_bytes(r)
            if self.used_count >= self.count or (self.used_count and self.used_size + cost > self.size):
                break
            kept.append(r)
            self.used_count += 1
            self.used_size += cost
        return kept


def take_bytes(r: Any) -> int:
    """What taking stored row ``r`` may add to the batch: its payload (a FIFO message rewritten at its position),
    and once more for a schedule's next occurrence written in the same batch."""
    payload = len(r.payload or b"")
    return payload * (2 if r.trigger else 1) + len(r.last_error or "") + len(r.trigger or "") + MESSAGE_OVERHEAD

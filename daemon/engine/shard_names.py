"""The shards a consumer was told to look at: per shard, the due times wake-ups and our own writes named.

A name is only a reason to look sooner (a fetch visits a named shard first once its due time has
come, and until then it is a timer); a lost one costs latency, never a message (engine/hints.py).
"""

from __future__ import annotations

import heapq

#: Wake-up due times remembered per shard (the earliest ones).
MAX_HINTS = 256


class ShardNames:
    """Per shard, a heap of the due times named for it; and when the last wake-up arrived."""

    def __init__(self) -> None:
        self._heaps: dict[int, list[int]] = {}  # shard -> heap of the due times wake-ups named
        self.hinted_at: int | None = None  # when the last wake-up arrived (monotonic ms)

    def name(self, shard: int, due_ms: int) -> None:
        """At most ``MAX_HINTS`` per shard are kept, the earliest: a later one is found by the read
        that takes the earlier ones."""
        heap = self._heaps.setdefault(shard, [])
        heapq.heappush(heap, due_ms)
        if len(heap) > MAX_HINTS:
            self._heaps[shard] = heapq.nsmallest(MAX_HINTS // 2, heap)

    def due(self, horizon: int) -> list[int]:
        """The shards named with something due by ``horizon``."""
        return [s for s, heap in self._heaps.items() if heap and heap[0] <= horizon]

    def first(self, shard: int) -> int:
        """The earliest due time named for ``shard`` (one of ``due``'s)."""
        return self._heaps[shard][0]

    def visited(self, shard: int, horizon: int) -> None:
        """A fetch visits ``shard`` now: forget the names it covers."""
        heap = self._heaps.get(shard)
        while heap and heap[0] <= horizon:
            heapq.heappop(heap)
        if not heap:
            self._heaps.pop(shard, None)

    def earliest(self) -> list[int]:
        """Each named shard's earliest due time."""
        return [h[0] for h in self._heaps.values() if h]

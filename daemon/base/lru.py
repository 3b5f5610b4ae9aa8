"""A map that drops its least recently used entries.

Every per-queue cache of a process (queue settings, attributes, pull consumers, activity marks)
is one of these, so a process that has touched a million queues holds only the queues it uses now:
its memory follows the queues active now, not the queues that exist (docs/design.md, "Many
queues"). With ``keep_s``, an entry used within that long is never dropped, however many there are:
the cache sizes itself to what is in use (owners online), and ``limit`` is only how many idle ones
it keeps besides. ``on_evict`` lets the owner release what the entry held elsewhere (e.g. the
queue's metric series).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

#: An entry used within this long is in use: an owner online polls its queue at least every 20 s.
ONLINE_S = 60.0

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    def __init__(
        self,
        limit: int,
        on_evict: Callable[[K, V], None] | None = None,
        keep_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1:
            raise ValueError(f"an LRU limit must be at least 1, got {limit}")
        self.limit = limit
        self.on_evict = on_evict
        self.keep_s = keep_s
        self.clock = clock
        self._items: OrderedDict[K, V] = OrderedDict()
        self._used: dict[K, float] = {}  # with keep_s: when each entry was last used (monotonic)

    def get(self, key: K) -> V | None:
        """The entry (now the most recently used), or None."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
            if self.keep_s:
                self._used[key] = self.clock()
        return value

    def peek(self, key: K) -> V | None:
        """The entry without touching its recency."""
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        now = self.clock()
        if self.keep_s:
            self._used[key] = now
        while len(self._items) > self.limit:
            oldest = next(iter(self._items))
            if self.keep_s and now - self._used[oldest] < self.keep_s:
                break  # the oldest is in use, and so is every later one
            old_value = self._items.pop(oldest)
            self._used.pop(oldest, None)
            if self.on_evict is not None:
                self.on_evict(oldest, old_value)

    def replace(self, key: K, value: V) -> None:
        """A new value for an entry present, its recency and use untouched (absent: nothing)."""
        if key in self._items:
            self._items[key] = value

    def in_use(self, key: K) -> bool:
        """Whether the entry was used within ``keep_s``."""
        return self.clock() - self._used.get(key, float("-inf")) < self.keep_s

    def pop(self, key: K) -> V | None:
        self._used.pop(key, None)
        return self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def values(self) -> list[V]:
        return list(self._items.values())

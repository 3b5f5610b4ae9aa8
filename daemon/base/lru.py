"""A size-bounded map that drops its least recently used entries.

Every per-queue cache of a process (queue settings, attributes, pull consumers, activity marks)
is one of these, so a process that has touched a million queues holds only the last ``limit`` of
them: its memory follows the queues active now, not the queues that exist (docs/design.md,
"Many queues"). ``on_evict`` lets the owner release what the entry held elsewhere (e.g. the
queue's metric series).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    def __init__(self, limit: int, on_evict: Callable[[K, V], None] | None = None) -> None:
        if limit < 1:
            raise ValueError(f"an LRU limit must be at least 1, got {limit}")
        self.limit = limit
        self.on_evict = on_evict
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The entry (now the most recently used), or None."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def peek(self, key: K) -> V | None:
        """The entry without touching its recency."""
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.limit:
            old_key, old_value = self._items.popitem(last=False)
            if self.on_evict is not None:
                self.on_evict(old_key, old_value)

    def pop(self, key: K) -> V | None:
        return self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def values(self) -> list[V]:
        return list(self._items.values())

"""casque serve's pace for CPython's full collections (daemon/http/collector.py): objects that live a while and are
then freed by reference counting, as a parked long poll's are, do not set off full collections; cycles are still
freed, by the timer's."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable

from daemon.http.collector import collect_full_every


def full_collections_during(work: Callable[[], None]) -> int:
    seen: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    gc.callbacks.append(count)
    try:
        work()
    finally:
        gc.callbacks.remove(count)
    return len(seen)


def parked_polls() -> None:
    """Waves of 5,000 polls of 40 containers each: they park, long enough to reach the oldest generation, and leave."""
    for _ in range(20):
        parked: list[list[list[int]]] = [[[] for _ in range(40)] for _ in range(5_000)]
        del parked


class Cycle:
    def __init__(self) -> None:
        self.me = self


async def test_parked_objects_set_off_no_full_collection_and_the_timer_frees_cycles() -> None:
    gc.collect()
    assert full_collections_during(parked_polls) > 0  # CPython's own rule, for contrast

    paced = asyncio.create_task(collect_full_every(0.5))
    await asyncio.sleep(0)  # the pace is set
    try:
        cycle = Cycle()
        gone = weakref.ref(cycle)
        gc.collect(1)  # it survives the young generations into the oldest, then becomes garbage there
        del cycle
        assert full_collections_during(parked_polls) == 0
        assert gone() is not None  # only a full collection frees it
        for _ in range(40):
            await asyncio.sleep(0.1)
            if gone() is None:
                break
        assert gone() is None
    finally:
        paced.cancel()
        await asyncio.gather(paced, return_exceptions=True)
    assert gc.get_threshold()[2] < 1_000_000  # CPython's pace back

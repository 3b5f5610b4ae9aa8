"""base/turns.py, the group commit of sends and deletes: its contract, with a call of our own that can fail (the
engine's uses are tested with Cassandra: tests/test_engine.py for a row's sends, tests/test_receive.py for a queue's
deletes)."""

from __future__ import annotations

import asyncio

from daemon.base.errors import StorageUnavailable
from daemon.base.turns import TurnGroups


async def test_the_calls_of_one_turn_are_one_each_gets_its_answer_or_error_and_a_cancelled_one_leaves_it() -> None:
    """Three callers in one turn are one call with their items; each gets that call's answer, or its error; one
    cancelled while the call is in flight does not cancel it for the others. A call of the next turn is another."""
    calls: list[list[int]] = []
    release = asyncio.Event()

    async def run(items: list[int]) -> int:
        calls.append(items)
        await release.wait()
        if 0 in items:
            raise StorageUnavailable("the node did not answer")
        return sum(items)

    groups: TurnGroups[int, int] = TurnGroups()
    for first in (0, 1):
        callers = [asyncio.ensure_future(groups.join("row", [first + i], run)) for i in range(3)]
        await asyncio.sleep(0)  # they start in one turn
        await asyncio.sleep(0)  # the next: their call begins
        callers[1].cancel()
        release.set()
        out = await asyncio.gather(*callers, return_exceptions=True)
        release.clear()
        assert isinstance(out[1], asyncio.CancelledError)
        if first == 0:
            assert all(isinstance(e, StorageUnavailable) for e in (out[0], out[2])), out
        else:
            assert (out[0], out[2]) == (6, 6)
    assert calls == [[0, 1, 2], [1, 2, 3]]
    release.set()
    other = await groups.join("row", [5], run)  # alone in its turn: a call of its own
    assert other == 5 and calls[-1] == [5]

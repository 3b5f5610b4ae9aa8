"""The take's frontier: a drain does not read again the tombstones of what it just took.

A row's cursor stays a clock tolerance (5 s) behind now, so a queue drained within seconds of the
sends had every take read from the cursor across the tombstones of everything taken before it
(receive+delete over SQS: reads of 7 ms in a 4,000-message drain). A committed take now records
how far it took (``ReadStart.frontier``) and later reads start after it. These tests run the real
engine with every message read of one client traced by Cassandra (tombstone cells scanned, read
from the node's own trace), and check what the skip must not cost: a message written behind the
frontier by a producer whose clock lags (within the tolerance) is still delivered, at once when a
wake-up names it, within ``FRONTIER_MS`` when nothing does; nothing is lost or delivered twice.
"""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from daemon.base.clock import Clock
from daemon.base.config import Settings
from daemon.engine.client import Casque
from daemon.engine.consume.consumer import Consumer
from daemon.engine.send.producer import Job
from daemon.engine.storage.placement import id_due_ms
from daemon.engine.take import read_start
from tests.test_tombstones import tombstones_in

N = 2_000


@pytest.fixture
async def traced(settings: Settings) -> AsyncIterator[tuple[Casque, list[int]]]:
    """A client whose message reads (takes, peeks, looks) are traced: the tombstones each scanned."""
    client = await Casque.connect(settings)
    scanned: list[int] = []
    t = client.stores.table
    lanes = (t.fifo_reads, t.in_place_reads)  # a FIFO queue's or a standard queue's
    reads = {id(s) for r in lanes for s in (r.read_due, r.read_due_after, r.peek, r.peek_after, r.peek_rows)}
    run = client.db.run

    async def traced_run(stmt: Any, params: Any = None, timeout: Any = None, timestamp: Any = None) -> Any:
        if id(stmt) not in reads:
            return await run(stmt, params, timeout, timestamp)
        assert client.db.session is not None
        rs = await asyncio.to_thread(client.db.session.execute, stmt, params, trace=True)
        scanned.append(tombstones_in(await asyncio.to_thread(rs.get_query_trace, max_wait_sec=10)))
        return list(rs.current_rows)

    client.db.run = traced_run  # type: ignore[method-assign]
    yield client, scanned
    await client.close()


async def fill_and_drain(cq: Casque, queue: str) -> list[int]:
    """Send ``N`` messages (due now, in chunks: distinct due times), let them age past the frontier's
    lag, then take and ack them 100 at a time; each message's delivery count (all must be 1)."""
    await cq.create_queue(queue, shards=1, buckets=1, timeout=30)
    for i in range(0, N, 10):
        await cq.send_many(queue, [Job("t", j) for j in range(i, i + 10)])
    await asyncio.sleep((read_start.FRONTIER_LAG_MS + 100) / 1000)  # every message is older than the lag
    consumer = cq.consumer(queue)
    seen: dict[int, int] = {}
    while len(seen) < N:
        msgs = await consumer.fetch(100, 0)
        assert msgs, f"the queue ran dry after {len(seen)} of {N}"
        for m in msgs:
            seen[m.payload] = seen.get(m.payload, 0) + 1
        await cq.stores.acker.ack(msgs)
    return list(seen.values())


async def test_a_drain_reads_past_what_it_took_not_across_its_tombstones(
    traced: tuple[Casque, list[int]], queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cq, scanned = traced
    counts = await fill_and_drain(cq, queue_name)
    assert sorted(set(counts)) == [1], "a message delivered twice"
    with_frontier = (max(scanned), sum(scanned), len(scanned))
    scanned.clear()
    monkeypatch.setattr(read_start, "FRONTIER_MS", 0)  # forgotten at once: every read starts at the cursor
    counts = await fill_and_drain(cq, queue_name + "_cursor")
    assert sorted(set(counts)) == [1]
    without = (max(scanned), sum(scanned), len(scanned))
    print(f"tombstones scanned (worst read, all reads, reads): frontier {with_frontier}, cursor only {without}")
    assert without[0] >= N // 2, "the drain's tombstones are really there, a read from the cursor crosses them"
    # A read from the frontier crosses at most the tombstones of one send's due millisecond, and the
    # frontier is forgotten once a second: one read from the cursor per second of the drain.
    assert with_frontier[1] <= without[1] // 4, (with_frontier, without)


async def take_until(cq: Casque, consumer: Consumer, payload: Any, within_s: float) -> float:
    """Fetch (and ack) until the message with ``payload`` comes; how long that took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within_s:
        msgs = await consumer.fetch(100, 0)
        await cq.stores.acker.ack(msgs)
        if any(m.payload == payload for m in msgs):
            return time.monotonic() - t0
        await asyncio.sleep(0.02)  # a consumer's poll interval
    raise AssertionError(f"{payload!r} not delivered within {within_s} s")


async def frontier_set(cq: Casque, queue: str) -> tuple[Consumer, tuple[int, Any]]:
    """Fill a 1 x 1 queue, take all of it: its consumer and the row's frontier, checked set."""
    await cq.create_queue(queue, shards=1, buckets=1, timeout=30)
    await cq.send_many(queue, [Job("t", i) for i in range(50)])
    await asyncio.sleep((read_start.FRONTIER_LAG_MS + 100) / 1000)
    consumer = cq.consumer(queue)
    assert len(await consumer.fetch(100, 0)) == 50
    frontier = consumer.rows[(0, 0)].start.frontier.get(0)
    assert frontier is not None, "the take set no frontier"
    return consumer, frontier


@pytest.fixture
async def lagging(settings: Settings) -> AsyncIterator[Casque]:
    """A producer whose clock is 2 s behind (within the 5 s tolerance), that sends no wake hint. Connected before
    the test sets a frontier: a connect on a loaded box can take longer than the 2 s its sends land behind."""
    s = copy.deepcopy(settings)
    s.hints.send = False
    s.hints.listen = False
    client = await Casque.connect(s, clock=Clock(-2_000))
    yield client
    await client.close()


async def send_late(lagging: Casque, queue: str) -> int:
    """The late producer's message; its due time."""
    return id_due_ms(uuid.UUID(await lagging.send(queue, "t", "late")))


async def test_a_lagging_producer_s_message_behind_the_frontier_comes_within_the_frontier_s_life(
    lagging: Casque, cq: Casque, queue_name: str
) -> None:
    consumer, frontier = await frontier_set(cq, queue_name)
    due = await send_late(lagging, queue_name)
    assert due < frontier[0], "the message was written behind the frontier"
    took = await take_until(cq, consumer, "late", within_s=read_start.FRONTIER_MS / 1000 + 3)
    print(f"unannounced message behind the frontier delivered after {took:.2f} s")
    assert took <= read_start.FRONTIER_MS / 1000 + 1


async def test_a_wake_up_for_a_message_behind_the_frontier_makes_the_next_read_start_at_the_cursor(
    lagging: Casque, cq: Casque, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The frontier must outlive the late send (slow on a loaded box), or it ages out on its own and the first read
    # below starts at the cursor: the wake-up, not the age, is what this test is about.
    monkeypatch.setattr(read_start, "FRONTIER_MS", 600_000)
    consumer, frontier = await frontier_set(cq, queue_name)
    due = await send_late(lagging, queue_name)
    assert due < frontier[0]
    assert [m.payload for m in await consumer.fetch(100, 0)] == [], "read from the frontier: not seen yet"
    consumer.hint(due, None)  # what a wake hint from the producer's process does
    assert consumer.rows[(0, 0)].start.frontier == {}, "the wake-up left the frontier in place"
    msgs = await consumer.fetch(100, 0)
    await cq.stores.acker.ack(msgs)
    assert [m.payload for m in msgs] == ["late"], "the next read did not start at the cursor"


async def test_a_receive_that_finds_nothing_past_the_frontier_looks_from_the_cursor_before_it_parks(
    lagging: Casque, cq: Casque, queue_name: str
) -> None:
    """A parked long poll re-reads only at its safety interval (15 s): a look that read from a frontier and found
    nothing must not be the one it parks on, or a lagging producer's unannounced message would wait that long."""
    await cq.create_queue(queue_name, shards=1, buckets=1, timeout=30)
    await cq.send_many(queue_name, [Job("t", i) for i in range(50)])
    await asyncio.sleep((read_start.FRONTIER_LAG_MS + 100) / 1000)
    got = await cq.receive(queue_name, max=50, wait=0, visibility=60)
    assert len(got) == 50
    due = await send_late(lagging, queue_name)
    assert due < max(d.message.due_ms for d in got), "written behind what the receive took"
    t0 = time.monotonic()
    late = await cq.receive(queue_name, max=10, wait=5)
    took = time.monotonic() - t0
    print(f"a receive found the unannounced message behind the frontier after {took:.2f} s")
    assert [d.message.payload for d in late] == ["late"]
    assert took < 1.0, "it parked on a look from the frontier"

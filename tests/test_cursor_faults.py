"""Writes behind a cursor (issue 14, item 3), made to happen against the real node and counted.

A message written at a due time below a row's stored cursor is never read by a take. Two ways to
get there: a send whose writes reach Cassandra long after the due time it computed (a long
send_many, keyed sends waiting on their LWTs), and a consumer host whose clock runs fast and
stores a cursor ahead of true time. The first is prevented (each write checks its own time);
the second is repaired by the low-watermark sweep (engine/consume/sweep.py).
"""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from daemon.base import metrics
from daemon.base.clock import ManualClock
from daemon.base.config import Settings
from daemon.engine.client import Casque
from daemon.engine.consume.sweep import SWEEP_LAG_MS, Sweeper
from daemon.engine.send.producer import Job

from .support.ledger import drain_ids as drain
from .support.ledger import ledger

Pair = tuple[Casque, ManualClock]


async def test_a_fast_consumer_clock_strands_messages_and_the_sweep_brings_them_back(
    manual: Pair, settings: Settings, queue_name: str
) -> None:
    """A consumer whose clock runs 8 s fast (beyond the 5 s tolerance) takes one message and stores
    a cursor 3 s ahead of true time; 20 messages sent next land behind it. A correct consumer can't
    see them (the fault); one sweep pass finds all 20, logs and counts them, and they are delivered."""
    cq, clock = manual
    await cq.create_queue(queue_name, shards=1)
    first = await cq.send(queue_name, "t", "first")
    fast = await Casque.connect(settings, clock=ManualClock(clock.now_ms() + 8000))
    try:
        delivered = await drain(fast.consumer(queue_name))
    finally:
        await fast.close()
    assert delivered == [first]
    await cq.stores.acker.ack([m for m in await cq.peek(queue_name, 1)])  # its timeout column: done with it
    sent = []
    for i in range(20):
        clock.advance(1)
        sent.append(await cq.send(queue_name, "t", i))
    clock.advance(10_000)
    consumer = cq.consumer(queue_name)
    stranded = await drain(consumer)
    assert stranded == [], "the fault did not happen: nothing was behind the cursor"
    swept_before = metrics.SWEPT.labels(queue_name)._value.get()
    clock.advance(SWEEP_LAG_MS)
    with capture_logs() as logs:
        found = await Sweeper(consumer).sweep()
    delivered = await drain(consumer)
    lost, duplicated = ledger(sent, delivered)
    print(
        f"sent={len(sent)} stranded_before_sweep={len(sent)} swept={found} delivered={len(delivered)} lost={lost} "
        f"duplicated={duplicated}"
    )
    assert (found, lost, duplicated) == (20, 0, 0)
    assert metrics.SWEPT.labels(queue_name)._value.get() - swept_before == 20
    assert sum(1 for e in logs if e["event"] == "message_below_cursor") == 20


async def test_sweep_leaves_taken_and_live_messages_alone(manual: Pair, queue_name: str) -> None:
    """The sweep must not move what a take already took: a busy row swept every few seconds
    while it is drained delivers each message exactly once and the sweep finds nothing."""
    cq, clock = manual
    await cq.create_queue(queue_name, shards=2)
    sent = []
    consumer = cq.consumer(queue_name)
    sweeper = Sweeper(consumer, lag_ms=1000)
    delivered: list[str] = []
    for _ in range(20):
        sent += await cq.send_many(queue_name, [Job("t", i) for i in range(25)])
        clock.advance(700)
        delivered += [str(m.id) for m in await consumer.fetch(30)]
        assert await sweeper.sweep() == 0
    delivered += await drain(consumer)
    assert ledger(sent, delivered) == (0, 0)


async def test_a_slow_send_many_writes_nothing_behind_a_cursor(manual: Pair, queue_name: str) -> None:
    """A send_many of 100 plain and 1000 keyed messages: the keyed ones go one by one after their
    LWTs. Ten seconds pass (the shared clock jumps) while they are being written, and a consumer
    drains the row meanwhile, storing a cursor 5 s before the new now. Writes that check their own
    time land at or after it; every message is delivered once."""
    cq, clock = manual
    await cq.create_queue(queue_name, shards=1)
    jobs = [Job("t", i) for i in range(100)] + [Job("t", i, key=f"k{i}") for i in range(1000)]
    sending = asyncio.create_task(cq.send_many(queue_name, jobs))
    keys = cq.stores.keys

    async def keyed_under_way() -> bool:
        return await keys.get(queue_name, "k5") is not None

    while not await keyed_under_way():
        assert not sending.done(), "send_many finished before the clock could move"
        await asyncio.sleep(0.01)
    clock.advance(10_000)  # the send is now 10 s old: two tolerances
    consumer = cq.consumer(queue_name)
    delivered = [str(m.id) for m in await consumer.fetch(400)]  # this take stores the cursor
    assert delivered and not sending.done(), "send_many finished before the consumer stored its cursor"
    sent = await sending
    delivered += await drain(consumer)
    delivered += await drain(cq.consumer(queue_name))
    lost, duplicated = ledger(sent, delivered)
    print(f"sent={len(sent)} delivered={len(delivered)} lost={lost} duplicated={duplicated}")
    assert (lost, duplicated) == (0, 0)

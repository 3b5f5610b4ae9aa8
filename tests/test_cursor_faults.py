"""Writes behind a cursor (issue 14, item 3), made to happen against the real node and counted.

A message written at a due time below a row's stored cursor is never read by a take. Two ways to
get there: a send whose writes reach Cassandra long after the due time it computed (a long
send_many, keyed sends waiting on their LWTs), and a consumer host whose clock runs fast and
stores a cursor ahead of true time. The first is prevented (each write checks its own time);
the second is repaired by the low-watermark sweep (engine/consume/sweep.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from daemon.base import metrics
from daemon.base.clock import ManualClock
from daemon.base.config import Settings
from daemon.base.model import QueueSettings
from daemon.engine.client import Casque
from daemon.engine.consume.consumer import Consumer
from daemon.engine.consume.sweep import SWEEP_LAG_MS, Sweeper, expiry_margin_ms
from daemon.engine.send.producer import Job
from daemon.testing.daemonproc import until

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


async def _held_row(cq: Casque, queue: str, **kw: Any) -> tuple[Consumer, QueueSettings, tuple[int, int]]:
    """A queue of one row (a FIFO queue's, held for as long as a daemon serves it; or one shard, one day-long bucket:
    current all day) that this consumer holds, as a daemon holds the rows it owns."""
    if queue.endswith(".fifo"):
        await cq.create_queue(queue, fifo=True, **kw)
    else:
        await cq.create_queue(queue, shards=1, buckets=1, bucket_seconds=86400, **kw)
    c = cq.consumer(queue)
    qs = await cq.stores.queues.get(queue)
    await c.holds.keep(qs, {(0, 0)}, renew_ms=qs.lock_ttl_ms // 3)
    assert c.holds.valid(qs, (0, 0)) is not None
    return c, qs, (0, 0)


def _named(queue_name: str, kind: str) -> str:
    return f"{queue_name}.fifo" if kind == "fifo" else queue_name


async def _pass_time(c: Consumer, qs: QueueSettings, clock: ManualClock, ms: int) -> None:
    """Move the clock on by ``ms``, renewing the hold a third of a lock TTL at a time, as the daemon's ownership loop
    does (service/ownership.py): the row stays held throughout."""
    step = qs.lock_ttl_ms // 3
    for _ in range(-(-ms // step)):
        clock.advance(step)
        await c.holds.keep(qs, {(0, 0)}, renew_ms=step)
    assert c.holds.valid(qs, (0, 0)) is not None, "the hold lapsed: the rest proves nothing"


async def _behind_held_cursor(
    cq: Casque, clock: ManualClock, settings: Settings, queue: str
) -> tuple[Consumer, QueueSettings, tuple[int, int], list[str]]:
    """A held row with a message written 20 s behind its cursor by a producer whose clock lags, the holder's takes
    blind to it, and the sweep's lag passed: (the holder, the queue, the row, both messages sent)."""
    c, qs, row = await _held_row(cq, queue)
    first = await cq.send(queue, "t", "first")
    await _pass_time(c, qs, clock, 10_000)
    assert await drain(c) == [first]  # a take under the hold: the cursor is stored at now - tolerance
    await cq.stores.acker.ack([m for m in await cq.peek(queue, 1)])
    slow = await Casque.connect(settings, clock=ManualClock(clock.now_ms() - 20_000))
    try:
        late = await slow.send(queue, "t", "late")
    finally:
        await slow.close()
    assert await drain(c) == [], "the fault did not happen: the message is not behind the cursor"
    await _pass_time(c, qs, clock, SWEEP_LAG_MS)
    return c, qs, row, [first, late]


async def test_a_message_behind_a_held_row_s_cursor_is_swept_by_the_holder(
    manual: Pair, settings: Settings, queue_name: str
) -> None:
    """A row held (as a daemon holds the rows it serves) has a message written behind its cursor. The holder's
    takes can't see it; the holder's own sweep must find it and move it within reach (under the hold: a held row's
    column refuses every other locker, its holder's sweep included), and it is delivered. Without that, nobody
    sweeps a held row, and the message waits for its TTL."""
    cq, clock = manual
    c, qs, row, sent = await _behind_held_cursor(cq, clock, settings, queue_name)
    found = await Sweeper(c).sweep()
    delivered = [sent[0], *await drain(c)]
    lost, duplicated = ledger(sent, delivered)
    print(f"swept={found} delivered={len(delivered)} lost={lost} duplicated={duplicated}")
    assert (found, lost, duplicated) == (1, 0, 0)
    assert c.holds.valid(qs, row) is not None, "the sweep gave up the hold"


async def test_the_holder_s_sweep_waits_for_a_take_under_its_hold(
    manual: Pair, settings: Settings, queue_name: str
) -> None:
    """The sweep and the takes of the holder commit under one lock column, which keeps neither from the other: the
    sweep moves nothing while a take under the hold is under way (here: its turn held by the test), and moves the
    stray once it ended."""
    cq, clock = manual
    c, qs, row, sent = await _behind_held_cursor(cq, clock, settings, queue_name)
    stray = await cq.get(queue_name, id=sent[1])
    assert stray is not None
    async with c.holds.turn(row):  # a take under the hold, under way
        sweeping = asyncio.create_task(Sweeper(c).sweep())
        await until(lambda: c.holds._turns[row].users == 2, 30, "the sweep waits for the take's turn")
        assert not sweeping.done()
        still = await cq.get(queue_name, id=sent[1])
        assert still is not None and still.due_ms == stray.due_ms, "the sweep moved the stray during the take"
    assert await sweeping == 1
    assert ledger(sent, [sent[0], *await drain(c)]) == (0, 0)


@pytest.mark.parametrize("kind", ["standard", "fifo"])
async def test_a_held_row_s_backlog_near_its_ttl_is_poisoned_by_the_holder(
    manual: Pair, queue_name: str, kind: str
) -> None:
    """A held row's message waits longer than its retention less the margin (nobody took it): the holder's sweep
    moves it to the poison queue before Cassandra's TTL would drop it, as on a row nobody holds."""
    cq, clock = manual
    queue = _named(queue_name, kind)
    c, qs, row = await _held_row(cq, queue, retention=60)
    fifo = kind == "fifo"
    kept = await cq.send(queue, "t", "kept", group="g" if fifo else None, dedup_id="kept" if fifo else None)
    await _pass_time(c, qs, clock, qs.retention_s * 1000 - expiry_margin_ms(qs) + 1000)
    await Sweeper(c).sweep()
    poisoned = [str(p.id) for p in await cq.stores.poison.list(queue)]
    print(f"poisoned={poisoned}")
    assert poisoned == [kept] and await cq.get(queue, id=kept) is None
    assert c.holds.valid(qs, row) is not None, "the sweep gave up the hold"

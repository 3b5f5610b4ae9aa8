"""Faults on the take path (issue 14, items 1, 2 and 10), made to happen against the real node.

Lost and duplicated are counted from what the consumers actually got (the ledger is the list of
ids sent), never assumed: ``deliveries`` counts each id once per delivery.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from daemon.base.clock import Clock, ManualClock
from daemon.base.config import Settings
from daemon.base.errors import StorageUnavailable
from daemon.engine.client import Casque
from daemon.engine.send.producer import Job
from daemon.engine.storage.db import Database
from daemon.engine.storage.schema import apply_schema
from daemon.engine.storage.table import LOCK_ACQUIRED, lock_ttl_seconds
from daemon.engine.take.budget import TAKE_BYTES

from .support.clocks import SteppingClock
from .support.ledger import drain_ids as drain
from .support.ledger import ledger

Pair = tuple[Casque, ManualClock]
BACKLOG_MS = 10_000  # the consumer looks this long after the sends: > clock_tolerance overdue


async def send_spread(cq: Casque, clock: ManualClock, queue: str, n: int) -> list[str]:
    """Send ``n`` messages 1 ms apart, as a live producer does: distinct due times in the row."""
    sent: list[str] = []
    for i in range(n):
        sent.append(await cq.send(queue, "t", i))
        clock.advance(1)
    return sent


async def stepping_consumer(settings: Settings, start_ms: int) -> tuple[Casque, SteppingClock]:
    clock = SteppingClock(start_ms)
    return await Casque.connect(settings, clock=clock), clock


async def test_take_abandoned_on_an_expired_lock_moves_no_cursor(
    manual: Pair, settings: Settings, queue_name: str
) -> None:
    """Item 1: a consumer stalls 2.5 s between the steps of a take (lock -> read -> check), so the
    lock is too old to commit and the take is abandoned after reading 10 messages of a backlog.
    The cursor must stay before them: every message is still delivered, once."""
    cq, clock = manual
    await cq.create_queue(queue_name, shards=1)
    sent = await send_spread(cq, clock, queue_name, 30)
    stalled, sclock = await stepping_consumer(settings, clock.now_ms() + BACKLOG_MS)
    try:
        consumer = stalled.consumer(queue_name)
        sclock.step_ms = 2500  # every look at the clock is 2.5 s after the last one
        assert await consumer.fetch(10) == []  # the take was abandoned: lock_expired_before_take
        sclock.step_ms = 0
        delivered = await drain(consumer, 10)
    finally:
        await stalled.close()
    clock.advance(BACKLOG_MS)
    delivered += await drain(cq.consumer(queue_name), 10)  # a fresh consumer reads the stored cursor
    lost, duplicated = ledger(sent, delivered)
    print(f"sent={len(sent)} delivered={len(delivered)} lost={lost} duplicated={duplicated}")
    assert (lost, duplicated) == (0, 0)


@pytest.fixture
async def private_keyspace(settings: Settings) -> AsyncIterator[Settings]:
    """A keyspace of this test's own on the shared node, so it may drop one of its tables."""
    s = replace(settings, cassandra=replace(settings.cassandra, keyspace=f"casque_fe_{uuid.uuid4().hex[:8]}"))
    db = Database(s.cassandra).connect()
    try:
        apply_schema(db, s.cassandra.keyspace, s.schema)
        yield s
    finally:
        db.execute(f"DROP KEYSPACE IF EXISTS {s.cassandra.keyspace}")
        db.close()


async def test_take_whose_poison_write_fails_moves_no_cursor(private_keyspace: Settings, queue_name: str) -> None:
    """Item 1: the poison queue's table is really gone when a take must poison a corrupt message,
    so ``poison.add`` raises and the batch is never written. Once the table is back, every good
    message is delivered once and the corrupt one reaches the poison queue: nothing was skipped."""
    clock = ManualClock(Clock().now_ms())
    cq = await Casque.connect(private_keyspace, clock=clock)
    ks = private_keyspace.cassandra.keyspace
    try:
        await cq.create_queue(queue_name, shards=1)
        sent = await send_spread(cq, clock, queue_name, 30)
        bad = (await cq.peek(queue_name, 10))[1]  # among the first ten a take reads
        await cq.db.run(
            f"UPDATE {ks}.messages SET payload = 0xff00 WHERE queue=%s AND bucket=%s AND shard=%s AND kind=1 AND "
            "rank=0 AND due=%s AND id=%s",
            [queue_name, bad.bucket, bad.shard, bad.due_ms, bad.id],
            timestamp=bad.write_ts + 1,
        )
        await cq.db.run(f"DROP TABLE {ks}.poison")
        clock.advance(BACKLOG_MS)
        consumer = cq.consumer(queue_name)
        with pytest.raises(StorageUnavailable):
            await consumer.fetch(10)
        await asyncio.to_thread(apply_schema, cq.db, ks, private_keyspace.schema)  # the table is back
        delivered = await drain(consumer, 10)
        delivered += await drain(cq.consumer(queue_name), 10)
        poisoned = [str(p.id) for p in await cq.stores.poison.list(queue_name)]
    finally:
        await cq.close()
    lost, duplicated = ledger([i for i in sent if i != str(bad.id)], delivered)
    print(f"sent={len(sent)} delivered={len(delivered)} poisoned={len(poisoned)} lost={lost} duplicated={duplicated}")
    assert (lost, duplicated) == (0, 0)
    assert poisoned == [str(bad.id)]


async def test_payloads_at_the_size_limit_are_taken_in_batches_bounded_by_bytes(manual: Pair, queue_name: str) -> None:
    """Item 2: 70 messages at max_payload_bytes (256 KiB) on one shard, taken with a batch size of
    400: one take of all of them would be a 17.5 MiB batch, which Cassandra refuses ("Request is
    too big"). Bounded by TAKE_BYTES, every message is delivered once."""
    cq, clock = manual
    qs = await cq.create_queue(queue_name, shards=1)
    payload = "x" * (qs.max_payload_bytes - 2)  # a JSON string: two quotes make it exactly the limit
    sent = await cq.send_many(queue_name, [Job("t", payload) for _ in range(70)])
    consumer = cq.consumer(queue_name)
    delivered = await drain(consumer, 400)
    lost, duplicated = ledger(sent, delivered)
    print(
        f"sent={len(sent)} delivered={len(delivered)} takes={consumer.stats.takes} lost={lost} duplicated={duplicated}"
    )
    assert (lost, duplicated) == (0, 0)
    assert consumer.stats.takes >= 70 * qs.max_payload_bytes // TAKE_BYTES


async def test_a_schedule_at_the_size_limit_is_taken_with_its_next_occurrence(manual: Pair, queue_name: str) -> None:
    """Item 2: a schedule's take writes its payload twice (timeout column and next occurrence);
    40 schedules at the size limit due at once are all taken, each once."""
    cq, clock = manual
    qs = await cq.create_queue(queue_name, shards=1)
    payload = "y" * (qs.max_payload_bytes - 2)
    sent = [await cq.send(queue_name, "t", payload, every="1m") for _ in range(40)]
    clock.advance(60_000)  # the first occurrences fall due; the next ones are a minute later
    delivered = await drain(cq.consumer(queue_name), 400)
    lost, duplicated = ledger(sent, delivered)
    assert (lost, duplicated) == (0, 0)


async def test_queue_payload_limit_is_capped_far_below_the_batch_limit(cq: Casque, queue_name: str) -> None:
    from daemon.base.errors import UsageError

    with pytest.raises(UsageError, match="max_payload_bytes must be between 64 and 4194304"):
        await cq.create_queue(queue_name, max_payload_bytes=8 * 1024 * 1024)


async def test_lock_column_lives_at_least_the_lock_timeout(cq: Casque, queue_name: str) -> None:
    """Item 10: Cassandra counts a TTL from the coordinator's whole second, so a column written at
    x.95 s with TTL 2 s dies 1.05 s later. The consumer trusts its lock until lock_ttl - 1 s of age;
    the column must live at least lock_ttl, whenever in the second it is written."""
    qs = await cq.create_queue(queue_name, lock_ttl=2)
    lifetimes = []
    for target in (0.05, 0.5, 0.95):  # where in the wall-clock second the lock is written
        while abs(time.time() % 1 - target) > 0.02:
            await asyncio.sleep(0.005)
        lock_id = uuid.uuid4()
        started = time.monotonic()
        await cq.db.run(
            cq.stores.table.lock_write,
            [queue_name, 0, 0, cq.clock.now_ms(), lock_id, LOCK_ACQUIRED, lock_ttl_seconds(qs)],
        )
        while any(r.id == lock_id for r in await cq.db.run(cq.stores.table.lock_read, [queue_name, 0, 0, 0])):
            assert time.monotonic() - started < 5, "lock column outlived any TTL it was given"
            await asyncio.sleep(0.01)
        lifetimes.append(time.monotonic() - started)
    print("lock column lifetimes (s):", [round(x, 3) for x in lifetimes])
    assert min(lifetimes) >= qs.lock_ttl_ms / 1000


async def test_a_lock_timeout_too_short_for_any_take_to_commit_is_refused(cq: Casque, queue_name: str) -> None:
    """A take commits only while more than 1 s of its lock's life is left: at a 1 s lock timeout every take would be
    abandoned and the queue would stall (the nemesis found it), so the setting is refused, saying the least."""
    from daemon.base.errors import UsageError

    with pytest.raises(UsageError, match="lock timeout must be at least 2s, got 1000ms"):
        await cq.create_queue(queue_name, lock_ttl=1)
    await cq.create_queue(queue_name, lock_ttl=2)
    sent = await cq.send(queue_name, "t", "taken")
    assert await drain(cq.consumer(queue_name)) == [sent]


async def test_cancel_by_a_host_whose_clock_lags_the_producer_wins(
    cq: Casque, settings: Settings, queue_name: str
) -> None:
    """Item 10: the producer's clock runs 2 s ahead (within the tolerance), so its INSERT carries a
    later write timestamp than the canceller's clock gives. The cancel's delete must still win:
    cancel succeeds and the message is never delivered."""
    await cq.create_queue(queue_name, shards=1)
    ahead = await Casque.connect(settings, clock=Clock(offset_ms=2000))
    try:
        mid = await ahead.send(queue_name, "t", "cancel me")
    finally:
        await ahead.close()
    cancelled = await cq.cancel(queue_name, id=mid)
    assert cancelled is not None and str(cancelled.id) == mid
    assert await cq.get(queue_name, id=mid) is None
    assert await drain(cq.consumer(queue_name), 10) == []


@pytest.mark.slow
@pytest.mark.reliability
async def test_a_backlog_older_than_retention_reaches_the_poison_queue_not_the_void(
    cq: Casque, queue_name: str
) -> None:
    """Item 10, in real time (Cassandra's TTLs don't follow a manual clock): two queues with a
    retention of 10 s, one message each, never consumed. In the queue nobody sweeps, the TTL drops
    the message without a trace (the fault); in the swept queue, the sweep poisons it before its
    TTL, with the reason, and it outlives the other's TTL in the poison queue.

    10 s is below the 60-s minimum a queue can be created with, which is there for a daemon's sweep
    every 30 s (engine/consume/sweep.py ``expiry_margin_ms``); this test sweeps every second, so the
    rule's tightest case is the same, and it is written to the queues' rows directly (a minute less)."""
    from daemon.engine.consume.sweep import Sweeper

    swept_q, void_q = queue_name, queue_name + "_void"
    shorten = cq.db.prepare(f"UPDATE {cq.settings.cassandra.keyspace}.queues SET retention_s = 10 WHERE name = ?")
    for q in (swept_q, void_q):
        await cq.create_queue(q, shards=1, retention=60)
        await cq.db.run(shorten, [q])
        assert (await cq.stores.queues.get(q, fresh=True)).retention_s == 10
    kept = await cq.send(swept_q, "t", "kept")
    dropped = await cq.send(void_q, "t", "dropped")
    sweeper = Sweeper(cq.consumer(swept_q))
    deadline = time.monotonic() + 60
    while await cq.get(void_q, id=dropped) is not None:
        assert time.monotonic() < deadline, "the TTL never dropped the unconsumed message"
        await sweeper.sweep()
        await asyncio.sleep(1)
    assert await cq.stores.poison.list(void_q) == []  # gone without a trace: what the sweep prevents
    [p] = await cq.stores.poison.list(swept_q)
    assert str(p.id) == kept and "not consumed within retention" in p.reason
    assert await cq.get(swept_q, id=kept) is None

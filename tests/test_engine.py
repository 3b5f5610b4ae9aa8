"""The queue engine against a real Cassandra: ordering, delays, timeouts, poison, keys, ids.

Time is a ManualClock shared by producer and consumer, so "not delivered early" and "comes back
after its timeout" are checked by moving the clock, never by sleeping.
"""

from __future__ import annotations

from typing import Any

import pytest
from cassandra.query import BatchStatement

from daemon.base.clock import ManualClock
from daemon.base.errors import KeyConflict, MessageNotFound, PayloadError, QueueNotFound
from daemon.base.model import Message
from daemon.engine.client import Casque
from daemon.engine.consume.consumer import Consumer
from daemon.engine.storage.db import Database
from daemon.engine.storage.placement import row_of

Pair = tuple[Casque, ManualClock]


async def drain(consumer: Consumer, limit: int = 100, rounds: int = 3) -> list[Message]:
    """Fetch until a few full rounds come back empty (every shard visited each round)."""
    out: list[Message] = []
    empty = 0
    while empty < rounds:
        got = await consumer.fetch(limit)
        out += got
        empty = 0 if got else empty + 1
    return out


async def test_send_then_fetch_delivers_once_and_ack_finishes(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    ids = [await cq.send(queue_name, "t", {"n": i}) for i in range(25)]
    c = cq.consumer(queue_name)
    got = await drain(c)
    assert sorted(str(m.id) for m in got) == sorted(ids)
    assert all(m.attempt == 1 for m in got)
    await cq.stores.acker.ack(got)
    clock.advance(10 * 60_000)  # far past every timeout: acked messages never come back
    assert await drain(c) == []


async def test_fifo_by_due_time_within_a_shard(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name, shards=1)
    ids = []
    for i in range(30):
        ids.append(await cq.send(queue_name, "t", i, delay=f"{30 - i}s"))
    clock.advance(31_000)
    got = await drain(cq.consumer(queue_name), limit=7)
    assert [m.payload for m in got] == list(range(29, -1, -1))


async def test_priority_first_then_due_time(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name, shards=1)
    await cq.send(queue_name, "t", "low-early", priority=-1)
    clock.advance(5)
    await cq.send(queue_name, "t", "normal")
    clock.advance(5)
    await cq.send(queue_name, "t", "high-late", priority=5)
    clock.advance(5)
    await cq.send(queue_name, "t", "high-later", priority=5)
    got = await drain(cq.consumer(queue_name), limit=10)
    assert [m.payload for m in got] == ["high-late", "high-later", "normal", "low-early"]


async def test_delayed_message_is_not_delivered_early(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    mid = await cq.send(queue_name, "t", None, delay="90s")
    c = cq.consumer(queue_name)
    assert await drain(c) == []
    clock.advance(89_000)
    assert await drain(c) == []
    clock.advance(1_000)
    got = await drain(c)
    assert [str(m.id) for m in got] == [mid]


async def test_unacked_message_comes_back_after_its_timeout_with_attempt_count(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name, timeout=20, max_attempts=5)
    mid = await cq.send(queue_name, "t", "x")
    c = cq.consumer(queue_name)
    first = await drain(c)
    assert [(str(m.id), m.attempt) for m in first] == [(mid, 1)]
    clock.advance(19_000)
    assert await drain(c) == []  # still within its timeout: nobody else gets it
    clock.advance(1_001 + 10_000)  # past the timeout (and past a rescan)
    second = await drain(c)
    assert [(str(m.id), m.attempt) for m in second] == [(mid, 2)]
    await cq.stores.acker.ack(first)  # a late ack of the expired delivery
    clock.advance(21_000 + 10_000)
    third = await drain(c)
    assert third == [], "the late ack finishes the message: a handler did finish (docs/design.md, the ghost)"


async def test_poisoned_after_max_attempts_of_timeouts(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name, timeout=5, max_attempts=2)
    mid = await cq.send(queue_name, "t", "x")
    c = cq.consumer(queue_name)
    assert [m.attempt for m in await drain(c)] == [1]
    clock.advance(16_000)
    assert [m.attempt for m in await drain(c)] == [2]
    clock.advance(16_000)
    assert await drain(c) == []
    poisoned = await cq.stores.poison.list(queue_name)
    assert [str(p.id) for p in poisoned] == [mid]
    assert "timed out" in poisoned[0].reason and poisoned[0].attempt == 2
    assert await cq.get(queue_name, id=mid) is None


async def test_retry_brings_the_message_back_after_the_delay(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", "x")
    c = cq.consumer(queue_name)
    [m] = await drain(c)
    await cq.stores.acker.retry(m, 30_000, "ValueError: boom")
    clock.advance(29_000)
    assert await drain(c) == []
    clock.advance(11_000)
    [again] = await drain(c)
    assert again.id == m.id and again.attempt == 2 and again.last_error == "ValueError: boom"


async def test_key_replace_keep_and_error(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    first = await cq.send(queue_name, "t", 1, key="k", delay="1h")
    assert await cq.send(queue_name, "t", 2, key="k", on_conflict="keep") == first
    with pytest.raises(KeyConflict, match="already names message"):
        await cq.send(queue_name, "t", 3, key="k", on_conflict="error")
    second = await cq.send(queue_name, "t", 4, key="k", on_conflict="replace")
    assert second != first
    assert await cq.get(queue_name, id=first) is None
    current = await cq.get(queue_name, key="k")
    assert current is not None and str(current.id) == second and current.payload == 4


async def test_key_cancel_releases_it(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    mid = await cq.send(queue_name, "t", 1, key="k", delay="1h")
    cancelled = await cq.cancel(queue_name, key="k")
    assert cancelled is not None and str(cancelled.id) == mid
    assert await cq.get_key(queue_name, "k") is None
    with pytest.raises(MessageNotFound):
        await cq.get(queue_name, key="k")
    again = await cq.send(queue_name, "t", 2, key="k", on_conflict="error")
    assert again != mid


async def test_key_released_when_its_message_is_acked(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", 1, key="once")
    [m] = await drain(cq.consumer(queue_name))
    assert (await cq.get_key(queue_name, "once")) is not None
    await cq.stores.acker.ack([m])
    assert await cq.get_key(queue_name, "once") is None


async def test_read_and_delete_by_id_and_peek_does_not_consume(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    a = await cq.send(queue_name, "t", "a")
    clock.advance(1)
    b = await cq.send(queue_name, "t", "b")
    peeked = await cq.peek(queue_name, 10)
    assert [str(m.id) for m in peeked] == [a, b]
    assert [str(m.id) for m in await cq.peek(queue_name, 10)] == [a, b]
    got = await cq.get(queue_name, id=a)
    assert got is not None and got.payload == "a"
    await cq.cancel(queue_name, id=a)
    assert await cq.get(queue_name, id=a) is None
    assert [str(m.id) for m in await drain(cq.consumer(queue_name))] == [b]


async def test_corrupt_stored_message_is_poisoned_not_looped_on(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    qs = await cq.create_queue(queue_name)
    good = await cq.send(queue_name, "t", "fine")
    bad = await cq.send(queue_name, "t", "will be corrupted")
    bucket, shard = row_of(__import__("uuid").UUID(bad), qs.bucket_ms, qs.buckets, qs.shards)
    m = await cq.get(queue_name, id=bad)
    assert m is not None
    await cq.db.run(
        f"UPDATE {cq.settings.cassandra.keyspace}.messages SET payload = 0xff00 WHERE queue=%s AND bucket=%s AND "
        "shard=%s AND kind=1 AND rank=0 AND due=%s AND id=%s",
        [queue_name, bucket, shard, m.due_ms, m.id],
        timestamp=m.write_ts + 1,
    )
    got = await drain(cq.consumer(queue_name))
    assert [str(x.id) for x in got] == [good]
    [p] = await cq.stores.poison.list(queue_name)
    assert str(p.id) == bad and "not valid JSON" in p.reason


async def test_oversize_and_unserialisable_payloads_are_rejected_at_send(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name, max_payload_bytes=1024)
    with pytest.raises(PayloadError, match="over the queue's limit of 1024"):
        await cq.send(queue_name, "t", "x" * 2000)
    with pytest.raises(PayloadError, match="not JSON-serialisable"):
        await cq.send(queue_name, "t", {"f": object()})
    assert await cq.peek(queue_name) == []


async def test_unknown_queue_names_the_fix(cq: Casque) -> None:
    with pytest.raises(QueueNotFound, match="casque queue create nope"):
        await cq.send("nope", "t")


async def test_send_many_places_rows_exactly_like_send(manual: Pair, queue_name: str) -> None:
    from daemon.engine.send.producer import Job

    cq, clock = manual
    qs = await cq.create_queue(queue_name)
    ids = await cq.send_many(queue_name, [Job("t", i) for i in range(500)])
    got = await drain(cq.consumer(queue_name), limit=100)
    assert sorted(str(m.id) for m in got) == sorted(ids)
    for m in got:
        assert (m.bucket, m.shard) == row_of(m.id, qs.bucket_ms, qs.buckets, qs.shards)


async def test_a_send_many_call_shares_rows_so_its_26_messages_are_one_write(manual: Pair, queue_name: str) -> None:
    """A call's consecutive messages share a row (32 per placement draw, producer.SENT_PER_ROW): the 26 messages a
    paced producer sends in one call to a 16-shard queue are one write request and one row to take from, not one
    per shard; a call of 100 is at most 4 rows."""
    import uuid

    from daemon.engine.send.producer import Job

    cq, clock = manual
    qs = await cq.create_queue(queue_name, shards=16)
    await cq.send(queue_name, "t", "warm")  # the queue's settings are cached: the calls below only write

    batches: list[int] = []  # the statements of each batch sent (a send writes messages in per-row batches)

    def record(db: Database, stmt: Any) -> None:
        # the send's batches, not the due feed's entry (engine/wake/due_feed.py), which the warm-up's announcement
        # may still be writing: a request of its own, one per queue and second
        if isinstance(stmt, BatchStatement):
            texts = [db.statement_text(query_id) or "" for _, query_id, _ in stmt._statements_and_parameters]
            if not any("due_queues" in t for t in texts):
                batches.append(len(stmt))

    with Database.observing(record):
        ids = await cq.send_many(queue_name, [Job("t", i) for i in range(26)])
    assert batches == [26]
    assert len({row_of(uuid.UUID(i), qs.bucket_ms, qs.buckets, qs.shards) for i in ids}) == 1
    ids = await cq.send_many(queue_name, [Job("t", i) for i in range(100)])
    assert len({row_of(uuid.UUID(i), qs.bucket_ms, qs.buckets, qs.shards) for i in ids}) <= 4
    got = await drain(cq.consumer(queue_name), limit=200)
    assert len(got) == 127  # each once, the warm-up message too


async def test_the_sends_of_one_turn_of_the_loop_share_a_row_32_at_most_and_one_write_each(
    manual: Pair, queue_name: str
) -> None:
    """Concurrent senders (an SQS server's requests, a web app's handlers) whose sends start in one turn of the loop
    share a row, 32 messages at most, and each row's messages are written in one request (base/turns.py):
    40 concurrent sends are 2 writes, not 40; 8 batches of 10 are 3, none split over two rows. Each message is
    answered with its own id and taken once."""
    import asyncio
    import uuid
    from collections import Counter
    from collections.abc import Sequence

    from daemon.engine.send.producer import Job
    from daemon.engine.storage.placement import PLACEMENT_MASK

    cq, clock = manual
    qs = await cq.create_queue(queue_name, shards=16)
    await cq.send(queue_name, "t", "warm")  # the queue's settings are cached: the sends below only write
    batches: list[int] = []

    def record(db: Database, stmt: Any) -> None:
        if isinstance(stmt, BatchStatement):
            texts = [db.statement_text(query_id) or "" for _, query_id, _ in stmt._statements_and_parameters]
            if not any("due_queues" in t for t in texts):  # not the due feed's entry (the test above)
                batches.append(len(stmt))
        elif "INSERT INTO" in (getattr(stmt, "query_string", "") or "") and "messages" in stmt.query_string:
            batches.append(1)

    def draws(ids: Sequence[str]) -> list[int]:  # messages per placement draw (an id's low 32 bits)
        return sorted(Counter(uuid.UUID(i).int & PLACEMENT_MASK for i in ids).values())

    def writes_per_row(ids: Sequence[str]) -> list[int]:  # two draws may fall in one row (1 in 16): one write then
        return sorted(Counter(row_of(uuid.UUID(i), qs.bucket_ms, qs.buckets, qs.shards) for i in ids).values())

    with Database.observing(record):
        ids = await asyncio.gather(*(cq.send(queue_name, "t", i) for i in range(40)))
    assert draws(ids) == [8, 32]
    assert sorted(batches) == writes_per_row(ids)
    batches.clear()
    with Database.observing(record):  # 8 batches of 10 at once: each call in one row, rows filled while they fit
        calls = await asyncio.gather(*(cq.send_many(queue_name, [Job("t", i) for i in range(10)]) for _ in range(8)))
    assert draws([i for call in calls for i in call]) == [20, 30, 30]
    assert sorted(batches) == writes_per_row([i for call in calls for i in call])
    assert all(len(draws(call)) == 1 for call in calls)
    got = await drain(cq.consumer(queue_name), limit=200)
    assert sorted(str(m.id) for m in got if m.payload != "warm") == sorted(ids + [i for call in calls for i in call])

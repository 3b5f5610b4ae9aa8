"""Tombstones: the cost of a poll does not grow with the number of messages ever consumed.

200,000 messages go through one queue in rounds of 20,000. After each round, time moves past the
timeouts and the clock tolerance, the consumer makes one pass, and its poll reads (the due-message
slice from its cursor, and the lock-column slice) are run again with query tracing: Cassandra's own
count of tombstone cells scanned is read from the trace. Beside it, the same read from the start of
the row (what a queue without cursors does) shows that the tombstones are really there.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from cassandra import ReadTimeout

from daemon.base.clock import Clock
from daemon.engine.client import Casque
from daemon.engine.send.producer import Job

ROUND, ROUNDS = 20_000, 10
_READ = re.compile(r"Read (\d+) live rows and (\d+) tombstone cells")


def traced_tombstones(cq: Casque, cql: str, params: list[Any]) -> int:
    """The tombstones one read scanned. The read is the test's probe, not casque's: on a box busy with
    other tests a read that crosses 10,000 tombstones can pass the node's 5 s read timeout, so a timed-out
    probe is asked again (twice at most)."""
    assert cq.db.session is not None
    for attempt in range(3):
        try:
            rs = cq.db.session.execute(cq.db.prepare(cql), params, trace=True, timeout=30)
            break
        except ReadTimeout:
            if attempt == 2:
                raise
    return tombstones_in(rs.get_query_trace(max_wait_sec=10))


def tombstones_in(trace: Any) -> int:
    """The tombstone cells a traced read scanned, from the node's own trace."""
    counts = [int(m.group(2)) for e in trace.events if (m := _READ.search(e.description))]
    assert counts, "the trace has no 'Read N live rows and M tombstone cells' event"
    return sum(counts)


async def drain(consumer: Any, cq: Casque, n: int) -> None:
    """Fetch and ack ``n`` messages from one consumer, 100 at a time."""
    taken = 0
    while taken < n:
        msgs = await consumer.fetch(100, 0)
        assert msgs, f"the queue ran dry after {taken} of {n}"
        await cq.stores.acker.ack(msgs)
        taken += len(msgs)


async def drain_round(cq: Casque, consumer: Any, target: int) -> None:
    async def work(slot: int) -> None:
        while consumer.stats.taken < target:
            msgs = await consumer.fetch(100, slot)
            if msgs:
                await cq.stores.acker.ack(msgs)
            else:
                await asyncio.sleep(0.005)

    await asyncio.gather(*(work(i) for i in range(4)))


@pytest.fixture
async def jumping(settings: Any) -> Any:
    """A client on a real clock that the test can also jump forward (no sleeping through timeouts)."""
    clock = Clock()
    client = await Casque.connect(settings, clock=clock)
    yield client, clock
    await client.close()


@pytest.mark.slow
async def test_tombstones_scanned_per_poll_stay_bounded_over_200k_messages(jumping: Any, queue_name: str) -> None:
    cq, clock = jumping
    qs = await cq.create_queue(queue_name, shards=4, buckets=4, bucket_seconds=60, timeout=10)
    consumer = cq.consumer(queue_name)
    ks = cq.settings.cassandra.keyspace
    peek = (
        f"SELECT due FROM {ks}.messages WHERE queue=? AND bucket=? AND shard=? AND kind=1 AND rank=0 AND due>=? "
        "AND due<=? LIMIT 1"
    )
    locks = (
        f"SELECT due, id, state FROM {ks}.messages WHERE queue=? AND bucket=? AND shard=? AND kind=0 AND rank=0 "
        "AND due>=?"
    )
    ours: list[int] = []
    for r in range(ROUNDS):
        for _ in range(ROUND // 5000):
            await cq.send_many(queue_name, [Job("t", i) for i in range(5000)])
        await drain_round(cq, consumer, ROUND * (r + 1))
        clock.offset_ms += qs.timeout_ms + consumer.tolerance_ms + consumer.rescan_ms + 1000
        assert await consumer.fetch(100) == []  # one pass over every shard: nothing left, cursors move
        now = clock.now_ms()
        worst = 0
        for (bucket, shard), state in list(consumer.rows.items()):
            worst = max(worst, traced_tombstones(cq, peek, [queue_name, bucket, shard, state.start.cursor(0), now]))
            worst = max(
                worst,
                traced_tombstones(cq, locks, [queue_name, bucket, shard, now - qs.lock_ttl_ms - consumer.tolerance_ms]),
            )
        ours.append(worst)
    # The same peek from the row start, once at the end: tombstones only pile up over the rounds.
    naive = max(traced_tombstones(cq, peek, [queue_name, b, s, 0, clock.now_ms()]) for b, s in list(consumer.rows))
    print("tombstones scanned by the worst poll read, per round of 20k: casque", ours, "from the row start", naive)
    assert consumer.stats.taken == ROUND * ROUNDS
    assert max(ours) <= 100, ours  # flat: consumed history is never scanned again
    assert naive >= 10_000, naive  # the history is really there for a cursor-less read to trip over


async def test_a_drained_tiny_queue_s_cursor_reads_scan_no_tombstones(cq: Casque, queue_name: str) -> None:
    """A 1 x 1 queue (what SQS creates) keeps every message it ever held in one partition, and a drain
    leaves a tombstone per message and per timeout column. The reads that fetch a row's cursors from the
    start of the partition (a cold receive's ``read_shard_cursors``, ``read_cursors`` of peeks, sweeps, stats)
    scanned them all while no live row came first: 100,000 of them failed a receive with
    READ_TOO_MANY_TOMBSTONES in the many-queues bench. The take writes an anchor row that sorts before any
    other, so those reads stop at it."""
    n = 2_000
    await cq.create_queue(queue_name, shards=1, buckets=1, timeout=30)
    await cq.send_many(queue_name, [Job("t", i) for i in range(n)])
    await drain(cq.consumer(queue_name), cq, n)
    ks = cq.settings.cassandra.keyspace
    t = f"{ks}.messages"
    everything = traced_tombstones(cq, f"SELECT id FROM {t} WHERE queue = ? AND bucket = 0 AND shard = 0", [queue_name])
    distinct = traced_tombstones(
        cq,
        f"SELECT DISTINCT queue, bucket, shard, cursors FROM {t} WHERE queue = ? AND bucket IN (0) AND shard = 0",
        [queue_name],
    )
    limit_1 = traced_tombstones(
        cq, f"SELECT cursors FROM {t} WHERE queue = ? AND bucket = 0 AND shard = 0 LIMIT 1", [queue_name]
    )
    print(f"tombstones: whole row {everything}, cold cursor read {distinct}, LIMIT 1 cursor read {limit_1}")
    assert everything >= n  # the tombstones are really there
    assert distinct <= 10 and limit_1 <= 10


async def test_a_drained_row_s_stored_cursor_passes_its_pile_when_the_take_checks_its_last_takes(
    cq: Casque, queue_name: str
) -> None:
    """A drain within the clock tolerance leaves what it acked at or ahead of the cursor its takes committed: a
    cold process would read that pile from the stored cursor. The drain's takes also wrote check entries, due at the
    end of their visibility; the take that processes them commits the cursor past the pile (the stored cursor, not
    only this process's), so a cold read from it scans no tombstone."""
    n = 2_000
    await cq.create_queue(queue_name, shards=1, buckets=1, timeout=10)
    await cq.send_many(queue_name, [Job("t", i) for i in range(n)])
    consumer = cq.consumer(queue_name)
    await drain(consumer, cq, n)
    pile_until = cq.clock.now_ms() + 10_000  # no check entry of the drain is due later than this
    committed = await stored_cursor(cq, queue_name)
    peek = (
        f"SELECT due FROM {cq.settings.cassandra.keyspace}.messages WHERE queue = ? AND bucket = 0 AND shard = 0"
        " AND kind = 1 AND rank = 0 AND due >= ? AND due <= ? LIMIT 1"
    )
    behind = traced_tombstones(cq, peek, [queue_name, committed, cq.clock.now_ms()])
    await until_clock_passes(cq, pile_until + consumer.tolerance_ms)
    assert await consumer.fetch(100, 0) == []  # the take that processes the check entries: nothing to deliver
    stored = await stored_cursor(cq, queue_name)
    after = traced_tombstones(cq, peek, [queue_name, stored, cq.clock.now_ms()])
    print(f"a cold read from the stored cursor scans {behind} tombstones after the drain, {after} after its check")
    assert behind >= n // 2, "the pile was there, ahead of the cursor the drain's takes committed"
    assert stored > pile_until - consumer.tolerance_ms
    assert after <= 10


async def stored_cursor(cq: Casque, queue: str) -> int:
    rows = await cq.db.run(cq.stores.table.read_cursors, [queue, 0, 0])
    return dict(rows[0].cursors or {}).get(0, 0) if rows else 0


async def until_clock_passes(cq: Casque, at_ms: int) -> None:
    """Wait for the clock to pass a computed instant: a known time, not a hope."""
    await asyncio.sleep(max(0.0, (at_ms - cq.clock.now_ms()) / 1000) + 0.05)
    assert cq.clock.now_ms() > at_ms

"""The expiry index (engine/queues/expiry_index.py) against the real node: a reaper's pass reads the
candidates now due, not every expiring queue; a queue used since its candidate was written is kept
and its candidate moved; rows written before the index existed still expire (the backfill).

Reads are counted by the client (``Database.reads``). Each test's reaper has its own lease name, so
its own "swept lately" marker. The clock is a ManualClock: moved, never slept on. The first test runs
three days ahead of now, so the slices it reads hold only its own queues' candidates.
"""

from __future__ import annotations

import pytest

from daemon.base.clock import Clock, ManualClock
from daemon.base.config import Settings
from daemon.base.errors import QueueNotFound
from daemon.engine.client import Casque
from daemon.engine.operations.queue_actions import delete_queue
from daemon.engine.operations.reaper import QueueReaper
from daemon.engine.queues.expiry_index import DAY_MS, day_of

from .test_many_queues import fresh

N = 200


async def candidates(client: Casque, name: str, day: int) -> list[int]:
    """The due times of ``name``'s candidates in ``day``."""
    ks = client.settings.cassandra.keyspace
    rows = await client.db.run(f"SELECT due_at, name FROM {ks}.queue_expiry_due WHERE day = %s", [day])
    return [r.due_at for r in rows if r.name == name]


async def test_a_pass_reads_what_is_due_not_every_expiring_queue(settings: Settings, queue_name: str) -> None:
    """200 queues expiring after an hour: a pass while none is due is 1 read (the due slice), as it
    would be with none; at the hour the pass deletes the 199 idle ones and keeps the one used since,
    whose candidate moves to its new due time; a queue deleted by hand leaves a candidate that is
    dropped without error."""
    start = Clock().now_ms() + 3 * DAY_MS
    clock = ManualClock(start)
    client = await fresh(settings, clock=clock)
    names = [f"{queue_name}_{i}" for i in range(N)]
    busy, by_hand = names[0], names[1]
    reaper = QueueReaper(client.stores, "t", lease=f"expiry_{queue_name}")
    try:
        await reaper.index.mark_swept()  # as if a reaper had swept lately: no backfill in this test
        assert await client.create_queues(names, shards=1, buckets=1, expire_after=3600) == N
        assert await candidates(client, busy, day_of(start + 3_600_000)) == [start + 3_600_000]
        assert await reaper.reap() == []  # the first pass reads LOOKBACK_DAYS back: 3 day slices
        for _ in range(3):
            before = clock.now_ms()
            clock.advance(60_000)
            reads = client.db.reads
            assert await reaper.reap() == []
            days = day_of(clock.now_ms()) - day_of(before) + 1  # 2 only if the minute crossed midnight
            assert client.db.reads - reads == days, "one slice read while nothing is due, whatever the queues"
        clock.advance(1_800_000)
        await client.send(busy, "t", "x")  # marks busy active (its candidate stays where it was)
        await client.stores.activity.flush()
        used_at = clock.now_ms()
        await delete_queue(client.stores, by_hand)
        clock.advance(3_600_000 - (clock.now_ms() - start))  # exactly the hour: every candidate due
        gone = await reaper.reap()
        assert sorted(gone) == sorted(n for n in names if n not in (busy, by_hand))
        moved = await candidates(client, busy, day_of(start + 3_600_000)) + await candidates(
            client, busy, day_of(used_at + 3_600_000)
        )
        assert sorted(set(moved)) == [used_at + 3_600_000], "the old candidate dropped, the new one written"
        assert await candidates(client, by_hand, day_of(start + 3_600_000)) == []
        assert (await client.stores.queues.get(busy, fresh=True)).expire_after_s == 3600
        clock.advance(used_at + 3_600_000 - clock.now_ms())
        assert await reaper.reap() == [busy]
    finally:
        for name in names:
            try:
                await delete_queue(client.stores, name)
            except QueueNotFound:
                pass
        await reaper.lease.release()
        await client.close()


async def test_a_queue_expiry_row_without_a_candidate_still_expires(settings: Settings, queue_name: str) -> None:
    """The migration path: a ``queue_expiry`` row written by a version without the index has no
    candidate. A reaper that finds no "swept lately" marker writes one for every row first (the one
    full read), then sweeps; the next reaper of that lease finds the marker and reads no more than
    the due slices."""
    clock = ManualClock(Clock().now_ms())
    client = await fresh(settings, clock=clock)
    ks = settings.cassandra.keyspace
    lease = f"expiry_{queue_name}"
    try:
        await client.create_queue(queue_name, shards=1, buckets=1, expire_after=60)
        due = clock.now_ms() + 60_000
        await client.db.run(
            f"DELETE FROM {ks}.queue_expiry_due WHERE day = %s AND due_at = %s AND name = %s",
            [day_of(due), due, queue_name],
        )  # as if created before the index existed
        clock.advance(61_000)
        first = QueueReaper(client.stores, "a", lease=lease)
        assert queue_name in await first.reap()
        assert first.backfilled >= 1
        with pytest.raises(QueueNotFound):
            await client.stores.queues.get(queue_name, fresh=True)
        second = QueueReaper(client.stores, "b", lease=lease)
        await second.reap()
        assert second.backfilled == 0, "the marker says a reaper swept lately: no second full read"
    finally:
        await client.close()

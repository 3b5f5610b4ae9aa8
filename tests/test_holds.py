"""Held rows (engine/take/holds.py, issue 15): a daemon keeps the lock of the rows it owns between
takes, so a take is one read and one batch; nobody else takes from a held row; a hold that is not
renewed lapses; and an owner frozen (SIGSTOP) after reading a held row, past its hold's expiry,
commits nothing when it wakes: another daemon runs those messages, each exactly once."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from daemon.base.metrics import REGISTRY
from daemon.engine.client import Casque
from daemon.engine.consume.consumer import Consumer
from daemon.engine.send.producer import Job
from daemon.engine.take.row_lock import HeldLock, RowLock
from daemon.testing.daemonproc import Daemon, records, start_daemon, until, write_config

from .conftest import TEST_KEYSPACE


def trips(queue: str) -> float:
    return REGISTRY.get_sample_value("casque_take_round_trips_sum", {"queue": queue}) or 0.0


async def one_take(cq: Casque, c: Consumer, queue: str) -> float:
    """Send one message, take it; the sequential round trips that take cost."""
    await cq.send(queue, "test.record", 1)
    before = trips(queue)
    assert len(await c.fetch(10)) == 1
    return trips(queue) - before


async def tiny_queue(cq: Casque, name: str, **kw: Any) -> tuple[Consumer, tuple[int, int]]:
    """One shard, one day-long bucket: every message of the test lands in the same row."""
    await cq.create_queue(name, shards=1, buckets=1, bucket_seconds=86400, **kw)
    return cq.consumer(name), (0, 0)


async def test_a_take_from_a_held_row_costs_two_round_trips_against_five(cq: Casque, queue_name: str) -> None:
    c, row = await tiny_queue(cq, queue_name)
    cold = await one_take(cq, c, queue_name)  # cursors, peek, acquired write, re-check, read, batch
    warm = await one_take(cq, c, queue_name)
    qs = await cq.stores.queues.get(queue_name)
    await c.holds.keep(qs, {row}, renew_ms=1000)
    assert c.holds.valid(qs, row) is not None
    held = [await one_take(cq, c, queue_name) for _ in range(3)]
    print(f"round trips per take: first visit {cold:.0f}, lock each take {warm:.0f}, held row {held}")
    assert (cold, warm, held) == (6, 5, [2, 2, 2])
    await c.holds.release_all(qs)


async def test_nobody_else_takes_from_a_held_row_until_it_is_released(cq: Casque, queue_name: str) -> None:
    owner, row = await tiny_queue(cq, queue_name)
    other = cq.consumer(queue_name)  # another process, as far as the locks can tell
    qs = await cq.stores.queues.get(queue_name)
    await owner.holds.keep(qs, {row}, renew_ms=1000)
    await cq.send(queue_name, "test.record", 1)
    assert await other.fetch(10) == [] and other.stats.contention == 1
    assert len(await owner.fetch(10)) == 1
    await owner.holds.release_all(qs)
    await cq.send(queue_name, "test.record", 2)
    taken: list[object] = []

    async def other_took() -> bool:
        taken.extend(await other.fetch(10))  # returns [] while its back-off after the contention runs
        return bool(taken)

    await until(other_took, 10, "the other consumer takes once the hold is released")
    assert [m.payload for m in taken] == [2]  # type: ignore[attr-defined]


async def test_a_row_found_busy_is_locked_the_long_way_until_a_take_succeeds(cq: Casque, queue_name: str) -> None:
    """A direct lock (row_lock.py ``RowLock.acquire``: the acquired write, then the re-check) is for a row with no
    contention since its last take. Once the row was found busy, its next take writes a pending column first and
    lets the earliest column win (7 round trips, so two racers don't both back off again); after that take, the
    row is locked directly again (5)."""
    owner, row = await tiny_queue(cq, queue_name)
    other = cq.consumer(queue_name)
    qs = await cq.stores.queues.get(queue_name)
    await owner.holds.keep(qs, {row}, renew_ms=1000)
    await cq.send(queue_name, "test.record", 1)
    assert await other.fetch(10) == [] and other.stats.contention == 1  # the direct lock saw the hold's column
    await owner.holds.release_all(qs)
    before = trips(queue_name)  # counted for takes that returned messages only
    taken: list[object] = []

    async def other_took() -> bool:
        taken.extend(await other.fetch(10))  # returns [] while its back-off after the contention runs
        return bool(taken)

    await until(other_took, 10, "the other consumer takes once the hold is released")
    long_way = trips(queue_name) - before
    direct = await one_take(cq, other, queue_name)
    print(f"round trips: the take after contention {long_way:.0f}, the next {direct:.0f}")
    assert (long_way, direct) == (7, 5)


async def test_a_hold_that_is_not_renewed_lapses_and_the_row_is_free_again(cq: Casque, queue_name: str) -> None:
    owner, row = await tiny_queue(cq, queue_name, lock_ttl=2)
    other = cq.consumer(queue_name)
    qs = await cq.stores.queues.get(queue_name)
    await owner.holds.keep(qs, {row}, renew_ms=60_000)
    assert owner.holds.valid(qs, row) is not None
    await until(lambda: owner.holds.valid(qs, row) is None, 10, "the owner stops trusting its unrenewed hold")
    await cq.send(queue_name, "test.record", 1)
    taken: list[object] = []

    async def someone_took() -> bool:
        taken.extend(await other.fetch(10))
        taken.extend(await owner.fetch(10))
        return bool(taken)

    await until(someone_took, 15, "the row is taken again once the hold's column expired")
    assert len(taken) == 1


async def test_a_hold_kept_while_the_lock_timeout_is_raised_lapses_with_its_column(cq: Casque, queue_name: str) -> None:
    """The queue's lock timeout raised from 2 s to 30 s while a row is held: the hold's column, written with a
    2 s TTL, is gone from Cassandra seconds later, and another consumer can lock the row. The owner must have
    stopped trusting its hold by then: counted by the raised TTL, it would take from the row for 29 s beside
    the other consumer (two takes of the same messages)."""
    owner, row = await tiny_queue(cq, queue_name, lock_ttl=2)
    other = cq.consumer(queue_name)  # another process, as far as the locks can tell
    qs = await cq.stores.queues.get(queue_name)
    await owner.holds.keep(qs, {row}, renew_ms=60_000)
    assert owner.holds.valid(qs, row) is not None
    raised = await cq.stores.queues.update(queue_name, lock_ttl=30)
    assert raised.lock_ttl_ms == 30_000
    assert owner.holds.valid(raised, row) is not None, "the hold lapsed at once: the rest proves nothing"
    locked: list[HeldLock] = []

    async def other_locked() -> bool:
        lock = await other.row_lock.acquire(raised, *row)
        if lock is not None:
            locked.append(lock)
        return lock is not None

    await until(other_locked, 10, "another consumer locks the row once the hold's column expired")
    assert owner.holds.valid(raised, row) is None, "the owner still trusts a hold whose column Cassandra expired"
    await other.row_lock.release(locked[0])


async def test_a_lowered_lock_timeout_keeps_others_out_of_a_row_held_under_the_old_one(
    cq: Casque, queue_name: str
) -> None:
    """The lock timeout lowered from 30 s to 2 s while a row is held, its column older than the new TTL and the
    clock tolerance: an owner that has not re-read the settings yet still trusts its hold (its column lives 30 s).
    A consumer with the new settings must not lock the row: until the change settles it reads lock columns back to
    the old TTL, not the new one (engine/take/row_lock.py ``lock_read_back_ms``). Once the owner re-reads, it stops
    trusting the old column."""
    owner, row = await tiny_queue(cq, queue_name, lock_ttl=30)
    other = cq.consumer(queue_name)
    before = await cq.stores.queues.get(queue_name)
    await owner.holds.keep(before, {row}, renew_ms=60_000)
    # The column's age: past what a consumer on the new settings would read back (2 s + the clock tolerance).
    await asyncio.sleep(2.0 + cq.settings.worker.clock_tolerance_ms / 1000 + 1.0)
    lowered = await cq.stores.queues.update(queue_name, lock_ttl=2)
    assert (lowered.lock_ttl_ms, lowered.lock_ttl_before_ms) == (2_000, 30_000)
    assert owner.holds.valid(before, row) is not None, "the owner, on its old settings, no longer holds the row"
    lock = await other.row_lock.acquire(lowered, *row)
    if lock is not None:
        await other.row_lock.release(lock)
    assert lock is None, "another consumer locked a row whose owner still trusts its hold"
    assert owner.holds.valid(lowered, row) is None, "the owner, on the new settings, still trusts the old column"
    await owner.holds.release_all(before)


async def test_a_hold_taken_under_a_raised_lock_timeout_yields_to_processes_that_have_not_read_it_yet(
    cq: Casque, queue_name: str
) -> None:
    """The lock timeout raised from 2 s to 30 s, then a row held under the new one. For as long as its copy of the
    settings is trusted (5 s, a minute under the due feed) another process may still be on the old settings, reading
    lock columns back only 2 s and its clock tolerance (0.5 s here): to it, a hold column 3 s old is not there, and it
    locks the row. The owner must not trust its hold by then: while the change settles, a column keeps others out only
    as long as the old TTL."""
    owner, row = await tiny_queue(cq, queue_name, lock_ttl=2)
    before = await cq.stores.queues.get(queue_name)
    raised = await cq.stores.queues.update(queue_name, lock_ttl=30)
    await owner.holds.keep(raised, {row}, renew_ms=60_000)
    held = owner.holds.valid(raised, row)
    assert held is not None and held.ttl_ms == 30_000
    await asyncio.sleep(3.0)  # the column's age: past what the stale process reads back (2 s + 0.5 s)
    stale = RowLock(cq.db, owner.row_lock.table, cq.clock, tolerance_ms=500)
    lock = await stale.acquire(before, *row)
    assert lock is not None, "the stale process saw the hold's column: the rest proves nothing"
    await stale.release(lock)
    assert owner.holds.valid(raised, row) is None, "the owner trusts a hold that a stale process could not see"


def events(d: Daemon, name: str) -> list[dict[str, Any]]:
    found = []
    for line in d.output().splitlines():
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(e, dict) and e.get("event") == name:
            found.append(e)
    return found


@pytest.mark.slow
async def test_an_owner_frozen_past_its_hold_expiry_commits_nothing_and_nothing_is_lost_or_doubled(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    await cq.create_queue(queue_name, shards=4, timeout=60)
    record = tmp_path / "record.txt"
    cfg = write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name], consumers=2, batch_size=50)
    owner = start_daemon(cfg, record, tmp_path / "owner.log", env={"CASQUE_PAUSE_AT": "take.held_read"})
    other: Daemon | None = None
    try:
        await until(
            lambda: any(int(e["rows"]) >= 4 for e in events(owner, "rows_held")), 60, "the owner holds its rows", owner
        )
        ids = await cq.send_many(queue_name, [Job("test.record", i) for i in range(200)])
        # The owner's first held take reads messages and freezes itself right there (SIGSTOP), before
        # it checks its hold and commits: it has nothing in flight, and its holds lapse while frozen.
        await until(owner.frozen, 60, "the owner frozen between a held read and its take", owner)
        other = start_daemon(cfg, record, tmp_path / "other.log")
        await until(
            lambda: len({r[1] for r in records(record)} & set(ids)) == len(ids),
            120,
            "the other daemon runs every message while the owner is frozen",
            other,
        )
        assert {r[3] for r in records(record)} == {str(other.proc.pid)}
        owner.signal(signal.SIGCONT)
        more = await cq.send_many(queue_name, [Job("test.record", i) for i in range(200, 300)])
        await until(
            lambda: len({r[1] for r in records(record)} & set(more)) == len(more), 120, "both daemons serve on", owner
        )
        woke = events(owner, "hold_expired_before_take")
    finally:
        for d in [owner, other]:
            if d is not None:
                d.signal(signal.SIGCONT)
                d.signal(signal.SIGTERM)
        for d in [owner, other]:
            if d is not None:
                assert d.wait() == 0, d.output()[-3000:]
    done = [r[1] for r in records(record)]
    lost = set(ids + more) - set(done)
    doubled = len(done) - len(set(done))
    print(f"sent={len(ids) + len(more)} lost={len(lost)} duplicated={doubled}")
    assert not lost and doubled == 0
    assert woke, "the owner woke, found its hold lapsed and did not commit what it had read"

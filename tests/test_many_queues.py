"""Many queues (issue 17) against the real node: what an idle queue costs, and what must not grow
with the number of queues that exist.

Reads are counted by the client itself (``Database.reads``: every SELECT it sends), so "0 reads while
a long poll waits" is a count of requests, not a timing. Expiry runs on the ManualClock (moved, never
slept on); tombstones are counted as the delete requests a queue delete sends.
"""

from __future__ import annotations

import asyncio
import copy
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from daemon.base.clock import Clock, ManualClock
from daemon.base.config import Settings
from daemon.base.errors import QueueNotFound, UsageError
from daemon.base.lru import Lru
from daemon.engine.client import Casque
from daemon.engine.delivery.idle_look import EMPTY_TRUST_MS
from daemon.engine.operations.queue_actions import delete_queue
from daemon.engine.operations.reaper import QueueReaper
from daemon.engine.storage.db import Database
from daemon.engine.wake.due_feed import READ_EVERY_S, SLOT_MS

from .conftest import ROOT, TEST_KEYSPACE
from .test_receive import parked


async def fresh(settings: Settings, clock: Clock | None = None, **sections: dict[str, Any]) -> Casque:
    """A new client: a process's first contact with every queue (nothing cached)."""
    s = copy.deepcopy(settings)
    for section, values in sections.items():
        for key, value in values.items():
            setattr(getattr(s, section), key, value)
    return await Casque.connect(s, clock=clock) if clock else await Casque.connect(s)


@pytest.fixture
async def made(cq: Casque) -> AsyncIterator[list[str]]:
    """Names a test creates in bulk, deleted afterwards: the keyspace is shared, and listings
    scanned by other tests (the console's search) should not grow by hundreds a run."""
    names: list[str] = []
    yield names
    sem = asyncio.Semaphore(32)

    async def drop(name: str) -> None:
        async with sem:
            try:
                await delete_queue(cq.stores, name)
            except QueueNotFound:
                pass

    await asyncio.gather(*(drop(n) for n in names))


# ---- tiny queues ------------------------------------------------------------------------------
async def test_a_tiny_queue_is_one_shard_and_one_bucket(cq: Casque, queue_name: str) -> None:
    qs = await cq.create_queue(queue_name, shards=1, buckets=1)
    assert (qs.shards, qs.buckets) == (1, 1)
    with pytest.raises(UsageError, match="shards must be between 1"):
        await cq.create_queue(queue_name + "x", shards=0)


async def receive_reads(settings: Settings, queue: str) -> tuple[int, int, int]:
    """Reads of a new process's first empty receive on ``queue`` (cold), of its second, at once
    (warm: within the window its last empty look answers, ``EMPTY_TRUST_MS``), and of a third once
    that window has passed. The receipt key is read once per process, before, so it is not counted."""
    clock = ManualClock(Clock().now_ms())
    client = await fresh(settings, clock=clock)
    try:
        await client.receiver.signer()
        counts = []
        for i in range(3):
            if i == 2:
                clock.advance(EMPTY_TRUST_MS)
            before = client.db.reads
            assert await client.receive(queue, wait=0) == []
            counts.append(client.db.reads - before)
        return counts[0], counts[1], counts[2]
    finally:
        await client.close()


async def test_receive_on_an_idle_tiny_queue_reads_2_cold_and_0_warm(
    cq: Casque, settings: Settings, queue_name: str
) -> None:
    """Cold: settings and the cursors of its row, which show it has no partition: nothing anywhere,
    so no peek (issue 28; 3 before). Warm: 0, the last empty look answers (1 before, a peek); after
    the window, 1 (a peek)."""
    await cq.create_queue(queue_name, shards=1, buckets=1)
    assert await receive_reads(settings, queue_name) == (2, 0, 1)


async def test_receive_on_a_used_idle_tiny_queue_reads_3_cold_and_0_warm(
    cq: Casque, settings: Settings, queue_name: str
) -> None:
    """A tiny queue that held messages (all deleted) keeps its partition (its cursors): a cold
    receive reads settings, its cursors, and peeks from them (a peek without the cursor would scan
    the deleted messages' tombstones); warm 0 within the window, 1 after."""
    await cq.create_queue(queue_name, shards=1, buckets=1)
    await cq.send(queue_name, "t", "x")
    (got,) = await cq.receive(queue_name, wait=5, visibility=60)
    assert await cq.delete(got.receipt)
    assert await receive_reads(settings, queue_name) == (3, 0, 1)


async def test_a_cold_receive_reads_the_cursors_in_one_request_per_shard(
    cq: Casque, settings: Settings, queue_name: str
) -> None:
    """An idle 4 shards x 4 buckets queue: 1 settings read + 4 cursor reads (one per shard, which
    also show that no row has a partition, so no look follows: issue 28); warm 0, then one look at
    the current bucket's row of every shard (engine/delivery/idle_look.py: one request, the previous
    bucket's rows included during the first clock tolerance of a bucket); before issue 28 6 cold and
    1 warm, before issue 27 a peek per row (9 or 13 cold, 4 or 8 warm), and before issue 17 a read
    of each row's cursor and a peek of each row (33)."""
    await cq.create_queue(queue_name, shards=4, buckets=4)
    assert await receive_reads(settings, queue_name) == (1 + 4, 0, 1)


async def test_a_cold_receive_peeks_the_rows_that_exist_and_finds_an_old_buckets_message(
    cq: Casque, settings: Settings, queue_name: str
) -> None:
    """A message in the row of a bucket two minutes back (sent by a client whose clock is 130 s
    behind): that row has a partition, so a new process's first receive peeks it and takes it."""
    await cq.create_queue(queue_name, shards=1, buckets=4, bucket_seconds=60)
    late = await fresh(settings, clock=ManualClock(Clock().now_ms() - 130_000))
    try:
        mid = await late.send(queue_name, "t", "old")
    finally:
        await late.close()
    client = await fresh(settings)
    try:
        (got,) = await client.receive(queue_name, wait=0, visibility=60)
        assert str(got.message.id) == mid and got.message.bucket != (client.clock.now_ms() // 60_000) % 4
        assert await client.delete(got.receipt)
    finally:
        await client.close()


async def test_a_cold_receive_still_starts_at_the_stored_cursor(
    cq: Casque, settings: Settings, queue_name: str
) -> None:
    """The cursors read in the burst are used: a second process finds the message the first left."""
    await cq.create_queue(queue_name, shards=1, buckets=2)
    ids = [await cq.send(queue_name, "t", i) for i in range(3)]
    first = await cq.receive(queue_name, max=2, wait=5, visibility=60)
    assert await cq.delete_many([d.receipt for d in first]) == [True, True]
    client = await fresh(settings)
    try:
        (last,) = await client.receive(queue_name, max=10, wait=5, visibility=60)
        assert sorted([str(d.message.id) for d in first] + [str(last.message.id)]) == sorted(ids)
        assert await client.delete(last.receipt)
    finally:
        await client.close()


async def test_a_parked_poll_reads_again_only_when_woken(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name, shards=1, buckets=1)
    poll = asyncio.create_task(cq.receive(queue_name, wait=20, visibility=60))
    await parked(cq, queue_name)
    at_park, feed_at_park = cq.db.reads, cq.stores.due_feed.reads
    mid = await cq.send(queue_name, "t", "x")  # wakes it (Wakeups.notify)
    (got,) = await poll
    assert str(got.message.id) == mid
    # settings cached; a peek, the take (lock read, re-check, due read), one top-up peek: 5 measured;
    # plus, when the send finds its list of wake-hint listeners older than hints.refresh (1 s), the
    # one background read that refreshes it (engine/wake/hint_directory.py); the due feed's reads apart
    assert cq.db.reads - at_park - (cq.stores.due_feed.reads - feed_at_park) <= 6
    assert await cq.delete(got.receipt)


async def test_a_send_of_this_process_voids_the_remembered_empty_look(cq: Casque, queue_name: str) -> None:
    """Right after an empty look, a send from this process (told to the queue's consumer) makes the
    next receive read, and find it."""
    await cq.create_queue(queue_name, shards=1, buckets=1)
    assert await cq.receive(queue_name, wait=0) == []
    mid = await cq.send(queue_name, "t", "x")
    reads = cq.db.reads
    (got,) = await cq.receive(queue_name, wait=0, visibility=60)
    assert str(got.message.id) == mid and cq.db.reads > reads
    assert await cq.delete(got.receipt)


async def test_a_hintless_send_of_another_process_is_found_after_the_window_and_by_the_due_feed(
    settings: Settings, queue_name: str
) -> None:
    """What the 0-read answer can miss, bounded: a message of another process that sent no hint.
    A receive without a wait answers from the last empty look (0 reads) only within EMPTY_TRUST_MS
    of it (on the client's clock), and finds the message once that has passed. A long poll that
    begins on a remembered look parks without a read, and the due feed wakes it: it finds the message
    within the feed's bound of the send."""
    clock = ManualClock(Clock().now_ms())
    short = await fresh(settings, clock=clock)
    longp = await fresh(settings)
    other = await fresh(settings, hints={"send": False})
    try:
        await short.create_queue(queue_name, shards=1, buckets=1)
        assert await short.receive(queue_name, wait=0) == []
        first = await other.send(queue_name, "t", "first")
        reads = short.db.reads
        assert await short.receive(queue_name, wait=0) == [], "within the window: the remembered look"
        assert short.db.reads == reads
        clock.advance(max(EMPTY_TRUST_MS, Clock().now_ms() - clock.now_ms() + 1))
        (got,) = await short.receive(queue_name, wait=0, visibility=60)
        assert str(got.message.id) == first
        assert await short.delete(got.receipt)

        assert await longp.receive(queue_name, wait=0) == []
        sent_at = time.monotonic()
        second = await other.send(queue_name, "t", "second")
        (got,) = await longp.receive(queue_name, wait=10, visibility=60)
        found = time.monotonic() - sent_at
        bound = SLOT_MS / 1000 + READ_EVERY_S + 1.0  # the feed's, plus a look and a take
        assert str(got.message.id) == second
        assert found < bound, f"found {found:.1f}s after the send: not within the due feed's {bound:.1f}s"
        assert await longp.delete(got.receipt)
    finally:
        for client in (short, longp, other):
            await client.close()


async def park_on_each(cq: Casque, names: list[str], per_queue: int = 1) -> list[asyncio.Task[Any]]:
    """Long polls (max 10, as SQS clients ask) parked on each queue: returns once all are parked."""
    polls = [
        asyncio.create_task(cq.receive(name, max=10, wait=30, visibility=60))
        for name in names
        for _ in range(per_queue)
    ]
    for name in names:
        await parked(cq, name)
    end = time.monotonic() + 10
    while sum(len(cq.stores.wakeups._waiters[n]._parked) for n in names) < len(polls) and time.monotonic() < end:
        await asyncio.sleep(0.01)
    return polls


async def test_a_send_wakes_the_one_poll_of_its_queue_among_n_parked(
    cq: Casque, queue_name: str, made: list[str]
) -> None:
    """20 long polls parked on 20 tiny queues; one send to one of them: that poll answers, the 19
    others stay parked, and the reads after the send are that one poll's (a peek, the take, a top-up:
    the same as with one poll parked)."""
    names = [f"{queue_name}_{i}" for i in range(20)]
    made += names
    await cq.create_queues(names, shards=1, buckets=1)
    polls = await park_on_each(cq, names)
    at_park = cq.db.reads
    mid = await cq.send(names[7], "t", "x")
    (got,) = await polls[7]
    assert str(got.message.id) == mid
    assert cq.db.reads - at_park <= 6
    assert all(not p.done() for i, p in enumerate(polls) if i != 7), "a poll of another queue answered"
    assert all(len(cq.stores.wakeups._waiters[n]._parked) == 1 for i, n in enumerate(names) if i != 7)
    for p in polls:
        p.cancel()
    await asyncio.gather(*polls, return_exceptions=True)
    assert await cq.delete(got.receipt)


async def test_a_send_wakes_one_of_the_polls_parked_on_its_queue(cq: Casque, queue_name: str) -> None:
    """5 long polls parked on one queue, one message sent: one poll reads and answers, the other 4
    stay parked (before issue 28 all 5 woke and read: 5 looks for one message). A second message
    wakes a second poll. (A poll that fills its batch wakes the next one: there may be more.)"""
    await cq.create_queue(queue_name, shards=1, buckets=1)
    polls = await park_on_each(cq, [queue_name], per_queue=5)
    waiter = cq.stores.wakeups._waiters[queue_name]
    at_park = cq.db.reads
    first = await cq.send(queue_name, "t", 1)
    done, _ = await asyncio.wait(polls, return_when=asyncio.FIRST_COMPLETED)
    (answered,) = done
    (got,) = answered.result()
    assert str(got.message.id) == first
    assert cq.db.reads - at_park <= 6, "the reads of one poll, not five"
    await asyncio.sleep(0)
    assert len(waiter._parked) == 4 and sum(p.done() for p in polls) == 1
    second = await cq.send(queue_name, "t", 2)
    rest = [p for p in polls if p is not answered]
    done, _ = await asyncio.wait(rest, return_when=asyncio.FIRST_COMPLETED)
    (got2,) = done.pop().result()
    assert str(got2.message.id) == second
    for p in polls:
        p.cancel()
    await asyncio.gather(*polls, return_exceptions=True)
    assert await cq.delete_many([got.receipt, got2.receipt]) == [True, True]


async def test_a_woken_poll_that_leaves_without_taking_passes_the_wake_on(cq: Casque, queue_name: str) -> None:
    """Two polls parked; one send wakes the older, which is cancelled (an SQS client gone) the moment
    its look is sent. The wake is not lost with it: the other looks and takes the message at once, not
    at the end of its wait. The send is keyed: an unkeyed one is
    handed to the parked poll without a wake (engine/wake/catch.py), and a keyed one wakes it as
    another process's send (by its wake hint) does."""
    await cq.create_queue(queue_name, shards=1, buckets=1)
    other = asyncio.create_task(cq.receive(queue_name, max=10, wait=30, visibility=60))
    await parked(cq, queue_name)
    second = asyncio.create_task(cq.receive(queue_name, max=10, wait=30, visibility=60))
    end = time.monotonic() + 10
    while len(cq.stores.wakeups._waiters[queue_name]._parked) < 2 and time.monotonic() < end:
        await asyncio.sleep(0.01)
    cancelled: list[bool] = []

    def cancel_its_look(db: Any, stmt: Any) -> None:
        if asyncio.current_task() is other and not cancelled:
            cancelled.append(other.cancel())

    with Database.observing(cancel_its_look):
        mid = await cq.send(queue_name, "t", "x", key="wakes")
        t0 = time.monotonic()
        (got,) = await asyncio.wait_for(second, 10)
    assert cancelled == [True], "the woken poll was the older one, cancelled during its look"
    assert other.cancelled()
    assert str(got.message.id) == mid and time.monotonic() - t0 < 5
    assert await cq.delete(got.receipt)


# ---- bounded caches ---------------------------------------------------------------------------
def test_lru_drops_the_least_recently_used_and_tells_its_owner() -> None:
    gone: list[str] = []
    lru: Lru[str, int] = Lru(2, lambda k, v: gone.append(k))
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # a is now the most recent
    lru.put("c", 3)
    assert gone == ["b"] and list(lru) == ["a", "c"]


def test_an_lru_with_keep_keeps_every_entry_in_use_and_drops_idle_ones_past_its_limit() -> None:
    """The per-queue caches size themselves to the queues in use (owners online), not to a count: an entry used
    within ``keep_s`` is never dropped; idle past it, the next put drops the oldest down to the limit."""
    now = [0.0]
    gone: list[str] = []
    lru: Lru[str, int] = Lru(2, lambda k, v: gone.append(k), keep_s=60.0, clock=lambda: now[0])
    for i in range(5):
        lru.put(f"q{i}", i)
    assert len(lru) == 5 and gone == [], "all five in use"
    now[0] = 30.0
    assert lru.get("q1") == 1  # q1 used again: in use for another 60 s
    now[0] = 61.0
    lru.put("q5", 5)
    assert gone == ["q0", "q2", "q3", "q4"] and list(lru) == ["q1", "q5"]


async def test_queue_gauges_cover_the_queues_used_lately_and_a_bounded_number(
    cq: Casque, queue_name: str, made: list[str]
) -> None:
    """12 queues, 7 of them used (a send): the gauges' round takes the used ones only, at most 5,
    in one read of the active-queues index, however many queues exist (before issue 28: the first
    5 in token order, used or not)."""
    from daemon.service.queue_gauges import QueueGauges

    names = [f"{queue_name}_{i}" for i in range(12)]
    made += names
    await cq.create_queues(names, shards=1, buckets=1)
    used = names[:7]
    for name in used:
        await cq.send(name, "t", "x")
    await cq.stores.activity.flush()
    reads = cq.db.reads
    gauged = await QueueGauges(cq, "test", 15.0, max_queues=5).active_queues()
    assert cq.db.reads - reads == 1, "one read of the index, not a listing of the queues"
    assert len(gauged) == 5 and len(set(gauged)) == 5
    everyone = await QueueGauges(cq, "test", 15.0, max_queues=100_000).active_queues()
    assert set(used) <= set(everyone) and not set(names[7:]) & set(everyone), "an unused queue is gauged"


# ---- listing by page --------------------------------------------------------------------------
async def test_paging_returns_every_queue_exactly_once(cq: Casque, queue_name: str, made: list[str]) -> None:
    names = {f"{queue_name}_{i}" for i in range(40)}
    made += names
    await cq.create_queues(names, shards=1, buckets=1)
    seen: list[str] = []
    token = None
    reads = cq.db.reads
    pages = 0
    while True:
        page, token = await cq.stores.queues.page(token, 97)
        pages += 1
        assert len(page) <= 97
        seen += [q.name for q in page]
        if token is None:
            break
    assert len(seen) == len(set(seen)), "a queue was listed twice"
    assert names <= set(seen)
    assert cq.db.reads - reads <= pages + 1, "one bounded read per page"


def casque_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        "CASQUE_CASSANDRA__KEYSPACE": TEST_KEYSPACE,
        "CASQUE_QUEUE_DEFAULTS__SHARDS": "1",
        "CASQUE_QUEUE_DEFAULTS__BUCKETS": "1",
    }
    import os

    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        input=stdin,
        env=dict(os.environ, **env),
        timeout=120,
    )


async def test_cli_queues_pages_by_token_and_create_many_reads_stdin(
    cq: Casque, queue_name: str, made: list[str]
) -> None:
    names = [f"{queue_name}_{i}" for i in range(30)]
    made += names
    done = await asyncio.to_thread(
        casque_cli, "queues", "create-many", "--shards", "1", "--buckets", "1", stdin="\n".join(names) + "\n\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "30 queues created"
    again = await asyncio.to_thread(casque_cli, "queues", "create-many", stdin="\n".join(names))
    assert again.stdout.strip() == "0 queues created"
    seen: list[str] = []
    after: list[str] = []
    for _ in range(1000):
        out = await asyncio.to_thread(casque_cli, "queues", "--json", "--limit", "500", *after)
        assert out.returncode == 0, out.stderr
        import json

        seen += [q["name"] for q in json.loads(out.stdout)]
        if "next page" not in out.stderr:
            break
        after = ["--after", out.stderr.rsplit("--after ", 1)[1].strip()]
    assert len(seen) == len(set(seen)) and set(names) <= set(seen)
    bad = await asyncio.to_thread(casque_cli, "queues", "--after", "nope")
    assert bad.returncode != 0 and "invalid --after 'nope'" in bad.stderr


async def test_cli_queue_create_takes_expire_after_and_refuses_a_short_one(cq: Casque, queue_name: str) -> None:
    made = await asyncio.to_thread(
        casque_cli, "queue", "create", queue_name, "--shards", "1", "--buckets", "1", "--expire-after", "2m"
    )
    assert made.returncode == 0, made.stderr
    assert (await cq.stores.queues.get(queue_name, fresh=True)).expire_after_s == 120
    short = await asyncio.to_thread(casque_cli, "queue", "create", queue_name + "s", "--expire-after", "10s")
    assert short.returncode == 2 and "expire_after must be 0 (never) or at least 60s, got 10s" in short.stderr
    await delete_queue(cq.stores, queue_name)


async def test_create_queues_counts_what_it_created_and_names_a_bad_name(
    cq: Casque, queue_name: str, made: list[str]
) -> None:
    names = [f"{queue_name}_{i}" for i in range(50)]
    made += names + [f"{queue_name}_ok"]
    assert await cq.create_queues(names[:20], shards=1, buckets=2, concurrency=8) == 20
    assert await cq.create_queues(names, shards=1, buckets=2, concurrency=8) == 30
    assert (await cq.stores.queues.get(names[-1])).buckets == 2
    with pytest.raises(UsageError, match="already exists"):
        await cq.create_queues(names[:1], if_missing=False)
    with pytest.raises(UsageError, match="invalid queue name .bad name!."):
        await cq.create_queues([f"{queue_name}_ok", "bad name!"])


# ---- idle expiry ------------------------------------------------------------------------------
async def test_expiry_deletes_an_idle_queue_and_keeps_an_active_one(settings: Settings, queue_name: str) -> None:
    clock = ManualClock(Clock().now_ms())
    client = await fresh(settings, clock=clock)
    idle, busy, forever = f"{queue_name}_idle", f"{queue_name}_busy", f"{queue_name}_forever"
    try:
        for q in (idle, busy):
            await client.create_queue(q, shards=1, buckets=1, expire_after=120)
        await client.create_queue(forever, shards=1, buckets=1)
        await client.send(idle, "t", "left behind")
        clock.advance(100_000)
        await client.send(busy, "t", "x")  # marks busy active at +100 s
        await client.stores.activity.flush()
        clock.advance(50_000)  # +150 s: idle is 150 s idle, busy 50 s
        reaper = QueueReaper(client.stores, "test-reaper")
        gone = await reaper.reap()
        assert idle in gone and busy not in gone and forever not in gone
        with pytest.raises(QueueNotFound):
            await client.stores.queues.get(idle, fresh=True)
        assert (await client.stores.queues.names.matching(idle, None, 10))[0] == [], (
            "an expired queue leaves the ListQueues name index"
        )
        assert (await client.stores.queues.names.matching(busy, None, 10))[0] == [busy]
        assert (await client.stores.queues.get(busy, fresh=True)).expire_after_s == 120
        assert await client.peek(busy) != []
        clock.advance(130_000)  # busy now idle past its 120 s too
        assert busy in await reaper.reap()
    finally:
        await client.close()


async def test_activity_writes_at_most_one_mark_per_interval(settings: Settings, queue_name: str) -> None:
    clock = ManualClock(Clock().now_ms())
    client = await fresh(settings, clock=clock)
    try:
        await client.create_queue(queue_name, shards=1, buckets=1, expire_after=3600)
        for _ in range(50):
            await client.send(queue_name, "t", "x")
            await client.receive(queue_name, max=10, wait=0, visibility=60)
        await client.stores.activity.flush()
        assert client.stores.activity.writes == 1
        clock.advance(301_000)  # min(5 min, expire_after / 4) later: one more
        await client.send(queue_name, "t", "x")
        await client.stores.activity.flush()
        assert client.stores.activity.writes == 2
    finally:
        await client.close()


async def test_only_the_lease_holder_reaps(settings: Settings, queue_name: str) -> None:
    """Two processes' reapers: the holder deletes the idle queue, the other does nothing until the
    holder lets the lease go."""
    clock = ManualClock(Clock().now_ms())
    client = await fresh(settings, clock=clock)
    lease = f"expiry_{queue_name}"  # not the real lease, which a running `casque serve` may hold
    a, b = QueueReaper(client.stores, "a", lease=lease), QueueReaper(client.stores, "b", lease=lease)
    try:
        await client.create_queue(queue_name, shards=1, buckets=1, expire_after=60)
        clock.advance(61_000)
        assert queue_name in (await a.tick() or [])
        assert await b.tick() is None
        await a.lease.release()
        assert await b.tick() is not None
    finally:
        await b.lease.release()
        await client.close()


async def test_deleting_a_queue_writes_partition_tombstones_not_one_per_message(cq: Casque, queue_name: str) -> None:
    """1 x 1 queue with 500 messages: 21 partition tombstones (its row, 16 key shards, poison, settings, expiry
    mark, name index) and one more write, its due-feed entry telling other processes to forget the row; the same as
    for an empty queue. The old delete wrote one tombstone per message."""
    counts = []
    for name, n in ((queue_name + "_full", 500), (queue_name + "_empty", 0)):
        await cq.create_queue(name, shards=1, buckets=1)
        if n:
            from daemon.engine.send.producer import Job

            await cq.send_many(name, [Job("t", i) for i in range(n)])
        await cq.stores.activity.flush()  # the send's active-queue mark (a write of the send, not of the delete)
        await cq.stores.due_feed.flush()  # and its due-feed entry
        requests, reads = cq.db.requests, cq.db.reads
        tombstones = await delete_queue(cq.stores, name)
        counts.append((tombstones, (cq.db.requests - requests) - (cq.db.reads - reads)))
    assert counts == [(21, 22), (21, 22)]


async def test_list_queues_next_token_walks_every_queue_once_with_boto3(
    cq: Casque, queue_name: str, made: list[str]
) -> None:
    """A real boto3 client pages the whole table with MaxResults/NextToken: every queue once."""
    import boto3
    from botocore.config import Config

    from daemon.testing import sqsserver

    names = {f"{queue_name}_{i}" for i in range(25)}
    made += names
    await cq.create_queues(names, shards=1, buckets=1)
    server = await asyncio.to_thread(sqsserver.start, TEST_KEYSPACE)
    try:
        sqs = boto3.client(
            "sqs",
            endpoint_url=server.url,
            region_name="us-east-1",
            aws_access_key_id="k",
            aws_secret_access_key="s",
            config=Config(retries={"max_attempts": 1}),
        )
        seen: list[str] = []
        kwargs: dict[str, Any] = {"MaxResults": 300}
        while True:
            page = await asyncio.to_thread(lambda: sqs.list_queues(**kwargs))
            urls = page.get("QueueUrls", [])
            assert len(urls) <= 300
            seen += [u.rsplit("/", 1)[-1] for u in urls]
            if "NextToken" not in page:
                break
            kwargs["NextToken"] = page["NextToken"]
        assert len(seen) == len(set(seen)), "a queue was listed twice"
        assert names <= set(seen)
    finally:
        await asyncio.to_thread(server.stop)

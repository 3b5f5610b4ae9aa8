"""A queue's settings and its SQS attributes live in one ``queues`` row and are cached side by side
(engine/queues/store.py, attributes.py): one read of the row fills both caches, whichever is asked first.

Each SQS request needs both (the settings to take or send, the attributes for its policy, delay or redrive),
and both caches last 5 s, so a long poll every 20 s missed both: two reads of the same row, about 1.3 of the
4.5 reads of every poll in the full many-queues run (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from daemon.base.errors import QueueNotFound
from daemon.base.lru import ONLINE_S
from daemon.engine.client import Casque
from daemon.engine.queues.store import CACHE_SECONDS, COVERED_TRUST_MS, REFRESH_AHEAD_S
from daemon.engine.storage.db import Database
from daemon.engine.wake.due_feed import READ_EVERY_S


def _text(stmt: Any) -> str:
    """A statement's CQL: a prepared one's, or a bound one's prepared statement's."""
    return getattr(stmt, "query_string", "") or getattr(getattr(stmt, "prepared_statement", None), "query_string", "")


def queue_row_reads(queue: str) -> tuple[list[str], Any]:
    """The reads of the ``queues`` table sent while observing (and the observer to install)."""
    seen: list[str] = []

    def observe(db: Database, stmt: Any) -> None:
        text = _text(stmt)
        if text.startswith("SELECT") and ".queues WHERE name" in text:
            seen.append(text)

    return seen, observe


@pytest.mark.parametrize("first", ["settings", "attributes"])
async def test_one_read_of_a_queue_s_row_fills_both_caches(cq: Casque, queue_name: str, first: str) -> None:
    await cq.create_queue(queue_name, shards=1, buckets=1)
    await cq.extras.set(queue_name, {"DelaySeconds": "3"}, set(), cq.clock.now_ms())
    st = cq.stores
    st.queues._cache.pop(queue_name)
    st.attributes._cache.pop(queue_name)
    seen, observe = queue_row_reads(queue_name)
    with Database.observing(observe):
        if first == "settings":
            qs = await st.queues.get(queue_name)
            extras = await st.attributes.get(queue_name)
        else:
            extras = await st.attributes.get(queue_name)
            qs = await st.queues.get(queue_name)
    assert qs.name == queue_name and qs.shards == 1
    assert extras.attributes.get("DelaySeconds") == "3"
    assert len(seen) == 1, seen


async def test_a_deleted_queue_s_row_read_fresh_is_not_found_by_either(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name, shards=1, buckets=1)
    st = cq.stores
    await st.queues.get(queue_name)
    await cq.admin.delete(queue_name)
    seen, observe = queue_row_reads(queue_name)
    with Database.observing(observe):
        with pytest.raises(QueueNotFound):
            await st.queues.get(queue_name, fresh=True)
        assert (await st.attributes.get(queue_name)).attributes == {}  # filled by the read above: no row
    assert len(seen) == 1
    with pytest.raises(QueueNotFound):  # and the settings' cache kept nothing of the deleted queue
        await st.queues.get(queue_name)


async def _until(cond: Any, seconds: float, what: str) -> float:
    """Wait until ``cond()`` (polled, with a deadline); how long it took."""
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < seconds, what
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def test_a_process_the_due_feed_covers_trusts_a_queue_row_for_a_minute_and_forgets_it_when_told(
    cq: Casque, settings: Any, queue_name: str
) -> None:
    """While a process reads the due feed without a break (a poll parked), a queue row it read is trusted past the
    5 s cache (an owner polling every 20 s reads its row once a minute), because every write to the row is announced
    there: a change made by another process reaches it at its next feed read, far sooner than its trust would end.
    Without the feed, a read older than 5 s is made again."""
    await cq.create_queue(queue_name, shards=1, buckets=1, timeout=30)
    await cq.create_queue(queue_name + "_parked", shards=1, buckets=1)
    st, feed = cq.stores, cq.stores.due_feed
    poll = asyncio.create_task(cq.receive(queue_name + "_parked", wait=60))
    other = await Casque.connect(settings)
    try:
        await _until(lambda: feed.covered_since() is not None, 10, "the feed is read while a poll is parked")
        await st.queues.get(queue_name, fresh=True)
        await asyncio.sleep(CACHE_SECONDS + 0.5)
        seen, observe = queue_row_reads(queue_name)
        with Database.observing(observe):
            assert (await st.queues.get(queue_name)).timeout_ms == 30_000
            assert (await st.attributes.get(queue_name)).attributes == {}
        assert seen == [], "a row read while the feed covered is trusted past the 5 s cache"

        await other.stores.queues.update(queue_name, timeout=45)
        await other.extras.set(queue_name, {"DelaySeconds": "4"}, set(), other.clock.now_ms())
        told = await _until(lambda: st.queues.cached(queue_name) is None, 3 * READ_EVERY_S + 1, "never told")
        assert told < CACHE_SECONDS
        assert (await st.queues.get(queue_name)).timeout_ms == 45_000
        assert (await st.attributes.get(queue_name)).attributes == {"DelaySeconds": "4"}
    finally:
        poll.cancel()
        await asyncio.gather(poll, return_exceptions=True)
        await other.close()
    await _until(lambda: feed.covered_since() is None, 10, "the feed stops being read once no poll is parked")
    await st.queues.get(queue_name, fresh=True)
    await asyncio.sleep(CACHE_SECONDS + 0.5)
    seen, observe = queue_row_reads(queue_name)
    with Database.observing(observe):
        await st.queues.get(queue_name)
    assert len(seen) == 1, "uncovered, a row read more than 5 s ago is read again"


async def test_a_covered_process_re_reads_the_rows_in_use_a_hundred_to_a_request_before_their_minute_ends(
    cq: Casque, queue_name: str
) -> None:
    """An owner polling every 20 s would read its queue's row once a minute; 20,000 owners online, 333 requests a second
    (docs/design.md, "Long polls"). While covered, the process re-reads the rows in use before their minute ends,
    a hundred to a request, and the owners' polls read none. A row not asked for within a minute is not re-read."""
    names = [f"{queue_name}_{i}" for i in range(250)]
    await cq.create_queues(names, shards=1, buckets=1)
    await cq.create_queue(queue_name, shards=1, buckets=1)
    st, feed = cq.stores, cq.stores.due_feed
    for name in names:
        await st.queues.get(name)
    poll = asyncio.create_task(cq.receive(queue_name, wait=60))
    try:
        await _until(lambda: feed.covered_since() is not None, 10, "the feed is read while a poll is parked")
        cache = st.queues._cache
        old = time.monotonic() - (COVERED_TRUST_MS / 1000 - 1)  # each row a second from the end of its trust
        for name in names:
            hit = cache.peek(name)
            assert hit is not None
            cache.replace(name, (old, hit[1]))
        idle = names[0]
        cache._used[idle] = time.monotonic() - ONLINE_S - 1  # not asked for within ONLINE_S: not in use
        seen, observe = queue_row_reads(queue_name)
        with Database.observing(observe):
            await _until(lambda: all(cache.peek(n)[0] > old for n in names[1:]), 2 * REFRESH_AHEAD_S, "not re-read")  # type: ignore[index]
            assert len(seen) == 3 and all(" IN " in s for s in seen), seen  # 249 rows in use
            assert cache.peek(idle)[0] == old  # type: ignore[index]
            for name in names[1:]:
                await st.queues.get(name)
                await st.attributes.get(name)
            assert len(seen) == 3, "the owners' uses read no row"
    finally:
        poll.cancel()
        await asyncio.gather(poll, return_exceptions=True)


async def test_a_row_an_announcement_forgets_while_the_refresh_reads_it_is_left_to_its_next_use(
    cq: Casque, queue_name: str
) -> None:
    """The refresh's read may return the row as it was before a change whose announcement arrives while the read is
    in flight: put back, that old row would be trusted another minute. Here the announcement (the feed's ``forget``) is
    told as the refresh's request is sent; the row stays forgotten, and the next use reads it."""
    await cq.create_queue(queue_name, shards=1, buckets=1)
    await cq.create_queue(queue_name + "_parked", shards=1, buckets=1)
    st, feed = cq.stores, cq.stores.due_feed
    await st.queues.get(queue_name)
    poll = asyncio.create_task(cq.receive(queue_name + "_parked", wait=60))
    told: list[str] = []

    def announce_during_the_read(db: Database, stmt: Any) -> None:
        text = _text(stmt)
        if ".queues WHERE name IN" in text and not told:
            feed.forget(queue_name)
            told.append(text)

    try:
        await _until(lambda: feed.covered_since() is not None, 10, "the feed is read while a poll is parked")
        hit = st.queues._cache.peek(queue_name)
        assert hit is not None
        st.queues._cache.replace(queue_name, (time.monotonic() - COVERED_TRUST_MS / 1000 + 1, hit[1]))
        with Database.observing(announce_during_the_read):
            await _until(lambda: bool(told), 2 * REFRESH_AHEAD_S, "the row was never refreshed")
            after = feed._after
            assert after is not None
            await after
        assert st.queues.cached(queue_name) is None and st.attributes._cache.peek(queue_name) is None
        seen, observe = queue_row_reads(queue_name)
        with Database.observing(observe):
            await st.queues.get(queue_name)
        assert len(seen) == 1, "the next use reads the row"
    finally:
        poll.cancel()
        await asyncio.gather(poll, return_exceptions=True)

"""A parked long poll costs nothing between its start and its answer (engine/wake/wakeups.py), against the real node:
N queues with a poll parked on each cost, over a window of several due-feed reads, no request but the feed's one read
a second for the whole process (``cq.db.requests``), and no loop timer of their own (the event loop's scheduled
handles do not grow with N). What finds a message whose wake hint was lost, the due feed (engine/wake/due_feed.py),
is made to happen in tests/test_hints.py (``test_a_lost_hint_costs_only_latency_the_due_feed_finds_the_message``).

A per-queue re-read at any interval needs a timer per queue, which the handle count sees at once; the request count
sees one at any interval shorter than the window.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from daemon.base.clock import Clock
from daemon.engine.client import Casque
from daemon.engine.wake.due_feed import READ_EVERY_S
from daemon.engine.wake.wakeups import Deadlines, QueueWaiter
from tests.support.longpoll import parked

OWNERS = 40
WINDOW_S = 4 * READ_EVERY_S


def timers() -> int:
    """The event loop's pending timers (cancelled ones wait in its heap until they come round: not counted)."""
    return len([h for h in asyncio.get_running_loop()._scheduled if not h.cancelled()])  # type: ignore[attr-defined]


async def test_parked_polls_cost_no_read_and_no_timer_of_their_own(cq: Casque, queue_name: str) -> None:
    names = [f"{queue_name}_{i}" for i in range(OWNERS)]
    await cq.create_queues(iter(names), shards=1, buckets=1)
    idle = timers()
    polls = [asyncio.create_task(cq.receive(q, wait=60)) for q in names]
    for q in names:
        await parked(cq, q)
    feed = cq.stores.due_feed
    requests, reads = cq.db.requests, feed.reads
    await asyncio.sleep(WINDOW_S)  # the window: what the parked polls cost meanwhile is counted, not hoped for
    assert feed.reads - reads >= 1, "the feed reads (once a second) while polls are parked"
    assert cq.db.requests - requests == feed.reads - reads, "nothing but the feed's reads: no look, no mark, no sweep"
    assert timers() - idle <= 2, (
        f"{timers() - idle} timers for {OWNERS} parked polls: one for the deadlines, the feed's"
    )
    assert not any(p.done() for p in polls)
    for p in polls:
        p.cancel()
    await asyncio.gather(*polls, return_exceptions=True)
    for q in names:
        await cq.stores.queues.delete(q)


async def test_an_owner_polling_again_and_again_writes_its_bookkeeping_once(cq: Casque, queue_name: str) -> None:
    """A queue's bookkeeping (the pull-reader mark, the activity marks) is written by its owner's first poll, and
    not again by the next ones (the activity index at most every 10 minutes, idle expiry every 5)."""
    await cq.create_queue(queue_name, shards=1, buckets=1, expire_after=3600)
    writes = cq.db.requests - cq.db.reads
    assert await cq.receive(queue_name, wait=0.2) == []
    await cq.stores.activity.flush()
    first = cq.db.requests - cq.db.reads - writes
    assert 1 <= first <= 4, (
        f"{first} writes: the pull-reader mark and its due-feed entry, the activity index, the expiry"
    )
    writes = cq.db.requests - cq.db.reads
    for _ in range(8):
        assert await cq.receive(queue_name, wait=0.2) == []
    await cq.stores.activity.flush()
    assert cq.db.requests - cq.db.reads == writes, "the next polls write nothing"


async def test_an_owner_polling_again_and_again_looks_once_while_the_feed_covers_it(
    cq: Casque, queue_name: str
) -> None:
    """An owner's polls answer from the last empty look of its queue while the process reads the due feed without a
    break (engine/delivery/idle_look.py ``known_empty``): a warm poll reads no message row. The first poll warms the
    consumer (its own peek); the second looks again if that peek came before the feed's reads began (a process whose
    polls were parked just before has them going already), the next ones do not look at all."""
    await cq.create_queue(queue_name, shards=1, buckets=1, bucket_seconds=3600)  # no new bucket (a look) meanwhile
    consumer = cq.receiver.pulled.get(queue_name)
    looks = []
    for _ in range(6):
        assert await cq.receive(queue_name, wait=1) == []
        looks.append(consumer.stats.peeks)
    assert looks[1] <= 1 and looks[2:] == [looks[1]] * 4, f"looks after each poll: {looks}"


async def test_an_owner_s_look_after_a_quiet_spell_is_one_read(cq: Casque, queue_name: str) -> None:
    """When an owner's remembered look has aged out (a minute while the feed covers it), its rows' cursors are as old
    as that look, all alike. The look still reads from them in one request: an old cursor costs it no more than the
    rows' own peeks, which read from it too; a look that refused old cursors would cost the fetch's peeks and then a
    look, two reads a minute per owner."""
    # A client with a clock of its own: the session's client writes with timestamps that only increase, so skewed 45 s
    # ahead, it would stamp its writes 45 s ahead in later tests too, and another client's conditional update of a row
    # it created was shadowed (tests/test_queue_row_cache.py, run after this in one process).
    clock = Clock()
    own = await Casque.connect(cq.settings, clock=clock)
    try:
        await own.create_queue(queue_name, shards=1, buckets=1, bucket_seconds=3600)  # no new bucket meanwhile
        for _ in range(2):
            assert await own.receive(queue_name, wait=0) == []
        clock.offset_ms += 45_000  # the quiet spell: the cursors are now 45 s behind the clock
        reads = own.db.reads
        assert await own.receive(queue_name, wait=0) == []
        assert own.db.reads - reads == 1, f"{own.db.reads - reads} reads for one look"
    finally:
        await own.close()


async def test_a_message_made_visible_again_by_another_process_reaches_a_poll_that_trusts_its_look(
    cq: Casque, settings: Any, queue_name: str
) -> None:
    """Another process received the message and let its visibility end (or changed it to 0): that process entered the
    queue in the due feed at the visibility's end, so this process's owner, answering from a trusted look, is woken
    and receives it within the feed's bound (about 2 s), not at its next look a minute later."""
    await cq.create_queue(queue_name, shards=1, buckets=1)
    other = await Casque.connect(settings)
    try:
        for change in (None, 0):
            await other.send(queue_name, "t", "again")
            [taken] = await other.receive(queue_name, wait=5, visibility=8)
            for _ in range(3):  # the owner's polls, until its look is trusted
                assert await cq.receive(queue_name, wait=1) == []
            visible_at = taken.message.visible_at
            if change is not None:
                await other.change_visibility(taken.receipt, change)
                visible_at = cq.clock.now_ms()
            got = await cq.receive(queue_name, wait=20)
            assert [d.message.id for d in got] == [taken.message.id]
            assert visible_at is not None
            late_ms = cq.clock.now_ms() - visible_at
            assert late_ms < 2 * READ_EVERY_S * 1000 + 2_000, f"received {late_ms} ms after it was visible again"
            await cq.delete(got[0].receipt)
    finally:
        await other.close()


def test_the_shared_deadline_timer_under_uvloop_which_casque_serve_runs() -> None:
    """uvloop's ``call_at`` of a time already passed returns a plain handle (no ``when``): a deadline added while one
    such is armed must still be kept (it failed every receive of a loaded server with an AttributeError)."""
    import uvloop

    async def deadlines_end_in_order() -> list[int]:
        deadlines, loop, ended = Deadlines(), asyncio.get_running_loop(), []
        futs = [loop.create_future() for _ in range(3)]
        for i, (fut, timeout_s) in enumerate(zip(futs, (0.0, 0.02, 0.01))):
            deadlines.add(timeout_s, fut)
            fut.add_done_callback(functools.partial(lambda i, _: ended.append(i), i))
        await asyncio.wait_for(asyncio.gather(*futs), 5)
        return ended

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(deadlines_end_in_order()) == [0, 2, 1]


def test_the_shared_deadline_timer_fires_about_once_per_deadline_under_uvloop() -> None:
    """uvloop fires a timer up to a millisecond early. A timer that found its deadline not yet come and re-armed for
    the same instant fired again and again until it came: a busy loop, over a hundred fires per deadline."""
    import uvloop

    fires = 0

    class Counted(Deadlines):
        def _fire(self) -> None:
            nonlocal fires
            fires += 1
            super()._fire()

    async def deadlines_end() -> None:
        deadlines, loop = Counted(), asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(200)]
        for i, fut in enumerate(futs):
            deadlines.add(0.005 + i * 0.0021, fut)  # none shares a millisecond with another
        await asyncio.wait_for(asyncio.gather(*futs), 5)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(deadlines_end())
    assert fires <= 2 * 200, f"{fires} fires for 200 deadlines"


def test_a_queue_timer_that_fires_early_under_uvloop_does_not_wake_the_polls_early() -> None:
    """A queue's timer (a due time this process knows) wakes its parked polls once, at the due time: one that uvloop
    fired a millisecond early woke them to look for nothing, then again."""
    import uvloop

    async def wakes_for(timers: int) -> int:
        clock, waiter, woken = Clock(), QueueWaiter(Clock()), 0
        wake = waiter.wake

        def counted(n: int | None = None) -> None:
            nonlocal woken
            woken += 1
            wake(n)

        waiter.wake = counted  # type: ignore[method-assign]
        for _ in range(timers):
            waiter.at(clock.now_ms() + 3)
            await asyncio.sleep(0.006)  # come and gone: each timer fires alone
        return woken

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(wakes_for(500)) == 500

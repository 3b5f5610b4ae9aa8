"""A send hands its messages to a parked poll of the same process (engine/wake/catch.py): written in flight for that
poll in one write, no take. Against the real node: what the poll gets is what a take would have given it (attempt 1,
a receipt that deletes and changes visibility), it comes back after its visibility timeout if not deleted, a batch is
shared among the parked polls up to each one's limit, and what may not be handed over (FIFO, delayed, keyed) is taken
as before. A poll whose handed write failed looks again.

A parked poll re-reads nothing (engine/wake/wakeups.py): a poll that returns at once was handed its message or woken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from daemon.base.metrics import REGISTRY
from daemon.engine.client import Casque
from daemon.engine.consume.consumer import Consumer
from daemon.engine.delivery.receive import Delivery
from daemon.engine.send.producer import Job
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import escape_id
from tests.support.longpoll import parked

from .test_in_place import lane


async def a_parked_poll(
    cq: Casque, queue: str, visibility: float = 60
) -> tuple[asyncio.Task[list[Delivery]], Consumer]:
    """A long poll of a new queue, parked; and the consumer it reads with."""
    await cq.create_queue(queue)
    poll = asyncio.create_task(cq.receive(queue, wait=20, visibility=visibility))
    await parked(cq, queue)
    consumer = cq.receiver.pulled.cached(queue)  # the one the parked poll made
    assert consumer is not None
    return poll, consumer


async def parked_polls(cq: Casque, queue: str, n: int) -> None:
    """Wait until ``n`` polls of ``queue`` are parked."""
    for _ in range(1000):
        w = cq.stores.wakeups._waiters.get(queue)
        if w is not None and len(w._parked) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{n} polls never parked on {queue}")


@contextmanager
def requests_naming(queue: str) -> Iterator[list[Any]]:
    """The requests of this process that bind ``queue`` (a batch: any of its statements): the session's client
    also runs process-wide work (the due feed, hint listeners) whose requests name no queue of a test."""
    name = queue.encode()
    seen: list[Any] = []

    def observe(db: Database, stmt: Any) -> None:
        members = getattr(stmt, "_statements_and_parameters", None)
        values = [v for _, _, params in members for v in params] if members else getattr(stmt, "values", None) or []
        if name in values:
            seen.append(stmt)

    stop = Database.observe(observe)
    try:
        yield seen
    finally:
        stop()


async def test_a_parked_poll_catches_a_send_in_one_write_and_no_take(cq: Casque, queue_name: str) -> None:
    poll, consumer = await a_parked_poll(cq, queue_name, visibility=30)
    takes, caught = consumer.stats.takes, REGISTRY.get_sample_value("casque_sends_caught_total")
    with requests_naming(queue_name) as requests:
        sent = await cq.send(queue_name, "t", {"n": 1})
        (d,) = await poll
    assert len(requests) == 1, f"the send's write, and nothing for the receive: {requests}"
    assert REGISTRY.get_sample_value("casque_sends_caught_total") == (caught or 0) + 1
    assert consumer.stats.takes == takes, "no take ran"
    assert sent.caught and str(d.message.id) == sent
    assert d.message.attempt == 1 and d.message.payload == {"n": 1}
    await cq.change_visibility(d.receipt, 60)  # the receipt is a take's: it finds the delivery
    assert await cq.delete(d.receipt) is True
    assert await cq.receive(queue_name, wait=0) == []


async def test_a_caught_message_not_deleted_comes_back_after_its_visibility(cq: Casque, queue_name: str) -> None:
    poll, _ = await a_parked_poll(cq, queue_name, visibility=1)
    sent = await cq.send(queue_name, "t", "x")
    (first,) = await poll
    assert sent.caught and first.message.attempt == 1
    (again,) = await cq.receive(queue_name, wait=10, visibility=30)  # after the 1 s visibility, by a take
    assert str(again.message.id) == sent and again.message.attempt == 2
    assert await cq.delete(first.receipt) is False, "a stale receipt must not delete the new delivery"
    assert await cq.delete(again.receipt) is True


async def caught(cq: Casque, queue: str, visibility: float) -> Delivery:
    """A message sent to a poll parked on ``queue``, handed over."""
    poll = asyncio.create_task(cq.receive(queue, wait=20, visibility=visibility))
    await parked(cq, queue)
    assert (await cq.send(queue, "t", "x")).caught
    (d,) = await poll
    return d


async def test_a_caught_message_s_delete_takes_its_escape_so_its_row_holds_nothing_live(
    cq: Casque, queue_name: str
) -> None:
    """The caught write's escape entry (due at the visibility's end) is only there to bring the message back: the
    delete of the delivery removes it with the message, by either delete (the checked one of ``Casque.delete``, the
    blind one of SQS's DeleteMessage), so the row has nothing left for the sweep to settle. A stale receipt (the
    message received again since, by a take) removes nothing."""
    deletes: dict[str, Callable[[str], Awaitable[object]]] = {
        "checked": cq.delete,
        "blind": lambda h: cq.settler.delete_batch([h]),
    }
    for how, delete in deletes.items():
        name = f"{queue_name}_{how}"
        await cq.create_queue(name, shards=1, buckets=1)
        d = await caught(cq, name, visibility=30)
        mid = d.message.id
        assert sorted(r.id for r in await lane(cq, name)) == sorted([mid, escape_id(mid)]), "the message, its escape"
        await delete(d.receipt)
        assert await lane(cq, name) == [], f"{how}: the message or its escape stayed"

        stale = await caught(cq, name, visibility=1)
        (again,) = await cq.receive(name, wait=10, visibility=30)  # after the 1 s visibility, by a take
        assert again.message.id == stale.message.id and again.message.attempt == 2
        held = await lane(cq, name)
        await delete(stale.receipt)
        assert await lane(cq, name) == held, f"{how}: a stale receipt changed the row"


async def test_a_batch_is_shared_among_parked_polls_up_to_their_limits(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    polls = [asyncio.create_task(cq.receive(queue_name, max=3, wait=20, visibility=60)) for _ in range(2)]
    await parked_polls(cq, queue_name, 2)
    sent = await cq.send_many(queue_name, [Job("t", i) for i in range(10)])
    got = [await p for p in polls]
    assert [len(g) for g in got] == [3, 3]
    assert [s.caught for s in sent] == [True] * 6 + [False] * 4, "the first six in send order, the rest written due"
    rest: list[str] = []
    while len(rest) < 4:
        more = await cq.receive(queue_name, max=10, wait=5, visibility=60)
        assert more, "the four not handed over were not written due"
        rest += [str(d.message.id) for d in more]
    assert sorted(str(d.message.id) for g in got for d in g) + sorted(rest) == sorted(sent[:6]) + sorted(sent[6:])


async def test_fifo_delayed_and_keyed_messages_are_not_handed_over(cq: Casque, queue_name: str) -> None:
    poll, consumer = await a_parked_poll(cq, queue_name)
    takes = consumer.stats.takes
    delayed = await cq.send(queue_name, "t", "later", delay=0.5)
    keyed = await cq.send(queue_name, "t", "keyed", key="k1")
    assert not delayed.caught and not keyed.caught
    seen = [str(d.message.id) for d in await poll]
    seen += [str(d.message.id) for d in await cq.receive(queue_name, wait=5, visibility=60)]
    assert sorted(seen) == sorted([delayed, keyed]) and consumer.stats.takes >= takes + 2, "woken, and taken"
    fifo = queue_name + "-f.fifo"
    await cq.create_queue(fifo, fifo=True)
    fifo_poll = asyncio.create_task(cq.receive(fifo, wait=20, visibility=60))
    await parked(cq, fifo)
    sent = await cq.send(fifo, "t", "x", group="g", dedup_id="d1")
    assert not sent.caught
    (d,) = await fifo_poll
    assert str(d.message.id) == sent


async def test_a_poll_whose_handed_write_failed_looks_again(cq: Casque, queue_name: str) -> None:
    """The send side of a failed write, as ``Producer._hand`` does it on an error: the claimed poll is told None,
    goes back to looking and takes what is then due."""
    poll, _ = await a_parked_poll(cq, queue_name)
    catch = cq.stores.wakeups.catch(queue_name)
    assert catch is not None and catch.claimed
    catch.deliver(None)
    await parked(cq, queue_name)  # looked, found nothing, parked again
    sent = await cq.send(queue_name, "t", "y")
    (d,) = await poll
    assert str(d.message.id) == sent


async def test_a_delay_sent_under_a_cold_poll_wakes_the_next_poll_across_a_bucket(cq: Casque, queue_name: str) -> None:
    """A delayed send to a queue whose only poll is cold (warmed, looked, parked; no take yet) names its due time for
    the queue's consumer, not only for the poll's timer, which ends with the poll. The next poll's look reads only
    the current time bucket: a message due in the next one is known by that name alone (here, the flake of CI
    stop 49)."""
    await cq.create_queue(queue_name, bucket_seconds=1, buckets=4)
    while cq.clock.now_ms() % 1000 > 100:  # early in a second: the due time below falls in the next bucket
        await asyncio.sleep(0.01)
    first = asyncio.create_task(cq.receive(queue_name, wait=0.3, visibility=60))
    await parked(cq, queue_name)
    due_s = 1.4 - (cq.clock.now_ms() % 1000) / 1000  # 0.4 s into the next second
    sent = await cq.send(queue_name, "t", "later", delay=due_s)
    assert await first == [], "not due yet: the cold poll ends with nothing, and its timer with it"
    assert cq.clock.now_ms() % 1000 < 900, "the next poll looks while the message's bucket is still the next one"
    got = await cq.receive(queue_name, wait=5, visibility=60)
    assert [str(d.message.id) for d in got] == [sent], "woken at its due time by the name its send gave"

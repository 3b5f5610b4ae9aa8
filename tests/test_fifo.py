"""FIFO queues in the engine (engine/take/fifo.py, engine/send/fifo_send.py), against the real node.

Visibility expiry is moved with the ManualClock, never slept on. The SQS face of FIFO queues is
tested in tests/test_sqs_fifo.py with real AWS clients.
"""

from __future__ import annotations

import asyncio
import copy
import json
from types import SimpleNamespace
from typing import Any

import pytest

from daemon.base.clock import Clock, ManualClock
from daemon.base.config import Settings
from daemon.base.errors import UsageError
from daemon.engine.client import Casque
from daemon.engine.delivery.receive import Delivery
from daemon.engine.operations.queue_actions import purge
from daemon.engine.queues.attributes import DEAD_LETTER
from daemon.engine.storage.placement import group_id, tail_id
from daemon.engine.take.fifo import choose

Pair = tuple[Casque, ManualClock]


async def _fifo(cq: Casque, name: str, **options: Any) -> str:
    queue = f"{name}.fifo"
    await cq.create_queue(queue, fifo=True, **options)
    return queue


async def _drain_one(cq: Casque, queue: str, visibility: float = 60) -> list[tuple[str, int]]:
    got = await cq.receive(queue, max=10, wait=0, visibility=visibility)
    return [(d.message.group or "", d.message.payload["n"]) for d in got]


async def test_groups_come_in_order_and_a_group_waits_while_one_is_in_flight(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    q = await _fifo(cq, queue_name)
    for n in range(6):
        for g in ("a", "b", "c"):
            await cq.send(q, "t", {"n": n}, group=g, dedup_id=f"{g}{n}")
    first = await cq.receive(q, max=10, wait=0, visibility=30)
    by_group: dict[str, list[int]] = {}
    for d in first:
        by_group.setdefault(d.message.group or "", []).append(d.message.payload["n"])
    # sent within one ms of the manual clock, the groups have no order between them (docs/design.md, "FIFO queues")
    whole, part = by_group  # one group whole, in order, then the next as far as 10 goes
    assert (by_group[whole], by_group[part]) == ([0, 1, 2, 3, 4, 5], [0, 1, 2, 3]), by_group
    assert [d.message.group for d in first] == [whole] * 6 + [part] * 4
    (last,) = {"a", "b", "c"} - {whole, part}
    rest = await cq.receive(q, max=10, wait=0, visibility=30)
    assert [(d.message.group, d.message.payload["n"]) for d in rest] == [(last, n) for n in range(6)], (
        "the third group, never in flight, and nothing more of the others while theirs are"
    )
    assert await cq.receive(q, max=10, wait=0, visibility=30) == [], "a group in flight delivered its next message"
    # delete the part group's messages: it moves on, the others stay blocked
    await cq.delete_many([d.receipt for d in first if d.message.group == part])
    nxt = await cq.receive(q, max=10, wait=0, visibility=30)
    assert [(d.message.group, d.message.payload["n"]) for d in nxt] == [(part, 4), (part, 5)]
    # the whole group's visibility ends: its first message comes back first, received a second time
    clock.advance(31_000)
    again = await cq.receive(q, max=10, wait=0, visibility=30)
    back = [d for d in again if d.message.group == whole]
    assert back and back[0].message.payload["n"] == 0 and back[0].message.attempt == 2


async def test_every_group_keeps_its_order_through_timeouts_and_deletes(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    q = await _fifo(
        cq, queue_name, content_dedup=True, max_attempts=0
    )  # no limit: a message left many times never leaves
    groups = [f"g{i}" for i in range(20)]
    for n in range(10):
        for g in groups:
            await cq.send(q, "t", {"n": n, "g": g}, group=g)
    done: dict[str, list[int]] = {g: [] for g in groups}
    rounds = 0
    while sum(map(len, done.values())) < 200:
        rounds += 1
        assert rounds < 200, done
        got = await cq.receive(q, max=10, wait=0, visibility=30)
        if not got:
            clock.advance(31_000)  # the ones left undeleted come back
            continue
        left: set[str] = set()
        for i, d in enumerate(got):
            g, n = d.message.payload["g"], d.message.payload["n"]
            if i % 3 == 2 or g in left:  # not deleted (nor the group's later ones in this batch, as a
                left.add(g)  # FIFO client does): it must come back before them
                continue
            assert n == len(done[g]), f"group {g}: got {n} after {done[g]}"
            assert await cq.delete(d.receipt)
            done[g].append(n)
    assert all(v == list(range(10)) for v in done.values())


async def test_a_dedup_id_sent_twice_within_5_minutes_is_one_message(cq: Casque, queue_name: str) -> None:
    q = await _fifo(cq, queue_name)
    first = await cq.send(q, "t", {"n": 1}, group="g", dedup_id="d-1")
    again = await cq.send(q, "t", {"n": 2}, group="g", dedup_id="d-1")
    other = await cq.send(q, "t", {"n": 3}, group="h", dedup_id="d-1")  # scope queue: any group
    assert (again, again.sequence, again.duplicate) == (first, first.sequence, True)
    assert other == first and other.duplicate
    got = await cq.receive(q, max=10, wait=0)
    assert [d.message.payload for d in got] == [{"n": 1}]


async def test_a_queue_deleted_and_created_again_forgets_the_dedup_ids_of_the_first(
    cq: Casque, queue_name: str
) -> None:
    """A queue of the same name is a new queue: a dedup id the deleted one saw within 5 minutes is a new message
    (moto's test_dedupe_fifo, which reuses one queue name, counted 0 messages on a run within 5 minutes of the last)."""
    q = await _fifo(cq, queue_name)
    first = await cq.send(q, "t", {"n": 1}, group="g", dedup_id="d-1")
    await cq.admin.delete(q)
    await _fifo(cq, queue_name)
    again = await cq.send(q, "t", {"n": 2}, group="g", dedup_id="d-1")
    assert again != first and not again.duplicate
    assert [d.message.payload for d in await cq.receive(q, max=10, wait=0)] == [{"n": 2}]
    assert (await cq.send(q, "t", {"n": 3}, group="g", dedup_id="d-1")).duplicate, "then deduplicated as any other"


async def test_content_dedup_and_group_scope(cq: Casque, queue_name: str) -> None:
    q = await _fifo(cq, queue_name, content_dedup=True, dedup_scope="messageGroup", fifo_throughput="perMessageGroupId")
    qs = await cq.stores.queues.get(q)
    assert (qs.shards, qs.buckets) == (16, 1)
    a = await cq.send(q, "t", {"same": True}, group="a")
    a2 = await cq.send(q, "t", {"same": True}, group="a")
    b = await cq.send(q, "t", {"same": True}, group="b")  # same body, other group: not a duplicate in group scope
    assert a2 == a and a2.duplicate and not b.duplicate and b != a
    assert len(await cq.receive(q, max=10, wait=0)) == 2


async def test_sequence_numbers_increase_within_a_group(cq: Casque, queue_name: str) -> None:
    q = await _fifo(cq, queue_name)
    sent = [await cq.send(q, "t", {"n": n}, group="g", dedup_id=str(n)) for n in range(30)]
    seqs = [s.sequence for s in sent if s.sequence is not None]
    assert len(seqs) == 30 and all(len(s) == 20 and s.isdigit() for s in seqs)
    assert seqs == sorted(seqs) and len(set(seqs)) == 30
    got: list[Delivery] = []
    while len(got) < 30:
        batch = await cq.receive(q, max=10, wait=0)
        got += batch
        await cq.delete_many([d.receipt for d in batch])
    assert [d.message.sequence for d in got] == seqs


async def test_order_holds_across_senders_whose_clocks_disagree(settings: Settings, queue_name: str) -> None:
    """Two servers 2 s apart (within the tolerance): a producer alternating between them, each send
    after the last returned, is received in the order it sent (the group's tail, fifo_send.py)."""
    ahead = await Casque.connect(settings, clock=Clock(2_000))
    behind = await Casque.connect(settings, clock=Clock(-2_000))
    try:
        q = await _fifo(ahead, queue_name)
        for n in range(20):
            await (ahead if n % 2 == 0 else behind).send(q, "t", {"n": n}, group="g", dedup_id=str(n))
        got: list[int] = []
        while len(got) < 20:
            batch = await behind.receive(q, max=10, wait=5)
            got += [d.message.payload["n"] for d in batch]
            await behind.delete_many([d.receipt for d in batch])
        assert got == list(range(20))
    finally:
        await ahead.close()
        await behind.close()


async def test_a_send_that_died_after_its_claim_is_written_by_its_retry(cq: Casque, queue_name: str) -> None:
    """A crash between the dedup claim and the write: the retry (same dedup id) writes it, once."""
    q = await _fifo(cq, queue_name)
    sender = cq.stores.producer.fifo
    assert sender is not None
    mid = group_id(cq.clock.now_ms(), "g")
    await cq.db.run(
        sender._claim, [q, "", "lost", mid, cq.clock.now_ms(), cq.db.next_timestamp()]
    )  # the claim, then "kill -9"
    retried = await cq.send(q, "t", {"n": 1}, group="g", dedup_id="lost")
    assert retried == str(mid) and retried.duplicate
    got = await cq.receive(q, max=10, wait=0)
    assert [str(d.message.id) for d in got] == [str(mid)]
    assert await cq.delete(got[0].receipt)
    again = await cq.send(q, "t", {"n": 1}, group="g", dedup_id="lost")
    assert again.duplicate and await cq.receive(q, max=10, wait=0) == [], "a deleted message came back"


async def test_a_purge_releases_the_dedup_ids_claimed_before_it(cq: Casque, queue_name: str) -> None:
    """As SQS's PurgeQueue: an id sent before a purge may be sent again after it, once; the purge
    mark and the redirect (fifo_send.py), over two purges, and with a pre-purge send still writing."""
    q = await _fifo(cq, queue_name)
    sender = cq.stores.producer.fifo
    assert sender is not None
    first = await cq.send(q, "t", {"n": 1}, group="g", dedup_id="d-1")
    assert (await cq.send(q, "t", {"n": 0}, group="g", dedup_id="d-1")).duplicate
    stale = group_id(cq.clock.now_ms(), "g")  # a send claimed before the purge, its write still to come
    await cq.db.run(sender._claim, [q, "", "late", stale, cq.clock.now_ms(), cq.db.next_timestamp()])
    await purge(cq.stores, q)
    second = await cq.send(q, "t", {"n": 2}, group="g", dedup_id="d-1")
    assert not second.duplicate and second != first
    again = await cq.send(q, "t", {"n": 3}, group="h", dedup_id="d-1")
    assert again.duplicate and (again, again.sequence) == (second, second.sequence)
    fresh = await cq.send(q, "t", {"n": 4}, group="g", dedup_id="late")
    assert not fresh.duplicate and fresh != str(stale)
    # the pre-purge sender marks its own claim written only: the id's claim past the purge is untouched
    await cq.db.run(sender._written, [300, q, "", "late"])
    assert (await cq.send(q, "t", {"n": 5}, group="g", dedup_id="late")) == fresh
    got = await cq.receive(q, max=10, wait=0)
    assert [d.message.payload["n"] for d in got] == [2, 4]
    await purge(cq.stores, q)  # a second purge: the redirect of the first is itself from before it
    third = await cq.send(q, "t", {"n": 6}, group="g", dedup_id="d-1")
    assert not third.duplicate and third not in (first, second)
    assert (await cq.send(q, "t", {"n": 7}, group="g", dedup_id="d-1")) == third
    assert [d.message.payload["n"] for d in await cq.receive(q, max=10, wait=0)] == [6]


async def test_a_retried_receive_with_its_attempt_id_gets_the_same_deliveries(cq: Casque, queue_name: str) -> None:
    q = await _fifo(cq, queue_name, content_dedup=True)
    for n in range(3):
        await cq.send(q, "t", {"n": n}, group=f"g{n}")
    first = await cq.receive(q, max=10, wait=0, attempt_id="try-1")
    again = await cq.receive(q, max=10, wait=0, attempt_id="try-1")
    assert len(first) == 3 and [d.receipt for d in again] == [d.receipt for d in first]
    assert await cq.receive(q, max=10, wait=0, attempt_id="try-2") == []
    await cq.delete(first[0].receipt)
    assert [d.receipt for d in await cq.receive(q, max=10, wait=0, attempt_id="try-1")] == [
        d.receipt for d in first[1:]
    ]


async def test_a_message_out_of_receives_leaves_and_its_group_moves_on(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    q = await _fifo(cq, queue_name, max_attempts=2)
    for n in range(2):
        await cq.send(q, "t", {"n": n}, group="g", dedup_id=str(n))
    for attempt in (1, 2):
        got = await cq.receive(q, max=1, wait=0, visibility=10)
        assert [(d.message.payload["n"], d.message.attempt) for d in got] == [(0, attempt)]
        clock.advance(11_000)
    got = await cq.receive(q, max=10, wait=0, visibility=10)
    assert [d.message.payload["n"] for d in got] == [1]
    poisoned = await cq.stores.poison.list(q)
    assert [json.loads(p.payload or b"null")["n"] for p in poisoned] == [0]


async def test_a_stale_receipt_deletes_nothing_on_a_fifo_queue(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    q = await _fifo(cq, queue_name, content_dedup=True)
    await cq.send(q, "t", {"n": 0}, group="g")
    old = (await cq.receive(q, max=1, wait=0, visibility=5))[0]
    clock.advance(6_000)
    new = (await cq.receive(q, max=1, wait=0, visibility=30))[0]
    assert new.message.attempt == 2
    assert await cq.delete(old.receipt) is False
    assert await cq.change_visibility(new.receipt, 0) > 0
    assert (await cq.receive(q, max=1, wait=0))[0].message.attempt == 3


async def test_what_a_fifo_queue_refuses(cq: Casque, queue_name: str) -> None:
    q = await _fifo(cq, queue_name)
    refusals = [
        dict(dedup_id="x"),  # no group
        dict(group="g"),  # no dedup id, no content dedup
        dict(group="g", dedup_id="x", delay=5),
        dict(group="g", dedup_id="x", key="k"),
        dict(group="g", dedup_id="x", priority=3),
        dict(group="g" * 129, dedup_id="x"),
        dict(group="g", dedup_id="ü"),
    ]
    for kwargs in refusals:
        with pytest.raises(UsageError):
            await cq.send(q, "t", {}, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        await cq.create_queue(f"{queue_name}-plain.fifo")  # a .fifo name needs fifo=True
    with pytest.raises(UsageError):
        await cq.create_queue(f"{queue_name}-x", fifo=True)  # fifo=True needs the suffix
    with pytest.raises(UsageError):
        await cq.stores.queues.update(q, fifo=False)
    standard = f"{queue_name}-std"
    await cq.create_queue(standard)
    with pytest.raises(UsageError):
        await cq.send(standard, "t", {}, dedup_id="x")
    assert await cq.receive(q, max=10, wait=0) == []


async def test_a_standard_queue_keeps_the_group_of_a_fair_queue_tenant(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", {}, group="tenant-7")
    got = await cq.receive(queue_name, max=1, wait=0)
    assert got[0].message.group == "tenant-7" and got[0].message.sequence is None


async def test_many_groups_from_concurrent_senders_and_receivers_ledger(settings: Settings, queue_name: str) -> None:
    """Two clients (two servers' engines) send 1,000 groups x 3 concurrently and receive
    concurrently: from the ledger, each group in its send order, 0 duplicated, 0 lost."""
    one, two = await Casque.connect(settings), await Casque.connect(copy.deepcopy(settings))
    try:
        q = await _fifo(one, queue_name, dedup_scope="messageGroup", fifo_throughput="perMessageGroupId")
        groups = [f"u{i}" for i in range(1000)]

        async def produce(client: Casque, mine: list[str]) -> None:
            for n in range(3):
                await asyncio.gather(*(client.send(q, "t", {"g": g, "n": n}, group=g, dedup_id=str(n)) for g in mine))

        await asyncio.gather(produce(one, groups[::2]), produce(two, groups[1::2]))
        seen: dict[str, list[int]] = {g: [] for g in groups}

        async def consume(client: Casque) -> None:
            while sum(map(len, seen.values())) < 3000:
                got = await client.receive(q, max=10, wait=1, visibility=60)
                for d in got:
                    seen[d.message.payload["g"]].append(d.message.payload["n"])
                await client.delete_many([d.receipt for d in got])

        await asyncio.wait_for(asyncio.gather(*(consume(c) for c in (one, two, one, two))), 120)
        bad = {g: ns for g, ns in seen.items() if ns != [0, 1, 2]}
        assert not bad, f"{len(bad)} groups out of order, duplicated or lost: {list(bad.items())[:5]}"
    finally:
        await one.close()
        await two.close()


def test_a_group_has_one_row_and_one_tail() -> None:
    assert len({group_id(t, "g").int & 0xFFFF_FFFF for t in range(0, 10_000, 7)}) == 1
    assert tail_id("g") == tail_id("g") != tail_id("h")


async def test_a_fifo_dead_letter_queue_gets_the_message_in_its_group_once(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    q = await _fifo(cq, queue_name, max_attempts=1, content_dedup=True)
    dlq = await _fifo(cq, f"{queue_name}-dlq")
    await cq.stores.attributes.set(q, {DEAD_LETTER: dlq}, set(), clock.now_ms())
    await cq.send(q, "t", {"n": 0}, group="g")
    await cq.send(q, "t", {"n": 1}, group="g")
    assert [d.message.payload["n"] for d in await cq.receive(q, max=1, wait=0, visibility=5)] == [0]
    clock.advance(6_000)
    assert [d.message.payload["n"] for d in await cq.receive(q, max=10, wait=0)] == [
        1
    ]  # 0 left for the DLQ; g moved on
    dead = await cq.receive(dlq, max=10, wait=0)
    assert [(d.message.payload["n"], d.message.group) for d in dead] == [(0, "g")]
    assert dead[0].message.headers["casque.dead_letter_from"] == q


async def test_a_moved_fifo_dead_letter_goes_back_in_its_group_once(manual: Pair, queue_name: str) -> None:
    """What a move task (engine/operations/mover.py) sends for a FIFO dead letter: the message in its group,
    deduplicated by the dead letter's id, so a move repeated after a crash is dropped."""
    from daemon.engine.operations.mover import _job

    cq, clock = manual
    q = await _fifo(cq, queue_name, max_attempts=1, content_dedup=True)
    dlq = await _fifo(cq, f"{queue_name}-dlq")
    await cq.stores.attributes.set(q, {DEAD_LETTER: dlq}, set(), clock.now_ms())
    for n in range(3):
        await cq.send(q, "t", {"n": n}, group="g")
    for n in range(3):  # each received once, never deleted: out of receives, into the DLQ
        assert [d.message.payload["n"] for d in await cq.receive(q, max=1, wait=0, visibility=5)] == [n]
        clock.advance(6_000)
    assert await cq.receive(q, max=10, wait=0) == []  # the take that moves the last one to the DLQ
    dead = await cq.receive(dlq, max=10, wait=0)
    assert [d.message.payload["n"] for d in dead] == [0, 1, 2]
    first = await cq.send_many(q, [_job(d.message, True) for d in dead])
    again = await cq.send_many(
        q, [_job(d.message, True) for d in dead]
    )  # the runner killed before its delete: moved twice
    assert [s.duplicate for s in first] == [False] * 3 and [s.duplicate for s in again] == [True] * 3
    back = await cq.receive(q, max=10, wait=0)
    assert [(d.message.payload["n"], d.message.group) for d in back] == [(0, "g"), (1, "g"), (2, "g")]


def _row(due: int, group: str, state: int = 0, visible_at: int | None = None, task: str = "t") -> SimpleNamespace:
    return SimpleNamespace(
        due=due, headers={"casque.group": group}, state=state, visible_at=visible_at, task=task, attempt=1
    )


def test_the_take_choice_group_by_group() -> None:
    """engine/take/fifo.py ``choose`` on its own: in flight blocks, visibility passed comes first, a
    delay blocks, a spent one leaves without blocking, another's task blocks, the budget stops; the
    groups come whole, in the order their first deliverable message became visible."""
    rows = [
        _row(1, "a", state=1, visible_at=500),  # a in flight: a blocked
        _row(2, "b", state=1, visible_at=50),  # b's visibility passed: b comes back first
        _row(3, "a"),
        _row(4, "b"),
        _row(5, "c", visible_at=200),  # c still in the queue's delay
        _row(6, "c"),
        _row(7, "d", state=1, visible_at=10),
        _row(8, "d"),
        _row(9, "e", task="other"),
        _row(10, "e"),
    ]
    spent = {7}
    choice = choose(
        rows,
        now=100,
        due_by=100,
        fits=lambda r: True,
        one_per_group=False,
        spent=lambda r: r.due in spent,
        ours=lambda r: r.task == "t",
    )
    # d's 7 leaves (spent, first: it costs no budget), d's 8 was sent at 8, b's 2 visible again only at 50
    assert [r.due for r in choice.kept] == [7, 8, 2, 4]
    assert (choice.first_live, choice.wake, choice.blocked) == (1, 200, 1)
    one = choose(rows, now=100, due_by=100, fits=lambda r: True, one_per_group=True)
    assert [r.due for r in one.kept] == [9, 7, 2], "e waits since 9, d since 10 (its 7 visible again), b since 50"
    budget = iter([True, True, False])
    assert [r.due for r in choose(rows, 100, 100, lambda r: next(budget), False).kept] == [9, 10], (
        "e whole first, then the budget stops before d"
    )


async def test_concurrent_sends_of_one_dedup_id_make_one_whole_message(cq: Casque, queue_name: str) -> None:
    q = await _fifo(cq, queue_name)
    sent = await asyncio.gather(
        *(cq.send(q, "t", {"n": n, "pad": "x" * n}, group=f"g{n % 3}", dedup_id="same") for n in range(8))
    )
    assert len(set(sent)) == 1 and sum(not s.duplicate for s in sent) == 1
    (d,) = await cq.receive(q, max=10, wait=0)
    n = d.message.payload["n"]
    assert (
        d.message.payload == {"n": n, "pad": "x" * n} and d.message.group == f"g{n % 3}"
    )  # one send's body and group, not a mix

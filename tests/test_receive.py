"""The pull API (engine/delivery/receive.py) against the real node: receive, delete, change visibility,
batch forms, receipts that can't be forged, and long polls that wake at once.

Visibility expiry is checked with the ManualClock (moved, never slept on). The long-poll tests use
the real clock with a scout cadence of 30 s, so a poll that returns within a second was woken by
the event under test, not by re-reading Cassandra.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest
from cassandra.query import BatchStatement

from daemon.base.clock import ManualClock
from daemon.base.config import Settings
from daemon.base.errors import QueueNotFound, UsageError
from daemon.engine.client import Casque
from daemon.engine.delivery.receive import Delivery, InvalidReceipt
from daemon.engine.operations.queue_actions import purge
from daemon.engine.operations.stats import queue_stats
from daemon.engine.storage.db import Database
from daemon.engine.wake.due_feed import READ_EVERY_S, SLOT_MS
from tests.support.longpoll import parked

Pair = tuple[Casque, ManualClock]


async def test_receive_delete_ledger_each_message_exactly_once(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    sent = {await cq.send(queue_name, "t", {"n": i}) for i in range(60)}
    seen: list[str] = []
    while len(seen) < len(sent):
        got = await cq.receive(queue_name, max=10, wait=5, visibility=60)
        assert got, f"receive came back empty with {len(sent) - len(seen)} messages left"
        seen += [str(d.message.id) for d in got]
        assert all(await cq.delete_many([d.receipt for d in got]))
    assert sorted(seen) == sorted(sent), "lost or duplicated"
    assert await cq.receive(queue_name, wait=0) == []
    st = await queue_stats(cq.stores, queue_name)
    assert (st.waiting_due, st.in_flight, st.scheduled) == (0, 0, 0)


async def test_undeleted_message_comes_back_after_visibility_with_next_attempt(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    mid = await cq.send(queue_name, "t", "x")
    first = await cq.receive(queue_name, wait=0, visibility=30)
    assert [str(d.message.id) for d in first] == [mid] and first[0].message.attempt == 1
    clock.advance(29_000)
    assert await cq.receive(queue_name, wait=0) == [], "visible before its visibility timeout"
    clock.advance(2_000)
    again = await cq.receive(queue_name, wait=0, visibility=30)
    assert [str(d.message.id) for d in again] == [mid] and again[0].message.attempt == 2
    assert await cq.delete(first[0].receipt) is False, "a stale receipt must not delete the new delivery"
    # an earlier receipt changes the visibility of the current delivery, as SQS does (docs/sqs.md)
    await cq.change_visibility(first[0].receipt, 0)
    third = await cq.receive(queue_name, wait=0, visibility=30)
    assert [(str(d.message.id), d.message.attempt) for d in third] == [(mid, 3)]
    assert await cq.delete(third[0].receipt) is True
    clock.advance(60_000)
    assert await cq.receive(queue_name, wait=0) == []


async def test_change_visibility_zero_makes_it_visible_now_and_receipt_survives_moves(
    manual: Pair, queue_name: str
) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    mid = await cq.send(queue_name, "t", "x")
    (d,) = await cq.receive(queue_name, wait=0, visibility=30)
    await cq.change_visibility(d.receipt, 300)
    clock.advance(60_000)
    assert await cq.receive(queue_name, wait=0) == [], "extended visibility ignored"
    await cq.change_visibility(d.receipt, 120)  # the same receipt, after a move: still valid
    await cq.change_visibility(d.receipt, 0)
    (back,) = await cq.receive(queue_name, wait=0, visibility=30)
    assert str(back.message.id) == mid and back.message.attempt == 2
    assert await cq.delete(d.receipt) is False
    await cq.change_visibility(back.receipt, 500)
    assert await cq.delete(back.receipt) is True, "a receipt must delete after its visibility was changed"
    clock.advance(600_000)
    assert await cq.receive(queue_name, wait=0) == []
    st = await queue_stats(cq.stores, queue_name, now_ms=clock.now_ms())
    assert (st.waiting_due, st.in_flight, st.scheduled) == (0, 0, 0)


async def test_forged_altered_or_foreign_receipts_are_refused_and_change_nothing(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    await cq.create_queue(queue_name + "b")
    await cq.send(queue_name, "t", "x")
    (d,) = await cq.receive(queue_name, wait=5, visibility=60)
    flipped = d.receipt[:10] + ("A" if d.receipt[10] != "A" else "B") + d.receipt[11:]
    for bad in ("", "not a receipt!", "AAAA", flipped, d.receipt[:-2]):
        with pytest.raises(InvalidReceipt):
            await cq.delete(bad)
        with pytest.raises(InvalidReceipt):
            await cq.change_visibility(bad, 0)
    with pytest.raises(InvalidReceipt):
        await cq.settler.delete(d.receipt, queue=queue_name + "b")
    assert (await queue_stats(cq.stores, queue_name)).in_flight == 1
    assert await cq.delete(d.receipt) is True


async def test_a_receipt_with_any_signed_byte_changed_deletes_nothing_through_the_blind_path(
    cq: Casque, queue_name: str
) -> None:
    """The blind delete (``Settler.delete_batch``, SQS's DeleteMessage/DeleteMessageBatch) trusts the receipt's
    position, write timestamp and flags: each byte of the signed body (version, id, row, lane, due, attempt,
    write timestamp, flags, queue name) changed in turn, re-encoded, is refused, and the message stays in flight."""
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", "x")
    (d,) = await cq.receive(queue_name, wait=5, visibility=60)
    raw = base64.urlsafe_b64decode(d.receipt + "=" * (-len(d.receipt) % 4))
    body_len = len(raw) - 16  # the tag is the last 16 bytes
    for i in range(body_len):
        changed = raw[:i] + bytes([raw[i] ^ 0x01]) + raw[i + 1 :]
        bad = base64.urlsafe_b64encode(changed).decode("ascii").rstrip("=")
        [refused] = await cq.settler.delete_batch([bad])
        assert isinstance(refused, InvalidReceipt), f"byte {i} changed was accepted"
    assert (await queue_stats(cq.stores, queue_name)).in_flight == 1
    assert await cq.settler.delete_batch([d.receipt]) == [None]
    assert (await queue_stats(cq.stores, queue_name)).in_flight == 0


async def sent_and_received(cq: Casque, queue: str, n: int) -> list[Delivery]:
    """``n`` messages sent to a new ``queue`` and received (in flight for a minute)."""
    await cq.create_queue(queue)
    for i in range(n):
        await cq.send(queue, "t", i)
    got: list[Delivery] = []
    while len(got) < n:
        got += await cq.receive(queue, max=n, wait=5, visibility=60)
    return got


async def test_concurrent_deletes_of_one_queue_in_one_turn_are_one_read_and_one_batch(
    cq: Casque, queue_name: str
) -> None:
    """Ten DeleteMessage calls at once (a consumer deleting each message as it finishes, or ten consumers): the blind
    deletes of one queue begun in one turn of the loop share the markers' read and the batch (base/turns.py), each
    answered for its own receipt: a forged one among them is refused alone."""
    got = await sent_and_received(cq, queue_name, 10)
    handles = [d.receipt for d in got] + ["forged"]
    requests: list[str] = []

    marks = cq.settler.table.read_marks  # the delete's read; its batch is of DELETEs (not a sweep's or a take's)

    def record(db: Database, stmt: Any) -> None:
        if isinstance(stmt, BatchStatement):
            texts = [db.statement_text(query_id) or "" for _, query_id, _ in stmt._statements_and_parameters]
            if texts and all(t.lstrip().upper().startswith("DELETE") for t in texts):
                requests.append("batch")
        elif stmt is marks:
            requests.append("SELECT")

    with Database.observing(record):
        out = await asyncio.gather(*(cq.settler.delete_batch([h], queue_name) for h in handles))
    assert out[:10] == [[None]] * 10 and isinstance(out[10][0], InvalidReceipt)
    assert sorted(requests) == ["SELECT", "batch"], requests
    assert (await queue_stats(cq.stores, queue_name)).in_flight == 0
    assert await cq.receive(queue_name, wait=0) == []


async def test_batch_forms_report_each_entry(cq: Casque, queue_name: str) -> None:
    got = await sent_and_received(cq, queue_name, 3)
    changed = await cq.change_visibility_many([(got[0].receipt, 100), ("junk", 1), (got[1].receipt, 100)])
    assert isinstance(changed[0], int) and isinstance(changed[1], InvalidReceipt) and isinstance(changed[2], int)
    deleted = await cq.delete_many([d.receipt for d in got] + ["junk"])
    assert deleted[:3] == [True, True, True] and isinstance(deleted[3], InvalidReceipt)


async def test_receive_counts_attempts_and_poisons_after_max(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name, max_attempts=2)
    mid = await cq.send(queue_name, "t", "x")
    for attempt in (1, 2):
        (d,) = await cq.receive(queue_name, wait=0, visibility=10)
        assert d.message.attempt == attempt
        clock.advance(11_000)
    assert await cq.receive(queue_name, wait=0) == []
    poisoned = await cq.stores.poison.list(queue_name)
    assert [str(p.id) for p in poisoned] == [mid]


async def test_bad_arguments_are_one_line_usage_errors(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    for kwargs in ({"max": 0}, {"wait": -1}, {"visibility": 12 * 3600 + 1}, {"max": True}):
        with pytest.raises(UsageError) as err:
            await cq.receive(queue_name, **kwargs)
        assert "\n" not in str(err.value)
    with pytest.raises(QueueNotFound):
        await cq.receive(queue_name + "_missing", wait=0)


async def test_long_poll_wakes_on_in_process_send(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    poll = asyncio.create_task(cq.receive(queue_name, wait=20))
    await parked(cq, queue_name)
    t0 = time.monotonic()
    mid = await cq.send(queue_name, "t", "x")
    got = await poll
    assert [str(d.message.id) for d in got] == [mid]
    assert time.monotonic() - t0 < 2.0, "woken by polling, not by the send"


async def test_long_poll_wakes_when_a_delayed_message_falls_due(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    poll = asyncio.create_task(cq.receive(queue_name, wait=20))
    await parked(cq, queue_name)
    mid = await cq.send(queue_name, "t", "x", delay=1.5)
    due = time.time() + 1.5
    got = await poll
    late = time.time() - due
    assert [str(d.message.id) for d in got] == [mid]
    assert -0.05 < late < 1.0, f"delivered {late:.3f}s from its due time"


async def test_long_poll_wakes_on_change_visibility_and_on_expiry(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", "x")
    (d,) = await cq.receive(queue_name, wait=5, visibility=600)
    poll = asyncio.create_task(cq.receive(queue_name, wait=20, visibility=1))
    await parked(cq, queue_name)
    t0 = time.monotonic()
    await cq.change_visibility(d.receipt, 0)
    (back,) = await poll
    assert time.monotonic() - t0 < 2.0 and back.message.attempt == 2
    # not deleted: its 1 s visibility expires, and a parked poll gets it at once
    t1 = time.monotonic()
    (third,) = await cq.receive(queue_name, wait=20, visibility=60)
    assert third.message.attempt == 3 and 0.5 < time.monotonic() - t1 < 2.5
    assert await cq.delete(third.receipt)


async def test_a_visibility_end_that_passes_while_a_poll_takes_still_wakes_it(cq: Casque, queue_name: str) -> None:
    """A take's check entry comes due at its second's start, before the visibility it covers ends: the poll woken
    then takes nothing (the message is still in flight) and learns the end. If that end passes while the poll is
    still reading, it must look again rather than park with no timer left to wake it (it waited out its whole wait:
    found by tests/test_sqs.py's expiry test, about one run in 300). Here the process stalls (a GC pause, a busy
    loop) on the poll's next request after the take's batch, every time, until past the end."""
    await cq.create_queue(queue_name, shards=1, buckets=1, bucket_seconds=3600)
    await cq.send(queue_name, "t", "x")
    await asyncio.sleep((0.5 - time.time() % 1) % 1)  # mid-second: the entry comes ~500 ms before the end
    (first,) = await cq.receive(queue_name, wait=5, visibility=1)
    end = first.message.visible_at
    assert end is not None
    scan = cq.stores.table.read_range
    seen: list[str] = []

    def stall(_: object, stmt: object) -> None:
        if stmt is scan:
            seen.append("scan")
        elif seen and seen[-1] == "scan" and isinstance(stmt, BatchStatement):
            seen.append("batch")
        elif seen and seen[-1] == "batch" and cq.clock.now_ms() < end:
            seen.append("stalled")
            time.sleep((end - cq.clock.now_ms()) / 1000 + 0.02)

    with Database.observing(stall):
        t0 = time.monotonic()
        (again,) = await cq.receive(queue_name, wait=5, visibility=60)
    assert seen[:3] == ["scan", "batch", "stalled"], f"{seen}: the order under test did not happen"
    assert again.message.id == first.message.id and again.message.attempt == 2
    assert time.monotonic() - t0 < 2.0, "woken at the end, not at the poll's deadline"
    assert await cq.delete(again.receipt)


async def test_long_poll_sees_another_clients_send_within_the_due_feeds_bound(
    cq: Casque, settings: Settings, queue_name: str
) -> None:
    """Another process's send, with no wake hint (``cq`` does not listen), is found through the due feed
    (engine/wake/due_feed.py): within a second of due time and a read's interval, plus a look."""
    other = await Casque.connect(settings)
    try:
        await cq.create_queue(queue_name)
        poll = asyncio.create_task(cq.receive(queue_name, wait=20))
        await parked(cq, queue_name)
        mid = await other.send(queue_name, "t", "x")
        t0 = time.monotonic()
        got = await poll
        assert [str(d.message.id) for d in got] == [mid]
        assert time.monotonic() - t0 < (SLOT_MS / 1000 + READ_EVERY_S) + 1.0
    finally:
        await purge(cq.stores, queue_name)
        await other.close()


async def test_many_parked_polls_get_another_clients_messages_each_once(
    cq: Casque, settings: Settings, queue_name: str
) -> None:
    await cq.create_queue(queue_name)
    polls = [asyncio.create_task(cq.receive(queue_name, max=1, wait=15, visibility=60)) for _ in range(8)]
    await parked(cq, queue_name)
    other = await Casque.connect(settings)
    try:
        sent = {await other.send(queue_name, "t", i) for i in range(8)}
    finally:
        await other.close()
    got = [d for res in await asyncio.gather(*polls) for d in res]
    assert sorted(str(d.message.id) for d in got) == sorted(sent)
    assert cq.stores.wakeups.watched() == 0, "waiters must not outlive their polls"

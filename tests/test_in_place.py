"""Messages in flight stay where they were sent: every standard queue's one layout (engine/take/flights.py).

What the layout promises, read from the rows themselves: a take marks its messages in flight where they were
sent and writes one check entry for them; the payload is never written again; what outlives its visibility comes
back exactly once (through the entry, or an escape the scan wrote); a ghost (what a stale delivery's delete leaves)
is never delivered and is dropped; the sweep leaves messages in flight alone; a purge removes them. A queue created
with the copy layout (before it was removed) is refused with what to do. The clock is a ManualClock shared by
producer and consumer: "comes back then" is checked by moving it, never by sleeping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.base.clock import ManualClock
from daemon.base.config import Settings
from daemon.base.model import Message
from daemon.engine.client import Casque
from daemon.engine.consume.consumer import Consumer
from daemon.engine.consume.sweep import Sweeper
from daemon.engine.send.producer import Job
from daemon.engine.storage.table import STATE_BACKOFF, STATE_IN_FLIGHT, escape_id, is_entry, is_ghost
from daemon.engine.take import flights

from .conftest import TEST_KEYSPACE
from .test_engine import drain
from .test_schema_cli import casque

Pair = tuple[Casque, ManualClock]


async def lane(cq: Casque, queue: str) -> list[Any]:
    """Every live row of the (only) row's lane 0: messages, check entries, ghosts, with their write times."""
    st = cq.stores
    return list(await st.db.run(st.table.read_range, [queue, 0, 0, 0, 0, 1 << 62, 10_000]))


async def finished(cq: Casque, clock: ManualClock, c: Consumer, queue: str, acked: list[Message]) -> None:
    """Ack these, let every timeout pass: nothing comes back, and the row holds nothing live (entries processed)."""
    await cq.stores.acker.ack(acked)
    clock.advance(60_000)
    assert await drain(c) == []
    assert await lane(cq, queue) == []


async def in_place_queue(cq: Casque, queue: str, **options: Any) -> None:
    await cq.create_queue(queue, shards=1, buckets=1, **options)
    row = await cq.stores.queues.read_row(queue)
    assert row is not None and row.in_flight == "in_place", "what its row says, for good"


async def all_taken(cq: Casque, queue: str, n: int) -> tuple[Consumer, list[Message]]:
    """An in-place queue (timeout 300 s) with ``n`` messages sent, every one of them taken."""
    await in_place_queue(cq, queue, timeout=300)
    await cq.send_many(queue, [Job("t", {"n": i}) for i in range(n)])
    c = cq.consumer(queue)
    got = await drain(c)
    assert len(got) == n
    return c, got


async def test_a_take_marks_its_messages_in_flight_where_they_are_with_one_check_entry(
    manual: Pair, queue_name: str
) -> None:
    cq, clock = manual
    await in_place_queue(cq, queue_name, timeout=20)
    ids = [await cq.send(queue_name, "t", {"n": i}) for i in range(5)]
    sent = {r.id: (r.due, r.wt) for r in await lane(cq, queue_name)}
    got = await drain(cq.consumer(queue_name))
    assert sorted(str(m.id) for m in got) == sorted(ids)
    rows = await lane(cq, queue_name)
    messages = [r for r in rows if r.task is not None]
    [entry] = [r for r in rows if is_entry(r)]
    assert {r.id: r.due for r in messages} == {i: due for i, (due, _) in sent.items()}, "nothing moved"
    assert all(r.state == STATE_IN_FLIGHT and r.attempt == 1 for r in messages)
    assert all(r.visible_at == got[0].visible_at for r in messages)
    assert (entry.moved_to, entry.visible_at) == (min(r.due for r in messages), max(r.due for r in messages))
    first_end = min(r.visible_at for r in messages)
    assert entry.due == first_end - first_end % flights.SLOT_MS, "due at the start of the second their visibility ends"
    writes = await cq.stores.db.run(
        f"SELECT id, WRITETIME(payload) AS pw FROM {cq.settings.cassandra.keyspace}.messages "
        "WHERE queue = %s AND bucket = 0 AND shard = 0 AND kind = 1",
        [queue_name],
    )
    assert {r.id: r.pw for r in writes if r.pw is not None} == {i: wt for i, (_, wt) in sent.items()}, (
        "the payload is the send's: the take did not write it again"
    )
    await cq.stores.acker.ack(got)
    clock.advance(21_000 + 10_000)
    assert await drain(cq.consumer(queue_name)) == []
    assert await lane(cq, queue_name) == [], "acked, and the entry processed: nothing left but tombstones"


async def test_a_delivery_longer_than_its_entry_is_escaped_then_comes_back_once(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await in_place_queue(cq, queue_name, timeout=20)
    mid = await cq.send(queue_name, "t", "long")
    c = cq.consumer(queue_name)
    [m] = await drain(c)
    await cq.stores.acker.extend_ms(m, 60_000)  # a long handler: the entry, due at 20 s, still comes first
    clock.advance(21_000 + 10_000)
    assert await drain(c) == [], "still in flight: the scan escapes it instead"
    [escape] = [r for r in await lane(cq, queue_name) if is_entry(r)]
    assert (escape.id, escape.due, escape.moved_to) == (escape_id(m.id), m.visible_at, m.due_ms)
    clock.advance(30_000)
    again = await drain(c)
    assert [(str(x.id), x.attempt) for x in again] == [(mid, 2)]
    await finished(cq, clock, c, queue_name, again)


async def test_a_retry_waits_in_place_and_comes_back_at_its_time(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await in_place_queue(cq, queue_name, timeout=20)
    mid = await cq.send(queue_name, "t", "flaky")
    c = cq.consumer(queue_name)
    [m] = await drain(c)
    await cq.stores.acker.retry(m, 5_000, "boom")
    [row] = [r for r in await lane(cq, queue_name) if r.task is not None]
    assert (row.state, row.due, row.visible_at) == (STATE_BACKOFF, m.due_ms, clock.now_ms() + 5_000)
    clock.advance(4_000)
    assert await drain(c) == []
    clock.advance(1_001)
    [again] = await drain(c)
    assert (str(again.id), again.attempt, again.last_error, again.payload) == (mid, 2, "boom", "flaky")
    await cq.stores.acker.ack([again])


async def test_a_ghost_is_never_delivered_and_is_dropped(manual: Pair, queue_name: str) -> None:
    """A stale delivery's delete (SQS's DeleteMessage with an old receipt) at its own write time removes the send's
    cells and leaves the newer delivery's narrow ones: a row with no task, which no read may deliver."""
    cq, clock = manual
    await in_place_queue(cq, queue_name, timeout=20)
    await cq.send(queue_name, "t", "x")
    c = cq.consumer(queue_name)
    [first] = await drain(c)
    clock.advance(21_000 + 10_000)
    [second] = await drain(c)
    assert second.attempt == 2 and second.write_ts > first.write_ts
    st = cq.stores
    await st.db.run(st.table.delete_at, [first.write_ts, queue_name, 0, 0, 1, 0, first.due_ms, first.id])
    [ghost] = [r for r in await lane(cq, queue_name) if r.id == first.id]
    assert is_ghost(ghost) and ghost.state == STATE_IN_FLIGHT
    clock.advance(21_000 + 10_000)
    assert await drain(c) == [], "a ghost is a deleted message"
    assert await lane(cq, queue_name) == [], "the scan that met it dropped it, with its entry"


async def test_the_sweep_leaves_messages_in_flight_below_the_cursor_alone(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    c, got = await all_taken(cq, queue_name, 20)
    clock.advance(120_000)
    assert await drain(c) == []  # the cursor moves on past them (they lie behind it, in flight)
    sweeper = Sweeper(c, lag_ms=1_000)
    assert await sweeper.sweep() == 0, "in flight is not stranded"
    assert all(r.state == STATE_IN_FLIGHT for r in await lane(cq, queue_name) if r.task is not None)
    await cq.stores.acker.ack(got)
    clock.advance(300_000)
    assert await drain(c) == []


async def test_a_range_longer_than_a_scan_is_finished_by_follow_ups(
    manual: Pair, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flights, "SCAN_LIMIT", 3)
    cq, clock = manual
    await in_place_queue(cq, queue_name, timeout=20)
    ids = [str(s) for s in await cq.send_many(queue_name, [Job("t", {"n": i}) for i in range(10)])]
    c = cq.consumer(queue_name)
    assert len(await drain(c)) == 10
    clock.advance(21_000 + 10_000)
    again = await drain(c)
    assert sorted((str(m.id), m.attempt) for m in again) == sorted((i, 2) for i in ids), "each once, none lost"
    await finished(cq, clock, c, queue_name, again)


async def test_a_copy_layout_queue_is_refused_with_what_to_do_and_can_be_deleted(cq: Casque, queue_name: str) -> None:
    """A standard queue created before the copy layout was removed (its row's ``in_flight`` null, the old default,
    or "copy") keeps messages in flight as timeout columns this casque would never find: it is refused, naming what
    to do; it can still be deleted; once its row says in place it is served. FIFO queues always were in place."""
    from daemon.engine.queues.store import CopyLayoutQueue

    st = cq.stores
    await in_place_queue(cq, queue_name)
    await cq.send(queue_name, "t", "waiting")
    for old in (None, "copy"):
        await st.db.run(f"UPDATE {TEST_KEYSPACE}.queues SET in_flight = %s WHERE name = %s", [old, queue_name])
        with pytest.raises(CopyLayoutQueue, match="copy layout, which this casque no longer serves") as refused:
            await st.queues.get(queue_name, fresh=True)
        assert f"SET in_flight = 'in_place' WHERE name = '{queue_name}'" in str(refused.value)
        with pytest.raises(CopyLayoutQueue):
            await cq.send(queue_name, "t", "x")
    await st.db.run(f"UPDATE {TEST_KEYSPACE}.queues SET in_flight = 'in_place' WHERE name = %s", [queue_name])
    c = cq.consumer(queue_name)
    assert [m.payload for m in await drain(c)] == ["waiting"], "marked in place: served, its waiting message kept"
    await cq.create_queue(queue_name + "x")
    await st.db.run(f"UPDATE {TEST_KEYSPACE}.queues SET in_flight = null WHERE name = %s", [queue_name + "x"])
    await cq.admin.delete(queue_name + "x")
    assert (await st.queues.read_row(queue_name + "x")) is None, "a copy-layout queue can be deleted"
    await cq.create_queue(queue_name + ".fifo", fifo=True)
    await st.db.run(f"UPDATE {TEST_KEYSPACE}.queues SET in_flight = null WHERE name = %s", [queue_name + ".fifo"])
    assert (await st.queues.get(queue_name + ".fifo", fresh=True)).fifo, "a FIFO queue is served whatever it says"


async def test_a_purge_removes_messages_in_flight_behind_the_cursor(manual: Pair, queue_name: str) -> None:
    """PurgeQueue and ``casque purge`` remove messages in flight too, as SQS's PurgeQueue does: behind the cursor,
    found through their check entries (engine/operations/queue_actions.py)."""
    cq, clock = manual
    c, got = await all_taken(cq, queue_name, 10)
    await cq.stores.acker.retry(got[0], 600_000, "later")
    await cq.send(queue_name, "t", "waiting")
    assert await cq.admin.purge(queue_name) == 11, "the 9 in flight, the one in backoff and the one waiting"
    assert (await cq.observe.stats(queue_name)).in_flight == 0
    clock.advance(700_000)
    assert await drain(c) == [], "none comes back after its timeout"


async def test_the_counts_see_messages_in_flight_behind_the_cursor(manual: Pair, queue_name: str) -> None:
    """A message in flight lies behind the cursor, where the counts don't read: they count it through its entry
    (engine/observe/behind.py), in ``casque stats`` and in the depth SQS's Approximate* counts come from. A later
    take commits the cursor past them (their visibility, 5 minutes, is still running)."""
    cq, clock = manual
    c, got = await all_taken(cq, queue_name, 20)
    await cq.stores.acker.ack(got[:5])
    await cq.stores.acker.retry(got[5], 600_000, "later")
    clock.advance(120_000)
    await cq.send_many(queue_name, [Job("t", {"n": "later"})])
    later = await drain(c)
    assert [m.payload for m in later] == [{"n": "later"}]
    await cq.stores.acker.ack(later)
    cursor = (await cq.stores.db.run(cq.stores.table.read_cursors, [queue_name, 0, 0]))[0].cursors[0]
    assert cursor > max(m.due_ms for m in got), "the cursor passed them: a read from it sees none of them"
    qs = await cq.stores.queues.get(queue_name)
    stats = await cq.observe.stats(queue_name)
    assert (stats.in_flight, stats.waiting_due, stats.scheduled) == (14, 0, 1), "the retry waits 10 minutes"
    estimate = await cq.stores.depth_estimator().estimate(qs, clock.now_ms())
    assert (estimate.in_flight, estimate.waiting, estimate.delayed) == (14, 0, 1)
    await cq.stores.acker.ack(got[6:])
    assert (await cq.observe.stats(queue_name)).in_flight == 0


async def test_cli_creates_an_in_place_queue_and_the_layout_options_are_gone(
    tmp_path: Path, settings: Settings, queue_name: str, cq: Casque
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{TEST_KEYSPACE}"\n')
    made = casque("queue", "create", queue_name, config=cfg)
    assert made.returncode == 0, made.stderr
    row = await cq.stores.queues.read_row(queue_name)
    assert row is not None and row.in_flight == "in_place"
    gone = casque("queue", "create", queue_name + "x", "--in-flight", "copy", config=cfg)
    assert gone.returncode == 2 and "unrecognized arguments: --in-flight" in gone.stderr
    changed = casque("queue", "update", queue_name, "--timeout", "1m", config=cfg)
    assert changed.returncode == 0, changed.stderr
    row = await cq.stores.queues.read_row(queue_name)
    assert row is not None and row.in_flight == "in_place", "an update keeps it"
    old = tmp_path / "old.toml"
    old.write_text(cfg.read_text() + '[queue_defaults]\nin_flight = "copy"\n')
    accepted = casque("queue", "create", queue_name + "y", config=old)
    assert accepted.returncode == 0, "a removed key still loads, with no effect: " + accepted.stderr
    row = await cq.stores.queues.read_row(queue_name + "y")
    assert row is not None and row.in_flight == "in_place"
    from daemon.base.config import load_settings

    assert load_settings(cfg, env={"CASQUE_QUEUE_DEFAULTS__IN_FLIGHT": "copy"}), "and from the environment"


async def test_takes_of_one_second_share_one_entry_and_every_message_stays_covered(
    manual: Pair, queue_name: str
) -> None:
    """A consumer's takes of one row whose messages' visibility ends in the same second write one entry, its range
    grown by each (flights.SLOT_MS): fewer entries and scans, and still every message in flight in its range."""
    cq, clock = manual
    await in_place_queue(cq, queue_name, timeout=20)
    c = cq.consumer(queue_name)
    clock.advance(-(clock.now_ms() % 1000))  # at the start of a second: the takes below end their visibility in one
    taken: list[Message] = []
    for i in range(4):
        await cq.send(queue_name, "t", {"n": i})
        taken += await drain(c)
        clock.advance(100)
    assert len(taken) == 4
    [entry] = [r for r in await lane(cq, queue_name) if is_entry(r)]
    assert (entry.moved_to, entry.visible_at) == (min(m.due_ms for m in taken), max(m.due_ms for m in taken))
    clock.advance(21_000 + 10_000)
    again = await drain(c)
    assert sorted((m.id, m.attempt) for m in again) == sorted((m.id, 2) for m in taken), "each back once"
    await finished(cq, clock, c, queue_name, again)

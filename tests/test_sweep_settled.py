"""`casque serve`'s sweep lets settled queues rest (engine/consume/sweep.py, "Settled rows"; issue 28:
Cassandra reads while the queues sit idle ≈ 0), and still finds what lands behind a cursor.

Real node, real clients, a manual clock for the sweeps' time (the lag, the recheck); requests counted
with ``Database.observe``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from daemon.base.clock import ManualClock
from daemon.base.config import Settings
from daemon.engine.client import Casque
from daemon.engine.cluster.activity import HOUR_MS
from daemon.engine.consume.sweep import SETTLED_RECHECK_MS, SWEEP_EVERY_S, SWEEP_LAG_MS, PulledSweeps
from daemon.engine.storage.db import Database

Pair = tuple[Casque, ManualClock]


@contextmanager
def reads() -> Iterator[Counter[str]]:
    """The SELECTs every Database of this process sends, by table (``messages``, ``queues``, ``active_queues``)."""
    seen: Counter[str] = Counter()

    def count(_db: Any, stmt: Any) -> None:
        prepared = getattr(stmt, "prepared_statement", None)
        text = prepared.query_string if prepared is not None else str(getattr(stmt, "query_string", stmt))
        if text.lstrip()[:6].upper() == "SELECT":
            seen[text.split(" FROM ")[1].split()[0].split(".")[-1]] += 1

    with Database.observing(count):
        yield seen


async def _pulled(cq: Casque, names: list[str], used: list[str]) -> PulledSweeps:
    """Queues this process received from (each gets a pull consumer), ``used`` ones after a message was
    sent, received and deleted (their rows hold a cursor); the sweep of ``casque serve`` over them."""
    for name in names:
        await cq.create_queue(name, shards=1, buckets=1)
    for name in used:
        await cq.send(name, "t", "x")
        [d] = await cq.receive(name, max=1, wait=0)
        await cq.delete(d.receipt)
    for name in names:
        assert await cq.receive(name, max=1, wait=0) == []
    await cq.stores.activity.flush()  # our own marks are in the index before the sweep reads it
    return PulledSweeps(cq.receiver.consumers, lambda q, due: None, activity=cq.stores.activity, index_every_ms=0)


async def test_an_idle_server_s_sweep_reads_nothing_for_queues_settled_since_their_last_pass(
    manual: Pair, queue_name: str
) -> None:
    """40 tiny queues pulled from (20 of them held a message, so their rows hold a cursor), then
    left alone. Once the cursors are older than the sweep's lag, one pass settles every row; the
    passes after it read no row and no settings, only the activity index (once per pass for all
    queues: at most one request per index partition). A send of this process to one queue makes
    the next pass read that queue again, and only it."""
    cq, clock = manual
    names = [f"{queue_name}_{i}" for i in range(40)]
    sweeps = await _pulled(cq, names, used=names[:20])
    clock.advance(SWEEP_LAG_MS + 10_000)
    with reads() as settling:
        assert await sweeps.once() == 0
    # settling takes a pass that read the queue's rows: every queue was swept in this one
    assert all(sw.resting(clock.now_ms()) for sw in sweeps._sweepers.values()), "a queue did not settle"
    with reads() as idle:
        for _ in range(5):
            clock.advance(int(SWEEP_EVERY_S * 1000))
            assert await sweeps.once() == 0
    await cq.send(names[3], "t", "wake")
    clock.advance(int(SWEEP_EVERY_S * 1000))
    with reads() as after_send:
        await sweeps.once()
    skipped = sum(sw.skipped for sw in sweeps._sweepers.values())
    print(
        f"\nsettling pass: {dict(settling)}; 5 idle passes over 40 settled queues: {dict(idle)}, "
        f"{skipped} queue passes skipped; the pass after a send to one: {dict(after_send)}"
    )
    assert idle["messages"] == 0 and idle["queues"] == 0, f"an idle pass read rows or settings: {dict(idle)}"
    assert idle["active_queues"] <= 5 * 16, "the index is read once per pass for all queues, not per queue"
    assert skipped >= 5 * 40
    # that queue's row (its cursors, a peek that finds the message); its settings may be in the 5 s cache
    assert after_send["queues"] <= 1 and 1 <= after_send["messages"] <= 3, dict(after_send)


async def test_a_message_written_behind_a_settled_row_s_cursor_by_another_process_is_found_within_the_recheck(
    manual: Pair, settings: Settings, queue_name: str
) -> None:
    """The fault: a settled row (this process drained it, its cursor is past the lag); another process
    then takes from it (its cursor moves on) and a producer whose clock lags 45 s writes a message
    behind that cursor, where no receive can see it. Neither leaves a trace this process reads: no
    hint, no take of ours, and the activity index is not read again after the first pass. The row's
    own recheck (``SETTLED_RECHECK_MS``) finds it: the passes before it read nothing, the one at it
    puts the message back (within the stated bound of the row's settling), and a receive gets it."""
    cq, clock = manual
    sweeps = await _pulled(cq, [queue_name], used=[queue_name])
    clock.advance(SWEEP_LAG_MS + 10_000)
    await sweeps.once()  # settles the row
    await sweeps.once()  # rests; reads the activity index (our own mark only)
    sweeps.index_every_ms = 1 << 60  # never again: the write must be found without it
    [sweeper] = sweeps._sweepers.values()
    settled_at = clock.now_ms()
    assert sweeper.resting(settled_at)
    other = await Casque.connect(settings, clock=ManualClock(clock.now_ms()))
    late = await Casque.connect(settings, clock=ManualClock(clock.now_ms() - 45_000))
    try:
        await other.send(queue_name, "t", "theirs")
        [taken] = await other.consumer(queue_name).fetch(1, visibility_ms=30_000)
        await other.stores.acker.ack([taken])  # their take stored the row's cursor at their now - tolerance
        stranded = await late.send(queue_name, "t", "stranded")
        # the fault, seen by the other process (a receive of ours would be a trace: it reads the row)
        assert await other.receive(queue_name, max=1, wait=0) == [], "the fault did not happen: nothing behind it"
    finally:
        await other.close()
        await late.close()
    found, passes_reading = 0, 0
    while not found:
        clock.advance(int(SWEEP_EVERY_S * 1000))
        assert clock.now_ms() - settled_at <= SETTLED_RECHECK_MS + SWEEP_EVERY_S * 1000, "not found within the bound"
        with reads() as seen:
            found = await sweeps.once()
        passes_reading += bool(seen["messages"])
    waited = clock.now_ms() - settled_at
    got = await cq.receive(queue_name, max=10, wait=0)
    print(
        f"\nfound {found} message {waited / 60_000:.1f} min after the row settled; "
        f"passes reading rows: {passes_reading}"
    )
    assert [str(d.message.id) for d in got] == [stranded]
    assert passes_reading == 1, "only the recheck read the settled row"


async def test_another_process_s_use_seen_in_the_activity_index_wakes_a_settled_queue(
    manual: Pair, settings: Settings, queue_name: str
) -> None:
    """A settled queue; another process sends to it, without a hint, in an hour this process wrote no
    mark in: its ``active_queues`` entry is the only trace, and the recheck is put out of reach. A pass
    in that hour before the send reads no row; the pass after it reads the index (once for all
    queues), sees the new entry, and reads the queue's row, which now holds the message: no longer
    settled, swept every pass again."""
    cq, clock = manual
    sweeps = await _pulled(cq, [queue_name], used=[])
    clock.advance(SWEEP_LAG_MS + 10_000)
    await sweeps.once()  # settles the row
    await sweeps.once()  # rests; reads the activity index (our own mark only)
    [sweeper] = sweeps._sweepers.values()
    sweeper.recheck_at = 1 << 62  # only the index can tell
    clock.advance(HOUR_MS - clock.now_ms() % HOUR_MS + 1000)  # the next hour: no mark of ours in it
    with reads() as quiet:
        await sweeps.once()
    other = await Casque.connect(settings, clock=ManualClock(clock.now_ms()))
    try:
        await other.send(queue_name, "t", "theirs")
        await other.stores.activity.flush()
    finally:
        await other.close()
    clock.advance(int(SWEEP_EVERY_S * 1000))
    with reads() as woken:
        await sweeps.once()
    print(f"\npass in the new hour before their send: {dict(quiet)}; the pass after it: {dict(woken)}")
    assert quiet["messages"] == 0 and quiet["queues"] == 0
    assert woken["messages"] >= 1 and not sweeper.settled, "the index's trace did not wake the queue"


async def test_a_pass_sweeps_several_queues_at_once_and_every_one(manual: Pair, queue_name: str) -> None:
    """A pass over many kept queues sweeps ``concurrency`` of them at a time, not one after another
    (one at a time, a full-size server's 24,576 kept queues took 4 minutes a pass, so queues just used
    took that long to settle and the 30 s pass came every 4 minutes). Counted: the sweep's requests in
    flight at once, at most ``concurrency`` and more than one; every queue swept (settled) by the pass."""
    cq, clock = manual
    names = [f"{queue_name}_{i}" for i in range(24)]
    sweeps = await _pulled(cq, names, used=names)
    sweeps.concurrency = 4
    clock.advance(SWEEP_LAG_MS + 10_000)
    in_flight, most = 0, 0

    def watch(_db: Any, stmt: Any) -> Any:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)

        def done() -> None:
            nonlocal in_flight
            in_flight -= 1

        return done

    with Database.observing(watch):
        assert await sweeps.once() == 0
    assert 1 < most <= 4
    # settling takes a pass that read the queue's rows: every queue was swept in this one
    assert all(sw.resting(clock.now_ms()) for sw in sweeps._sweepers.values()), "a queue did not settle"


async def test_a_pass_over_resting_queues_lets_requests_in_between_queues(manual: Pair, queue_name: str) -> None:
    """A resting queue's turn reads nothing, so a pass over thousands of them (a server's parked owners) ran through
    them in one step of the event loop, every request the server had to answer waiting behind it. Over 40 resting
    queues, another task asking for the loop gets a turn after each worker of the pass swept one queue."""
    cq, clock = manual
    names = [f"{queue_name}_{i}" for i in range(40)]
    sweeps = await _pulled(cq, names, used=names[:20])
    clock.advance(SWEEP_LAG_MS + 10_000)
    await sweeps.once()  # settles every row
    clock.advance(int(SWEEP_EVERY_S * 1000))
    assert all(sw.resting(clock.now_ms()) for sw in sweeps._sweepers.values())
    turns = 0
    at_turn: list[int] = []  # the other task's turns so far, as each queue's sweep starts
    for sweeper in sweeps._sweepers.values():

        async def observed(sweep: Any = sweeper.sweep) -> int:
            at_turn.append(turns)
            return int(await sweep())

        sweeper.sweep = observed  # type: ignore[method-assign]

    async def request() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(request())
    try:
        assert await sweeps.once() == 0
    finally:
        other.cancel()
    assert len(at_turn) == len(names)
    most = max(Counter(at_turn).values())
    assert most <= sweeps.concurrency, f"{most} queues swept in one turn of the loop"

"""Schedules against the real node: order and count of occurrences, repeat count and end time,
keys (replace/keep/error, cancel while in flight), misfire policies, and three daemons on one
per-second cron schedule firing each occurrence exactly once."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from daemon.base.clock import ManualClock
from daemon.base.errors import KeyConflict
from daemon.base.model import Message
from daemon.engine.client import Casque
from daemon.service.dispatcher import Dispatcher
from daemon.service.registry import Registry
from daemon.testing.daemonproc import records, start_daemon, until, write_config

from .conftest import TEST_KEYSPACE
from .test_engine import drain

Pair = tuple[Casque, ManualClock]


def occurrence(m: Message) -> int:
    """A schedule's message's occurrence number (its trigger's ``n``)."""
    assert m.trigger is not None, m
    return m.trigger["n"]


async def fire_all(cq: Casque, consumer, clock: ManualClock, step_ms: int, steps: int) -> list[int]:
    """Advance the clock step by step; take and ack what is due; return occurrence numbers run."""
    ran: list[int] = []
    for _ in range(steps):
        clock.advance(step_ms)
        got = await drain(consumer)
        ran += [occurrence(m) for m in got]
        await cq.stores.acker.ack(got)
    return ran


async def test_every_with_repeat_count_fires_in_order_then_stops(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", None, every="10s", times=3)
    ran = await fire_all(cq, cq.consumer(queue_name), clock, 10_000, 8)
    assert ran == [1, 2, 3]
    assert await cq.peek(queue_name) == []


async def test_every_with_end_time_stops_at_it(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", None, every="10s", until=(clock.now_ms() + 45_000) / 1000)
    ran = await fire_all(cq, cq.consumer(queue_name), clock, 10_000, 10)
    assert ran == [1, 2, 3, 4]


async def test_cron_occurrences_fire_on_their_times_in_order(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    mid = await cq.send(queue_name, "t", None, cron="* * * * * */10", cron_format="croniter", key="tick")
    consumer = cq.consumer(queue_name)
    fires = []
    for _ in range(6):
        clock.advance(10_000)
        got = await drain(consumer)
        assert len(got) == 1
        trigger = got[0].trigger
        assert trigger is not None
        fires.append(trigger["fire_ms"])
        assert got[0].due_ms >= trigger["fire_ms"]
        await cq.stores.acker.ack(got)
    assert [b - a for a, b in zip(fires, fires[1:])] == [10_000] * 5
    assert all(f % 10_000 == 0 for f in fires)
    entry = await cq.get_key(queue_name, "tick")
    assert entry is not None and entry.id != mid and entry.trigger is not None and entry.trigger["n"] == 7
    assert entry.last_run is not None


async def test_schedule_key_replace_keep_error(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    first = await cq.send(queue_name, "t", 1, every="1m", key="s")
    assert await cq.send(queue_name, "t", 2, every="5m", key="s", on_conflict="keep") == first
    with pytest.raises(KeyConflict):
        await cq.send(queue_name, "t", 3, cron="0 9 * * *", key="s", on_conflict="error")
    second = await cq.send(queue_name, "t", 4, cron="0 9 * * *", tz="Europe/Berlin", key="s")
    m = await cq.get(queue_name, key="s")
    assert m is not None and str(m.id) == second and m.payload == 4
    assert m.trigger is not None and m.trigger["cron"] == "0 9 * * *"
    assert await cq.get(queue_name, id=first) is None
    [(entry, current)] = await cq.schedules(queue_name)
    assert entry.key == "s" and current is not None and str(current.id) == second


async def test_cancel_while_an_occurrence_is_in_flight_stops_the_schedule(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", None, every="10s", key="job")
    consumer = cq.consumer(queue_name)
    clock.advance(10_000)
    [first] = await drain(consumer)  # occurrence 1 is in flight; occurrence 2 is already written
    await cq.cancel(queue_name, key="job")
    await cq.stores.acker.ack([first])
    assert await fire_all(cq, consumer, clock, 10_000, 5) == []
    assert await cq.get_key(queue_name, "job") is None


async def test_an_occurrence_taken_before_a_cancel_is_not_run(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", None, every="10s", key="job")
    consumer = cq.consumer(queue_name)
    clock.advance(10_000)
    [first] = await drain(consumer)
    await cq.stores.acker.ack([first])
    clock.advance(10_000)
    [second] = await drain(consumer)  # taken by a consumer, not yet handed to its handler...
    dispatcher = Dispatcher(cq, Registry(), cq.settings.worker, [queue_name])
    assert await dispatcher.runner.still_wanted(second, dispatcher_log()) is True
    await cq.cancel(queue_name, key="job")  # ...when the schedule is cancelled
    assert await dispatcher.runner.still_wanted(second, dispatcher_log()) is False


def dispatcher_log():  # noqa: ANN201 - a structlog logger
    from daemon.base.logs import get_logger

    return get_logger("test")


@pytest.mark.parametrize(("policy", "expected_runs"), [("coalesce", 1), ("all", 10)])
async def test_misfire_after_daemons_were_down(manual: Pair, queue_name: str, policy: str, expected_runs: int) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", None, every="10s", misfire=policy)
    clock.advance(10_000 + 95_000)  # first fire, then nine more, all while no daemon ran
    consumer = cq.consumer(queue_name)
    ran: list[int] = []
    while True:
        got = await drain(consumer)
        if not got:
            break
        ran += [occurrence(m) for m in got]
        await cq.stores.acker.ack(got)
    assert len(ran) == expected_runs
    [waiting] = await cq.peek(queue_name)
    assert waiting.due_ms > clock.now_ms()  # the schedule continues after now


async def test_misfire_skip_does_not_run_a_late_occurrence(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", None, every="10s", misfire="skip", grace="5s")
    clock.advance(10_000 + 30_000)
    [late] = await drain(cq.consumer(queue_name))
    dispatcher = Dispatcher(cq, Registry(), cq.settings.worker, [queue_name])
    assert await dispatcher.runner.still_wanted(late, dispatcher_log()) is False
    [nxt] = [m for m in await cq.peek(queue_name) if m.state == 0]  # besides the late one's timeout column
    assert nxt.due_ms > clock.now_ms() and occurrence(nxt) == 5


@pytest.mark.slow
async def test_three_daemons_fire_each_per_second_occurrence_exactly_once(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    await cq.create_queue(queue_name, shards=2)
    end = time.time() + 32
    await cq.send(queue_name, "test.tick", None, cron="* * * * * *", key="tick", until=end)
    record = tmp_path / "record.txt"
    cfg = write_config(
        tmp_path / "c.toml", TEST_KEYSPACE, [queue_name], consumers=3, poll_interval="10ms", max_poll_interval="50ms"
    )
    daemons = [start_daemon(cfg, record, tmp_path / f"log{i}") for i in range(3)]
    try:
        await until(lambda: time.time() > end + 3, 60, "the schedule's end")
    finally:
        for d in daemons:
            d.signal(signal.SIGTERM)
        for d in daemons:
            assert d.wait() == 0, d.output()[-2000:]
    rows = records(record)
    by_n = Counter(int(r[5]) for r in rows)
    pids = {r[3] for r in rows}
    fires = sorted(float(r[6]) for r in rows)
    print(f"occurrences={len(by_n)} deliveries={len(rows)} daemons that fired={len(pids)}")
    assert all(count == 1 for count in by_n.values()), by_n.most_common(3)
    assert sorted(by_n) == list(range(1, len(by_n) + 1))  # none skipped
    assert len(by_n) >= 30
    assert [b - a for a, b in zip(fires, fires[1:])] == [1.0] * (len(fires) - 1)  # one per second, in order

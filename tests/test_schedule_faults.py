"""Issue 14, the schedule and key fault windows, each made to happen and counted from a ledger:

* an identical keyed schedule sent twice (what every deploy script does) must leave one schedule;
* a daemon killed (os._exit at a named crash point, as kill -9) at each step of chaining a schedule's
  next occurrence must not end the schedule, nor skip or double an occurrence;
* poison replay must never cancel live keyed work (a newer message or a live schedule);
* ``misfire=skip`` applies to occurrences, never to retries or redeliveries.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from daemon.base.clock import ManualClock
from daemon.engine.client import Casque
from daemon.engine.operations.queue_actions import replay
from daemon.testing.daemonproc import ROOT, records, start_daemon, until, write_config

from .conftest import TEST_KEYSPACE
from .test_engine import drain
from .test_schedules import fire_all, occurrence

Pair = tuple[Casque, ManualClock]


# ---- 4. the same schedule sent twice --------------------------------------------------------------
@pytest.mark.parametrize("kind", ["every", "cron"])
async def test_identical_schedule_sent_twice_leaves_one_live_schedule(manual: Pair, queue_name: str, kind: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    at = (clock.now_ms() // 10_000 * 10_000 + 20_000) / 1000  # a whole 10 s: both kinds fire on it
    trig: dict[str, Any] = (
        {"every": "10s"} if kind == "every" else {"cron": "* * * * * */10", "cron_format": "croniter"}
    )
    first = await cq.send(queue_name, "t", {"v": 1}, at=at, key="deploy", **trig)
    second = await cq.send(queue_name, "t", {"v": 1}, at=at, key="deploy", **trig)
    assert first == second  # same key, same first fire time: the same deterministic id
    current = await cq.get(queue_name, key="deploy")
    assert current is not None and str(current.id) == first
    ran = await fire_all(cq, cq.consumer(queue_name), clock, 10_000, 5)
    assert Counter(ran) == Counter([1, 2, 3, 4]), ran  # every occurrence once: none lost, none doubled


async def test_identical_resend_with_a_new_payload_updates_the_waiting_occurrence(
    manual: Pair, queue_name: str
) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    at = (clock.now_ms() + 10_000) / 1000
    await cq.send(queue_name, "t", "old", at=at, every="10s", key="deploy")
    await cq.send(queue_name, "t", "new", at=at, every="10s", key="deploy")
    clock.advance(10_000)
    got = await drain(cq.consumer(queue_name))
    assert [(occurrence(m), m.payload) for m in got] == [(1, "new")]


async def test_identical_resend_after_the_first_occurrence_was_taken_does_not_double_it(
    manual: Pair, queue_name: str
) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    clock.advance(10_000 - clock.now_ms() % 10_000)  # on a whole 10 s: the cron fires now
    at = clock.now_ms() / 1000
    first = await cq.send(queue_name, "t", None, at=at, cron="* * * * * */10", cron_format="croniter", key="deploy")
    consumer = cq.consumer(queue_name)
    [taken] = await drain(consumer)  # occurrence 1 is in flight (within the same second)...
    again = await cq.send(
        queue_name, "t", None, at=at, cron="* * * * * */10", cron_format="croniter", key="deploy"
    )  # ...when the deploy re-sends it
    assert again == first == str(taken.id)
    assert await drain(consumer) == []  # not delivered again
    await cq.stores.acker.ack([taken])
    assert await fire_all(cq, consumer, clock, 10_000, 3) == [2, 3, 4]


def test_cli_sends_the_same_schedule_twice_and_it_keeps_firing(
    settings: object, queue_name: str, tmp_path: Path
) -> None:
    cfg = write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name])

    def casque(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "daemon.cli", "-c", str(cfg), *args], cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    casque("queue", "create", queue_name)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    ids = [casque("send", queue_name, "t", "--every", "1h", "--at", at, "--key", "nightly") for _ in range(2)]
    assert ids[0] == ids[1]
    assert f'"id": "{ids[0]}"' in casque("get", queue_name, "--key", "nightly", "--json")


# ---- 5. a daemon killed at each step of chaining a schedule ------------------------------------------
CHAIN_STEPS = ["schedule.take_committed", "schedule.key_moved", "schedule.ran", "schedule.acked"]


@pytest.mark.parametrize("step", CHAIN_STEPS)
async def test_schedule_survives_a_kill_at_each_step_of_its_chaining(
    cq: Casque, queue_name: str, tmp_path: Path, step: str
) -> None:
    """The daemon dies (os._exit, as kill -9) at ``step`` of an occurrence; a fresh daemon takes over.
    Every occurrence up to the end must run (0 lost), none twice except the one whose handler had
    already run when the daemon died (at-least-once), and the schedule must still be live.

    The end: occurrences 1..6 at least, and one that fell due after the fresh daemon started (the chain
    is back at its cadence, past the backlog of the downtime). The dead daemon's row lock and the
    crashed occurrence's lease are the waits the takeover has: both at their minimum, 2 s (lock_ttl,
    timeout), so the takeover waits out 2 s, not the default lock's 5 s. The schedule is sent once the first
    daemon is ready, its first fire a second later: occurrence 1 is taken on time, alone (occurrence 2 falls due
    a second after it), whatever the daemon's start took on a loaded machine."""
    await cq.create_queue(queue_name, shards=1, timeout=2, lock_ttl=2)
    record, log = tmp_path / "record.txt", tmp_path / "log"
    cfg = write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name], consumers=2)
    first = start_daemon(cfg, record, log, env={"CASQUE_CRASH_AT": step})
    await until(lambda: '"worker_ready"' in first.output(), 60, "the first daemon to be ready", first)
    await cq.send(queue_name, "test.tick", None, every="1s", at=time.time() + 1, key="tick")
    await until(lambda: first.proc.poll() is not None, 60, f"the daemon to die at {step}")
    assert first.proc.returncode == 137, first.output()[-3000:]
    ran_before = {int(r[5]) for r in records(record)}
    restarted = time.time()
    second = start_daemon(cfg, record, tmp_path / "log2")

    def caught_up() -> bool:
        done = records(record)
        ran = {int(r[5]) for r in done}
        at_cadence = any(float(r[6]) >= restarted for r in done)
        return bool(ran) and max(ran) >= 6 and ran == set(range(1, max(ran) + 1)) and at_cadence

    try:
        await until(caught_up, 90, "occurrences 1..6 and one due after the restart all run", second)
    finally:
        second.signal(signal.SIGTERM)
        assert second.wait() == 0, second.output()[-3000:]
    runs = Counter(int(r[5]) for r in records(record))
    last = max(runs)
    lost = set(range(1, last + 1)) - set(runs)
    doubled = {n: c for n, c in runs.items() if c > 1}
    current = await cq.get(queue_name, key="tick")
    await cq.cancel(queue_name, key="tick")
    print(
        f"step={step} occurrences={last} lost={len(lost)} doubled={doubled} ran before the crash={sorted(ran_before)}"
    )
    assert not lost
    if step == "schedule.ran":  # its handler had run, its ack had not: it runs again (at-least-once)
        assert set(doubled) <= {max(ran_before)} and all(c == 2 for c in doubled.values())
    else:
        assert doubled == {}
    assert current is not None and occurrence(current) > last  # the schedule is still live


async def left_behind(cq: Casque, queue: str, key: str, origin: str) -> None:
    """Put the key back on occurrence 1, as a daemon that died before moving it leaves it."""
    from daemon.engine.send.keys import KeyEntry

    holder = await cq.stores.keys.get(queue, key)
    first = await cq.get(queue, id=origin)
    assert holder is not None and first is not None and first.trigger is not None
    trigger = {k: v for k, v in first.trigger.items() if k != "next"}
    back = KeyEntry(queue, key, first.id, first.bucket, first.shard, first.task, trigger, holder.created_at)
    assert await cq.stores.keys.repoint(back, holder.id)


async def test_a_key_left_behind_moves_on_when_the_redelivery_is_acked_first(manual: Pair, queue_name: str) -> None:
    """Occurrence 1 is taken, its key left behind on it (a crash), and its redelivery acked before
    occurrence 2 is taken: the ack must move the key on, not release it.

    The redelivery is awaited past the timeout *and* a rescan interval. Its timeout column lies in
    occurrence 1's row, which stops being a row read every round when a bucket ends within a second
    after the take (previous row past the tolerance); then only the row's rescan finds the column,
    at most ``rescan_ms`` after its last peek (docs/design.md, "Which rows a consumer reads"). The
    ManualClock does not move during a drain, so 1 s past the timeout the rescan came in ~20% of
    such runs: this test failed about 1 run in 70, 34 of 40 with a bucket boundary forced there."""
    from daemon.service.dispatcher import Dispatcher
    from daemon.service.registry import Registry

    from .test_schedules import dispatcher_log

    cq, clock = manual
    await cq.create_queue(queue_name, timeout=5)
    origin = await cq.send(queue_name, "t", None, every="30s", key="tick")
    consumer = cq.consumer(queue_name)
    dispatcher = Dispatcher(cq, Registry(), cq.settings.worker, [queue_name])
    clock.advance(30_000)
    [first] = await drain(consumer)  # the last peek of occurrence 1's row: its rescan is due by now + rescan_ms
    await left_behind(cq, queue_name, "tick", origin)  # the daemon died between the take and the key move
    wait = max(5_000, consumer.rescan_ms) + 1_000
    assert wait < 30_000, "occurrence 2 must not be due before the redelivery is acked"
    clock.advance(wait)
    [again] = await drain(consumer)  # occurrence 1 comes back before occurrence 2 is due, in any row
    assert again.id == first.id and await dispatcher.runner.still_wanted(again, dispatcher_log()) is True
    await cq.stores.acker.ack([again])  # must not release the schedule's key
    entry = await cq.get_key(queue_name, "tick")
    assert entry is not None and entry.trigger is not None and entry.trigger["n"] == 2
    ran = [1]
    for _ in range(3):
        clock.advance(30_000)
        got = await drain(consumer)
        for m in got:
            assert await dispatcher.runner.still_wanted(m, dispatcher_log()) is True
        ran += [occurrence(m) for m in got]
        await cq.stores.acker.ack(got)
    assert ran == [1, 2, 3, 4]


# ---- 6. poison replay never cancels live keyed work -----------------------------------------------
async def poison_one(cq: Casque, queue: str) -> None:
    [m] = await drain(cq.consumer(queue))
    await cq.stores.acker.poison(m, "test: made to fail")


async def test_replay_all_leaves_a_newer_keyed_message_alone(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    old = await cq.send(queue_name, "t", "old", key="order:7")
    await poison_one(cq, queue_name)
    new = await cq.send(queue_name, "t", "new", key="order:7")  # the key is free again: newer work takes it
    replayed, left = await replay(cq.stores, queue_name)
    assert replayed == [] and len(left) == 1 and "order:7" in left[0] and new in left[0]
    delivered = await drain(cq.consumer(queue_name))
    assert [(str(m.id), m.payload) for m in delivered] == [(new, "new")]  # the newer message runs, once
    assert [str(r.id) for r in await cq.stores.poison.list(queue_name)] == [old]  # the old one is kept, not lost


async def test_cli_replay_all_keeps_the_newer_keyed_message_and_says_why(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", "old", key="order:9")
    await poison_one(cq, queue_name)
    new = await cq.send(queue_name, "t", "new", key="order:9")
    cfg = write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name])
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "-c", str(cfg), "poison", "replay", queue_name, "--all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert f"its key 'order:9' now names newer message {new}" in done.stderr and "replayed 0 messages" in done.stdout
    current = await cq.get(queue_name, key="order:9")
    assert current is not None and str(current.id) == new and current.payload == "new"
    assert await cq.stores.poison.count(queue_name) == 1


async def test_replay_of_a_keyed_message_whose_key_is_free_sends_it_with_its_key(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", "once", key="order:8")
    await poison_one(cq, queue_name)
    [mid], left = await replay(cq.stores, queue_name)
    assert left == [] and await cq.stores.poison.count(queue_name) == 0
    m = await cq.get(queue_name, key="order:8")
    assert m is not None and str(m.id) == mid and m.payload == "once"


async def test_replay_of_a_schedules_occurrence_runs_it_once_and_keeps_the_schedule(
    manual: Pair, queue_name: str
) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", "tick", every="10s", key="sched")
    clock.advance(10_000)
    await poison_one(cq, queue_name)  # occurrence 1 poisoned; occurrence 2 is the schedule's next
    before = await cq.get(queue_name, key="sched")
    assert before is not None and occurrence(before) == 2
    [mid], left = await replay(cq.stores, queue_name)
    assert left == []
    after = await cq.get(queue_name, key="sched")
    assert after is not None and after.id == before.id  # the schedule was not cancelled or replaced
    one_off = await cq.get(queue_name, id=mid)
    assert one_off is not None and one_off.key is None and one_off.trigger is None and one_off.payload == "tick"
    consumer = cq.consumer(queue_name)
    got = await drain(consumer)
    await cq.stores.acker.ack(got)
    ran = [("replay" if m.trigger is None else m.trigger["n"]) for m in got]
    assert ran == ["replay"]
    ran += await fire_all(cq, consumer, clock, 10_000, 3)
    assert ran == ["replay", 2, 3, 4]


# ---- 9. misfire=skip applies to occurrences, never to retries ----------------------------------------
async def test_misfire_skip_runs_a_late_retry_of_an_occurrence(manual: Pair, queue_name: str) -> None:
    from daemon.service.dispatcher import Dispatcher
    from daemon.service.registry import Registry

    from .test_schedules import dispatcher_log

    cq, clock = manual
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", None, every="1h", misfire="skip", grace="5s")
    consumer = cq.consumer(queue_name)
    dispatcher = Dispatcher(cq, Registry(), cq.settings.worker, [queue_name])
    clock.advance(3_600_000)
    [on_time] = await drain(consumer)
    assert await dispatcher.runner.still_wanted(on_time, dispatcher_log()) is True
    await cq.stores.acker.retry(
        on_time, 30_000, "RuntimeError: first attempt failed"
    )  # retried 30 s later: past the 5 s grace
    clock.advance(31_000)
    [retry] = await drain(consumer)
    assert retry.id == on_time.id and retry.attempt == 2
    assert await dispatcher.runner.still_wanted(retry, dispatcher_log()) is True


async def test_misfire_skip_runs_a_redelivery_after_a_timeout(manual: Pair, queue_name: str) -> None:
    from daemon.service.dispatcher import Dispatcher
    from daemon.service.registry import Registry

    from .test_schedules import dispatcher_log

    cq, clock = manual
    await cq.create_queue(queue_name, timeout=30)
    await cq.send(queue_name, "t", None, every="1h", misfire="skip", grace="5s")
    consumer = cq.consumer(queue_name)
    dispatcher = Dispatcher(cq, Registry(), cq.settings.worker, [queue_name])
    clock.advance(3_600_000)
    [on_time] = await drain(consumer)  # taken on time; its daemon dies before an ack
    clock.advance(60_000)
    [again] = await drain(consumer)
    assert again.id == on_time.id and again.attempt == 2
    assert await dispatcher.runner.still_wanted(again, dispatcher_log()) is True


async def test_daemon_runs_a_late_retry_of_a_skip_schedule(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    await cq.create_queue(queue_name, shards=1)
    await cq.send(
        queue_name, "test.retry_after", 3.0, every="1h", at=time.time() + 6, misfire="skip", grace="1s", key="hourly"
    )
    record, log = tmp_path / "record.txt", tmp_path / "log"
    d = start_daemon(write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name]), record, log)
    try:
        await until(lambda: len(records(record)) >= 2, 60, "the first attempt and its retry 3 s later", d)
    finally:
        d.signal(signal.SIGTERM)
        assert d.wait() == 0, d.output()[-3000:]
    assert [r[2] for r in records(record)] == ["1", "2"]
    assert "misfire_skipped" not in d.output()

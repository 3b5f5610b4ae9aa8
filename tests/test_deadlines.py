"""Issue 14, the dispatcher's deadlines, made to happen with real daemons and counted from the
handlers' own ledger (daemon/testing/handlers.py):

* two daemons with clocks 3 s apart (within ``clock_tolerance``) never run a message twice: a
  handler's deadline ends ``clock_tolerance`` before its timeout column can fall due on any clock;
* time spent waiting for a concurrency slot or a sync thread does not use up a message's timeout
  or its attempts: nothing is timed out (or poisoned) before it ran;
* a sync handler that runs past its timeout is not redelivered while its thread still runs it.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from daemon.engine.client import Casque
from daemon.engine.send.producer import Job
from daemon.testing.daemonproc import Daemon, records, start_daemon, until, write_config

from .conftest import TEST_KEYSPACE


def count_events(d: Daemon, *names: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for line in d.output().splitlines():
        try:
            event = json.loads(line).get("event")
        except (json.JSONDecodeError, AttributeError):
            continue
        if event in names:
            found[event] += 1
    return found


def ledger(record: Path, ids: Iterable[str], suffix: str | None = None) -> tuple[set[str], dict[str, int]]:
    """(lost, duplicated) from the handlers' record: ids never recorded, ids recorded more than once."""
    done = Counter(r[1] for r in records(record) if suffix is None or r[-1] == suffix)
    return set(ids) - set(done), {i: n for i, n in done.items() if n > 1}


async def stop(*daemons: Daemon) -> None:
    for d in daemons:
        d.signal(signal.SIGTERM)
    for d in daemons:
        assert d.wait() == 0, d.output()[-3000:]


async def test_two_daemons_with_clocks_3s_apart_run_each_message_once(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    await cq.create_queue(queue_name, shards=2, timeout=4)
    record = tmp_path / "record.txt"
    # At most 8 in flight per daemon: one daemon can't hold all 40, so both must take part.
    cfg = write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name], consumers=2, batch_size=4, in_flight=8)
    behind = start_daemon(cfg, record, tmp_path / "log0")
    ahead = start_daemon(cfg, record, tmp_path / "log3", env={"CASQUE_CLOCK_OFFSET_MS": "3000"})
    await until(
        lambda: "worker_ready" in behind.output() and "worker_ready" in ahead.output(), 60, "both daemons ready", behind
    )
    ids = await cq.send_many(
        queue_name, [Job("test.sleep", 3.0) for _ in range(40)]
    )  # each runs 3 s of its 4 s timeout
    try:
        await until(lambda: not ledger(record, ids)[0], 120, "every message run", ahead)
    finally:
        await stop(behind, ahead)
    lost, doubled = ledger(record, ids)
    by_pid = Counter(r[3] for r in records(record))
    print(
        f"messages={len(ids)} lost={len(lost)} duplicated={sum(n - 1 for n in doubled.values())} runs per "
        f"daemon={sorted(by_pid.values())}"
    )
    assert not lost and not doubled
    assert len(by_pid) == 2  # both daemons took part


WAITS: dict[str, tuple[str, float, int, dict[str, Any]]] = {
    "concurrency_slot": ("test.sync_one_at_a_time", 0.5, 24, {"consumers": 1}),  # 12 s of work, one at a time
    "sync_thread": (
        "test.sync_sleep",
        1.5,
        32,
        {"consumers": 2, "sync_threads": 8, "batch_size": 40},
    ),  # 4 rounds of 8 threads
}


@pytest.mark.parametrize("wait", sorted(WAITS))
async def test_waiting_to_start_does_not_time_messages_out(
    cq: Casque, queue_name: str, tmp_path: Path, wait: str
) -> None:
    """Messages taken in one batch wait for a concurrency slot or a sync thread far longer than
    their 3 s timeout: none may be timed out, expired or poisoned before it ran, none run twice."""
    task, seconds, count, worker = WAITS[wait]
    await cq.create_queue(queue_name, shards=1, timeout=3, max_attempts=2)
    ids = await cq.send_many(queue_name, [Job(task, seconds) for _ in range(count)])
    record = tmp_path / "record.txt"
    d = start_daemon(write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name], **worker), record, tmp_path / "log")
    try:
        await until(lambda: not ledger(record, ids)[0], 120, f"all {count} run", d)
    finally:
        await stop(d)
    lost, doubled = ledger(record, ids)
    events = count_events(d, "message_timed_out", "message_expired_before_start", "message_poisoned")
    poisoned = await cq.stores.poison.count(queue_name)
    print(f"wait={wait} messages={count} lost={len(lost)} duplicated={len(doubled)} poisoned={poisoned} {dict(events)}")
    assert not lost and not doubled and poisoned == 0 and not events


async def test_a_sync_handler_past_its_timeout_is_not_run_again_while_its_thread_runs(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    await cq.create_queue(queue_name, shards=1, timeout=2)
    ids = await cq.send_many(queue_name, [Job("test.sync_overrun", 4.0) for _ in range(4)])  # 4 s of work, 1 s timeout
    record = tmp_path / "record.txt"
    d = start_daemon(write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name]), record, tmp_path / "log")
    try:
        await until(lambda: not ledger(record, ids, "done")[0], 60, "all 4 finished", d)
    finally:
        await stop(d)
    starts = Counter(r[1] for r in records(record) if r[-1] == "start")
    lost, doubled = ledger(record, ids, "done")
    overran = count_events(d, "sync_handler_overran")["sync_handler_overran"]
    print(f"messages={len(ids)} lost={len(lost)} started twice={sum(n > 1 for n in starts.values())} overran={overran}")
    assert not lost and not doubled and all(n == 1 for n in starts.values())
    assert overran == 4
    assert await cq.peek(queue_name) == []  # acked once the thread returned


async def test_a_late_retry_writes_no_second_copy_next_to_another_consumers_take(manual, queue_name: str) -> None:
    """A retry written once the message's visibility may already have ended on a faster clock would rewrite the
    delivery another consumer took (make it visible again while that one runs): it is not written (the message
    came back at its timeout, which counted the attempt)."""
    import time

    from daemon import Backoff, Handler
    from daemon.service.dispatcher import Dispatcher
    from daemon.service.registry import Registry, TaskSpec

    from .test_engine import drain
    from .test_schedules import dispatcher_log

    cq, clock = manual
    await cq.create_queue(queue_name, timeout=10)
    dispatcher = Dispatcher(cq, Registry(), cq.settings.worker, [queue_name])
    mid = await cq.send(queue_name, "t", None)
    [m] = await drain(dispatcher.consumers[queue_name])
    clock.advance(m.invisible_until - clock.now_ms())  # its visibility ends (as a clock ahead by the tolerance sees)
    [taken] = await drain(cq.consumer(queue_name))  # another consumer takes it
    spec = TaskSpec("t", Handler, queue_name, None, None, Backoff(), None)
    await dispatcher.outcomes.retry_or_poison(
        dispatcher.consumers[queue_name], spec, m, dispatcher_log(), 0.0, RuntimeError("late"), time.monotonic()
    )
    rows = await cq.stores.db.run(cq.stores.table.read_id, [queue_name, m.bucket, m.shard, m.id])
    assert str(taken.id) == mid and taken.attempt == 2
    assert [(x.state, x.attempt, x.visible_at) for x in rows] == [(1, 2, taken.visible_at)], "the other's delivery"

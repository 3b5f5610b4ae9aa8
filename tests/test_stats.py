"""Statistics and administration against the real node and a real daemon."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

from daemon.base.clock import ManualClock
from daemon.engine.client import Casque
from daemon.engine.operations.queue_actions import purge, replay
from daemon.engine.operations.stats import queue_stats
from daemon.engine.send.producer import Job
from daemon.testing.daemonproc import ROOT, records, start_daemon, until, write_config

from .conftest import TEST_KEYSPACE
from .test_engine import drain

Pair = tuple[Casque, ManualClock]


async def test_stats_match_a_known_workload_at_every_step(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name, shards=4, timeout=60, max_attempts=1)
    await cq.send_many(queue_name, [Job("t", i) for i in range(40)])
    await cq.send_many(queue_name, [Job("t", i, delay="1h") for i in range(7)])
    s = await queue_stats(cq.stores, queue_name)
    assert (s.waiting_due, s.scheduled, s.in_flight, s.poisoned) == (40, 7, 0, 0)
    assert sum(s.per_shard) == 47 and s.skew is not None and s.skew >= 1.0
    clock.advance(30_000)
    s = await queue_stats(cq.stores, queue_name)
    assert s.oldest_due_age_s == 30.0
    consumer = cq.consumer(queue_name)
    taken = await consumer.fetch(10) + await consumer.fetch(10)  # two shard rows' worth, not all
    total_taken = len(taken)
    assert 5 < total_taken < 40
    s = await queue_stats(cq.stores, queue_name)
    assert (s.waiting_due, s.scheduled, s.in_flight) == (40 - total_taken, 7, total_taken)
    await cq.stores.acker.ack(taken[:5])
    s = await queue_stats(cq.stores, queue_name)
    assert (s.waiting_due, s.in_flight) == (40 - total_taken, total_taken - 5)
    clock.advance(61_000 + 10_000)  # the un-acked ones time out on their only attempt: poisoned on the next take
    await drain(consumer)
    s = await queue_stats(cq.stores, queue_name)
    assert s.poisoned == total_taken - 5
    assert s.waiting_due == 0 and s.in_flight == 40 - total_taken  # the rest were taken by this drain


async def test_purge_empties_the_queue(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name, shards=3)
    await cq.send_many(queue_name, [Job("t", i) for i in range(120)] + [Job("t", i, delay="1d") for i in range(30)])
    await cq.send(queue_name, "t", None, key="k", every="1m")
    taken = await cq.consumer(queue_name).fetch(20)
    assert taken
    assert await purge(cq.stores, queue_name) == 151
    s = await queue_stats(cq.stores, queue_name)
    assert (s.waiting_due, s.scheduled, s.in_flight) == (0, 0, 0)
    assert await cq.peek(queue_name) == [] and await cq.stores.keys.list(queue_name) == []


async def test_cli_purge_and_delete_need_yes(tmp_path: Path, cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", 1)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{TEST_KEYSPACE}"\n')

    def run(*a: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "daemon.cli", "-c", str(cfg), *a],
            cwd=ROOT,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )

    refused = run("purge", queue_name)
    assert refused.returncode == 2 and "add --yes" in refused.stderr
    assert len(await cq.peek(queue_name)) == 1
    done = run("queue", "delete", queue_name, "--yes")
    assert done.returncode == 0 and "partitions dropped whole" in done.stdout
    assert run("stats", queue_name).returncode == 2  # gone: "does not exist"


async def test_poison_replay_puts_messages_back_and_they_are_processed(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    await cq.create_queue(queue_name)
    bad = [await cq.send(queue_name, "test.unregistered_yet", i) for i in range(3)]
    record = tmp_path / "record.txt"
    cfg = write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name])
    d = start_daemon(cfg, record, tmp_path / "log")
    try:
        await until(lambda: _count(cq, queue_name, 3), 60, "3 poisoned", d)
    finally:
        d.signal(signal.SIGTERM)
        d.wait()
    assert sorted(str(p.id) for p in await cq.stores.poison.list(queue_name)) == sorted(bad)
    # the poisoned task is renamed into one that exists, as after a deploy that adds the handler
    for p in await cq.stores.poison.list(queue_name):
        await cq.db.run(
            f"UPDATE {TEST_KEYSPACE}.poison SET task = 'test.record' WHERE queue = %s AND id = %s", [queue_name, p.id]
        )
    new_ids, left = await replay(cq.stores, queue_name, task="test.record")
    assert len(new_ids) == 3 and left == [] and await cq.stores.poison.count(queue_name) == 0
    d = start_daemon(cfg, record, tmp_path / "log2")
    try:
        await until(lambda: len(records(record)) == 3, 60, "replayed messages processed", d)
    finally:
        d.signal(signal.SIGTERM)
        d.wait()
    assert sorted(r[1] for r in records(record)) == sorted(new_ids)


async def _count(cq: Casque, queue: str, n: int) -> bool:
    return await cq.stores.poison.count(queue) == n


async def test_metrics_history_and_daemon_stats_match_the_workload(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    await cq.create_queue(queue_name, history=True)
    ok = await cq.send_many(queue_name, [Job("test.record", i) for i in range(12)])
    await cq.send(queue_name, "test.fail_until", 2, key="flaky")
    await cq.send(queue_name, "nobody.handles.this", None)
    record = tmp_path / "record.txt"
    cfg = write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name])
    with open(cfg, "a") as f:
        f.write("\n[metrics]\nenabled = true\nport = 0\n")
    d = start_daemon(cfg, record, tmp_path / "log")
    try:
        await until(lambda: "metrics_listening" in d.output(), 60, "metrics server", d)
        found = re.search(r'"url": "(http://[^"]+)/metrics"', d.output())
        assert found is not None
        url = found.group(1)
        await until(lambda: len(records(record)) == 14, 60, "14 handler runs", d)
        await until(
            lambda: (
                _metric(url, f'casque_acked_total{{queue="{queue_name}",task="test.record"}}') == 12.0
                and _metric(url, f'casque_acked_total{{queue="{queue_name}",task="test.fail_until"}}') == 1.0
            ),
            30,
            "acks counted",
            d,
        )
        assert _metric(url, f'casque_retried_total{{queue="{queue_name}",task="test.fail_until"}}') == 1.0
        assert _metric(url, f'casque_poisoned_total{{queue="{queue_name}",task="nobody.handles.this"}}') == 1.0
        assert _metric(url, f'casque_received_total{{queue="{queue_name}",task="test.record"}}') == 12.0
        assert _metric(url, f'casque_handler_seconds_count{{queue="{queue_name}",task="test.record"}}') == 12.0
        assert _metric(url, f'casque_lateness_seconds_count{{queue="{queue_name}",task="test.record"}}') == 12.0
        assert urllib.request.urlopen(url + "/healthz").status == 200
        assert urllib.request.urlopen(url + "/readyz").status == 200
    finally:
        d.signal(signal.SIGTERM)
        assert d.wait() == 0
    rows = await cq.db.run(
        f"SELECT acked, retried, poisoned FROM {TEST_KEYSPACE}.daemon_stats WHERE queue = %s LIMIT 1", [queue_name]
    )
    assert rows and (rows[0].acked, rows[0].retried, rows[0].poisoned) == (13, 1, 1)  # written on shutdown too
    from daemon.engine.observe.history import History

    flaky = await History(cq.db, TEST_KEYSPACE, cq.stores.queues).read(queue_name, cq.clock.now_ms(), 1, key="flaky")
    assert [(h.event, h.attempt) for h in flaky] == [("running", 1), ("failed", 1), ("running", 2), ("done", 2)]
    assert "attempt 1 fails" in (flaky[1].error or "")
    history = History(cq.db, TEST_KEYSPACE, cq.stores.queues)
    for mid in ok:
        events = await history.read(queue_name, cq.clock.now_ms(), 1, message_id=uuid.UUID(mid))
        assert [h.event for h in events] == ["running", "done"]


def _metric(url: str, name: str) -> float | None:
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None

"""Queue gauges in Prometheus: exact numbers for a known workload, computed by one daemon at a
time (a lease), handed over when the holder stops, and served by a real daemon's /metrics."""

from __future__ import annotations

import re
import signal
import time
import urllib.request
import uuid
from pathlib import Path

from daemon.base import queue_metrics
from daemon.base.clock import ManualClock
from daemon.base.model import Message
from daemon.engine.client import Casque
from daemon.engine.operations.stats import queue_stats
from daemon.engine.send.producer import Job, build_message
from daemon.service.queue_gauges import QueueGauges
from daemon.testing.daemonproc import start_daemon, until, write_config

from .conftest import TEST_KEYSPACE

Pair = tuple[Casque, ManualClock]


async def workload(cq: Casque, queue: str) -> None:
    """5 due, 3 delayed, 2 of the due taken (in flight), 1 poisoned."""
    await cq.create_queue(queue, shards=2, buckets=2, timeout=600)
    await cq.send_many(queue, [Job("t", i) for i in range(5)] + [Job("t", i, delay="1h") for i in range(3)])
    qs = await cq.stores.queues.get(queue)
    await cq.stores.poison.add(
        build_message(qs, Job("t", None), cq.clock.now_ms()), "test", "Poison", "boom", "", cq.clock.now_ms(), 3600
    )


async def test_one_holder_publishes_exact_numbers_then_hands_over(manual: Pair, queue_name: str) -> None:
    cq, clock = manual
    await workload(cq, queue_name)
    consumer = cq.consumer(queue_name)
    taken: list[Message] = []
    while len(taken) < 2:
        taken += await consumer.fetch(2 - len(taken))
    clock.advance(7_000)
    lease = f"gauges_{uuid.uuid4().hex[:8]}"
    a = QueueGauges(cq, "daemon-a", 1.0, only=[queue_name], lease=lease)
    b = QueueGauges(cq, "daemon-b", 1.0, only=[queue_name], lease=lease)
    assert await a.tick() is True
    assert queue_metrics.HOLDER._value.get() == 1
    assert await b.tick() is False  # one holder at a time
    assert a.published == {queue_name} and b.published == set()
    s = await queue_stats(cq.stores, queue_name)
    got = [
        queue_metrics.value(g, queue_name)
        for g in (
            queue_metrics.DEPTH,
            queue_metrics.SCHEDULED,
            queue_metrics.IN_FLIGHT,
            queue_metrics.POISONED,
            queue_metrics.OLDEST_DUE_AGE,
        )
    ]
    assert got == [3, 3, 2, 1, s.oldest_due_age_s] and s.oldest_due_age_s is not None and s.oldest_due_age_s >= 7.0
    await cq.stores.acker.ack(taken)
    more: list[Message] = []
    while not more:
        more = await consumer.fetch(1)
    clock.advance(1_000)
    assert await a.tick() is True  # a second round reads with the cursors it remembered
    s = await queue_stats(cq.stores, queue_name)
    got = [
        queue_metrics.value(g, queue_name)
        for g in (queue_metrics.DEPTH, queue_metrics.SCHEDULED, queue_metrics.IN_FLIGHT)
    ]
    assert got == [2, 3, 1] == [s.waiting_due, s.scheduled, s.in_flight]
    await a.stop()  # released at shutdown: the next bid wins at once, no TTL wait
    assert await b.tick() is True and b.published == {queue_name}
    assert await a.tick() is False


async def test_daemon_serves_queue_gauges(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    await workload(cq, queue_name)
    cfg = write_config(tmp_path / "c.toml", TEST_KEYSPACE, [f"{queue_name}_served"])
    with open(cfg, "a") as f:
        f.write(
            '\n[metrics]\nenabled = true\nport = 0\nqueue_gauges_interval = "1s"\nqueue_gauges_queues = '
            f'["{queue_name}"]\n'
        )
    d = start_daemon(cfg, tmp_path / "record.txt", tmp_path / "log")
    try:
        await until(lambda: "metrics_listening" in d.output(), 60, "metrics server", d)
        found = re.search(r'"url": "(http://[^"]+)/metrics"', d.output())
        assert found is not None
        url = found.group(1)

        def gauge(name: str) -> float | None:
            for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
                if line.startswith(f'{name}{{queue="{queue_name}"}} '):
                    return float(line.split()[-1])
            return None

        await until(lambda: gauge("casque_queue_depth") == 5.0, 60, "queue depth gauge", d)
        assert gauge("casque_queue_scheduled") == 3.0 and gauge("casque_queue_poisoned") == 1.0
        assert gauge("casque_queue_in_flight") == 0.0
        started = time.monotonic()
        for _ in range(20):
            urllib.request.urlopen(url + "/metrics").read()
        assert (time.monotonic() - started) / 20 < 0.5  # a scrape is served from memory
    finally:
        d.signal(signal.SIGTERM)
        assert d.wait() == 0

"""Cassandra faults under a running daemon and a running producer, on real nodes:
a node lost and back in a 3-node RF=3 cluster at QUORUM, two nodes lost (sends fail loudly, the
daemon waits), and a single node restarted. Every test asserts that nothing sent is lost."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from daemon.base.errors import StorageUnavailable
from daemon.devnode import ClusterSpec, start, start_node, stop, stop_node
from daemon.engine.client import Casque
from daemon.testing.daemonproc import records, start_daemon, until
from daemon.testing.nodes import ring_config, start_ring

pytestmark = [pytest.mark.reliability, pytest.mark.cluster, pytest.mark.slow]
KEYSPACE = "casque_rel"
RING = ClusterSpec(name="faults", nodes=3, native_port=9342, storage_port=7300, jmx_base=7800)
SOLO = ClusterSpec(name="solo", nodes=1, native_port=9242, storage_port=7200, jmx_base=7900)


def config_for(path: Path, spec: ClusterSpec, queue: str) -> Path:
    return ring_config(path, spec, KEYSPACE, [queue], consumers=2, max_poll_interval="500ms")


async def cluster_client(spec: ClusterSpec) -> Casque:
    return await Casque.connect(await asyncio.to_thread(start_ring, spec, KEYSPACE))


@dataclass
class Producer:
    """Sends one message every 20 ms; keeps what succeeded and how each failure read."""

    cq: Casque
    queue: str
    sent: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    running: bool = True

    async def run(self) -> None:
        i = 0
        while self.running:
            try:
                self.sent.append(await self.cq.send(self.queue, "test.record", i))
            except StorageUnavailable as exc:
                self.failures.append(str(exc))
            i += 1
            await asyncio.sleep(0.02)


@pytest.fixture(scope="module")
async def ring() -> AsyncIterator[Casque]:
    cq = await cluster_client(RING)
    yield cq
    await cq.close()
    await asyncio.to_thread(stop, RING)


async def test_node_loss_at_quorum_loses_nothing_and_two_lost_nodes_fail_loudly(
    ring: Casque, queue_name: str, tmp_path: Path
) -> None:
    cq = ring
    await cq.create_queue(queue_name, shards=4, timeout=10)
    record = tmp_path / "record.txt"
    daemon = start_daemon(config_for(tmp_path / "c.toml", RING, queue_name), record, tmp_path / "log")
    producer = Producer(cq, queue_name)
    sending = asyncio.create_task(producer.run())
    try:
        await until(lambda: len(records(record)) >= 50, 60, "processing under way", daemon)
        await asyncio.to_thread(stop_node, RING, 3)  # one of three replicas gone: QUORUM still holds
        before_sent, before_done, failed_before = len(producer.sent), len(records(record)), len(producer.failures)
        # Sends and consumption go on, and no send fails, while QUORUM holds. Counted, not timed: a
        # loaded machine only makes it slower (the deadline is there for a real stall).
        await until(lambda: len(producer.sent) - before_sent >= 100, 60, "sends to go on with one node down", daemon)
        await until(
            lambda: len(records(record)) - before_done >= 100, 60, "consumption to go on with one node down", daemon
        )
        one_down_failures = len(producer.failures) - failed_before
        assert one_down_failures == 0, producer.failures[failed_before:][:3]
        await asyncio.to_thread(stop_node, RING, 2)  # two of three gone (3 still is): QUORUM impossible
        failed_before = len(producer.failures)
        await until(lambda: len(producer.failures) - failed_before >= 5, 60, "sends to fail with two nodes down")
        two_down = producer.failures[failed_before:]
        await asyncio.to_thread(start_node, RING, 2)
        recovered_from = len(producer.sent)
        await until(lambda: len(producer.sent) - recovered_from >= 50, 90, "sends to succeed again")
    finally:
        producer.running = False
        await sending
    try:
        sent = set(producer.sent)
        await until(lambda: sent <= {r[1] for r in records(record)}, 180, "every sent message processed", daemon)
    finally:
        daemon.signal(signal.SIGTERM)
        daemon.wait(60)  # node 3 stays down: the ring is this test's alone, and stopped after it
    print(
        f"sent={len(sent)} failed_sends={len(producer.failures)} (one node down: {one_down_failures}) "
        f"processed={len(sent & {r[1] for r in records(record)})} lost=0"
    )
    assert all("replicas are up" in f or "did not answer in time" in f or "no Cassandra node" in f for f in two_down), (
        two_down[:3]
    )
    assert "fetch_failed" in daemon.output()  # the daemon said so, and kept going


async def test_single_node_restart_is_ridden_through(queue_name: str, tmp_path: Path) -> None:
    cq = await cluster_client(SOLO)
    try:
        await cq.create_queue(queue_name, shards=2, timeout=10)
        record = tmp_path / "record.txt"
        daemon = start_daemon(config_for(tmp_path / "c.toml", SOLO, queue_name), record, tmp_path / "log")
        producer = Producer(cq, queue_name)
        sending = asyncio.create_task(producer.run())
        try:
            await until(lambda: len(records(record)) >= 30, 60, "processing under way", daemon)
            await asyncio.to_thread(stop, SOLO)
            failed_before = len(producer.failures)
            await until(lambda: len(producer.failures) - failed_before >= 3, 30, "sends to fail while the node is down")
            down = producer.failures[failed_before:]
            started = time.monotonic()
            await asyncio.to_thread(start, SOLO)
            recovered_from = len(producer.sent)
            await until(lambda: len(producer.sent) - recovered_from >= 30, 90, "sends to succeed again")
            print(f"producer recovered {time.monotonic() - started:.1f}s after the restart began")
        finally:
            producer.running = False
            await sending
        sent = set(producer.sent)
        try:
            await until(lambda: sent <= {r[1] for r in records(record)}, 120, "every sent message processed", daemon)
        finally:
            daemon.signal(signal.SIGTERM)
            assert daemon.wait(60) == 0
        assert all(
            "no Cassandra node is reachable" in f or "did not answer" in f or "replicas are up" in f for f in down
        ), down[:3]
        assert daemon.output().count("fetch_failed") >= 1
    finally:
        await cq.close()
        await asyncio.to_thread(stop, SOLO)

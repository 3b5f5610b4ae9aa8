"""Cassandra faults under a running daemon and a running producer, on real nodes:
a node lost and back in a 3-node RF=3 cluster at QUORUM, two nodes lost (sends fail loudly, the
daemon waits), and a single node restarted; then the nemesis on the same ring, every fault at once for 3 minutes
(bench/nemesis). Every test asserts that nothing sent is lost."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from daemon.base.errors import StorageUnavailable
from daemon.devnode import ClusterSpec, start, start_node, status, stop, stop_node
from daemon.engine.client import Casque
from daemon.testing.daemonproc import records, start_daemon, until
from daemon.testing.nodes import ring_config, start_ring
from tests.support.stall_node import STALL_NODE

pytestmark = [pytest.mark.reliability, pytest.mark.cluster, pytest.mark.slow]
KEYSPACE = "casque_rel"
RING = ClusterSpec(name="faults", nodes=3, native_port=9342, storage_port=7300, jmx_base=7800)
#: The single node to restart: the fault tests' node of this worker (tests/support/stall_node.py), left running.
SOLO = STALL_NODE


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


async def test_the_ring_is_three_peers_on_their_own_addresses_and_status_shows_a_stopped_node(ring: Casque) -> None:
    """The launcher's 3-node cluster (daemon/devnode), which the fault tests below stand on: three JVMs on
    127.0.0.1-3 that know each other as peers; a node stopped shows so in ``status`` while the others serve."""
    dev_pid = status(ClusterSpec()).node(1).pid
    st = await asyncio.to_thread(start, RING)  # whole again if a test before this one left a node down
    assert st.ready and [n.address for n in st.nodes] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert len({n.pid for n in st.nodes}) == 3
    assert [n.jmx_port for n in st.nodes] == [7800, 7801, 7802]
    peers = await ring.db.run("SELECT peer FROM system.peers")
    assert len(peers) == 2 and {str(r.peer) for r in peers} <= {"127.0.0.1", "127.0.0.2", "127.0.0.3"}
    await asyncio.to_thread(stop_node, RING, 3)
    st = status(RING)
    assert not st.node(3).running and st.node(1).cql_ready and st.node(2).cql_ready
    assert status(ClusterSpec()).node(1).pid == dev_pid  # the shared dev node is another cluster: untouched


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
        await asyncio.to_thread(start, SOLO)  # running again for the next file (a no-op unless the test failed)


#: The suite's nemesis: a seed whose 3-minute schedule has every kind of fault (python -m bench nemesis prints it).
NEMESIS_SEED = 16


async def test_three_minutes_of_every_fault_at_once_lose_nothing_and_explain_every_duplicate(
    ring: Casque, tmp_path: Path
) -> None:
    """``python -m bench nemesis`` for 3 minutes on this file's ring (its own keyspace), seeded: nodes frozen,
    killed and cut off, daemons and servers killed, a daemon restarted under a skewed clock, timeouts changed and a
    queue resharded, under every kind of traffic. The checker's ledgers count what was lost, duplicated without a
    fault to explain it, or out of group order."""
    from bench.nemesis.report import markdown
    from bench.nemesis.run import Campaign

    await asyncio.to_thread(start, RING)  # whole: a test before this one may have left a node down
    campaign = Campaign(3, NEMESIS_SEED, ring=RING, keyspace="casque_nemesis", workdir=tmp_path / "nemesis")
    r = await campaign.run()
    assert {k: r[k] for k in ("lost", "duplicates_unexplained", "order_violations", "violations")} == {
        "lost": 0,
        "duplicates_unexplained": 0,
        "order_violations": 0,
        "violations": 0,
    }, markdown(r)
    assert r["faults_by_kind"], "the schedule's faults were made"

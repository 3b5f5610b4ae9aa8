"""Resharding a live queue against the real node: sends and consumers keep running while the
queue goes from 4 to 8 shards and then to 3 shards with shorter buckets. Every message is counted
in a ledger: 0 lost, 0 delivered twice (the timeout is longer than the test). Messages written
in an old layout stay reachable by id and are consumed; ``finish`` drops the old layouts only
once none is left in them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from daemon.base.errors import UsageError
from daemon.engine.client import Casque
from daemon.engine.operations.reshard import finish, misplaced, reshard
from daemon.engine.send.producer import Job
from daemon.engine.storage.placement import row_of

from .conftest import TEST_KEYSPACE

ROOT = Path(__file__).resolve().parent.parent

TOTAL = 6000


async def test_reshard_under_load_loses_and_duplicates_nothing(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name, shards=4, buckets=4, bucket_seconds=60, timeout=300)
    late = await cq.send(queue_name, "t", {"n": -1}, delay="4s")  # due after both reshards, in the first layout's row
    ledger: Counter[int] = Counter()
    stop = asyncio.Event()
    sent = 0

    async def produce() -> None:
        nonlocal sent
        for start in range(0, TOTAL, 100):
            await cq.send_many(queue_name, [Job("t", {"n": n}) for n in range(start, start + 100)])
            sent += 100
            await asyncio.sleep(0.005)

    async def consume(slot: int) -> None:
        consumer = cq.consumer(queue_name)  # one per coroutine: like separate processes
        while not stop.is_set():
            got = await consumer.fetch(100, slot)
            for m in got:
                ledger[m.payload["n"]] += 1
            if got:
                await cq.stores.acker.ack(got)
            else:
                await asyncio.sleep(0.02)

    consumers = [asyncio.create_task(consume(slot)) for slot in range(4)]
    producer = asyncio.create_task(produce())
    while sent < TOTAL // 3:
        await asyncio.sleep(0.01)
    grown = await reshard(cq.stores, queue_name, shards=8, buckets=6)
    assert grown.draining == ((4, 4, 60),)
    found = await cq.get(queue_name, id=late)  # an old-layout message is still found by id
    assert found is not None and found.payload == {"n": -1}
    while sent < 2 * TOTAL // 3:
        await asyncio.sleep(0.01)
    shrunk = await reshard(cq.stores, queue_name, shards=3, bucket_seconds=30)
    assert (shrunk.shards, shrunk.buckets, shrunk.bucket_seconds) == (3, 6, 30)
    assert set(shrunk.draining) == {(4, 4, 60), (8, 6, 60)}
    await producer
    deadline = time.monotonic() + 120
    while len(ledger) < TOTAL + 1:
        assert time.monotonic() < deadline, f"{TOTAL + 1 - len(ledger)} messages never delivered"
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*consumers)
    assert set(ledger) == set(range(-1, TOTAL))  # none lost
    assert max(ledger.values()) == 1  # none delivered twice
    assert await misplaced(cq.stores, shrunk) == 0
    with pytest.raises(UsageError, match="wait"):
        await finish(cq.stores, queue_name)  # too soon: a sender may still use a cached old layout
    assert await finish(cq.stores, queue_name, settle_ms=0) == 0
    assert (await cq.stores.queues.get(queue_name, fresh=True)).draining == ()


async def test_finish_waits_for_old_rows_and_new_sends_use_the_new_layout(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name, shards=2, buckets=2, bucket_seconds=60)
    old = [uuid.UUID(await cq.send(queue_name, "t", {"n": n}, delay="1h")) for n in range(10)]
    qs = await reshard(cq.stores, queue_name, shards=5)
    new = uuid.UUID(await cq.send(queue_name, "t", {"n": 10}, delay="1h"))
    m_new = await cq.get(queue_name, id=new)
    assert m_new is not None and (m_new.bucket, m_new.shard) == row_of(new, qs.bucket_ms, qs.buckets, qs.shards)
    moved = [i for i in old if row_of(i, qs.bucket_ms, 2, 5) != row_of(i, qs.bucket_ms, 2, 2)]
    assert moved  # ten ids: some shard changes with 2 -> 5 shards
    assert await finish(cq.stores, queue_name, settle_ms=0) == len(moved)  # still draining: the old layout stays
    assert (await cq.stores.queues.get(queue_name, fresh=True)).draining == ((2, 2, 60),)
    for i in old:
        assert await cq.cancel(queue_name, id=i) is not None  # found in its old row
    assert await finish(cq.stores, queue_name, settle_ms=0) == 0
    with pytest.raises(UsageError, match="already has 5 shards"):
        await reshard(cq.stores, queue_name, shards=5)
    with pytest.raises(UsageError, match="shards must be between 1 and 4096"):
        await reshard(cq.stores, queue_name, shards=5000)


async def test_update_points_at_reshard(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name, shards=2)
    with pytest.raises(UsageError, match=f"use 'casque queue reshard {queue_name}'"):
        await cq.stores.queues.update(queue_name, shards=4)


def test_cli_reshard_then_finish_says_when(tmp_path: Path, cq: Casque, queue_name: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{TEST_KEYSPACE}"\n')

    def casque(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "daemon.cli", "-c", str(cfg), *args], cwd=ROOT, capture_output=True, text=True
        )

    assert casque("queue", "create", queue_name, "--shards", "2").returncode == 0
    done = casque("queue", "reshard", queue_name, "--shards", "4")
    assert done.returncode == 0, done.stderr
    assert "new sends use 4 shards" in done.stdout and "draining 2x" in done.stdout
    early = casque("queue", "reshard", queue_name, "--finish")
    assert early.returncode == 2 and "wait" in early.stderr and len(early.stderr.strip().splitlines()) == 1

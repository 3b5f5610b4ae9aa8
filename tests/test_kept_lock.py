"""A take's lock kept for the receives waiting in line (engine/take/holds.py ``adopt``).

Eight receivers of a one-row queue wait for each other's takes in groups (engine/delivery/joint_take.py). A take
that commits while a group waits keeps its lock for that group's take, which is then a read and a batch: two round
trips instead of five. What must hold: every message received once (a ledger), takes from kept locks counted, and
nothing left blocking the row once the receivers stop (the last take, or the lingering timer, deletes the column,
long before its 5 s TTL would).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from daemon.base import metrics
from daemon.engine.client import Casque
from daemon.engine.delivery import receive
from daemon.engine.send.producer import Job
from daemon.engine.take import holds
from daemon.engine.take.holds import LINGER_MS

N = 1_000
RECEIVERS = 8


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


async def live_lock_columns(cq: Casque, queue: str) -> list[Any]:
    qs = await cq.stores.queues.get(queue)
    window = cq.clock.now_ms() - qs.lock_ttl_ms - cq.settings.worker.clock_tolerance_ms
    return list(await cq.db.run(cq.stores.table.lock_read, [queue, 0, 0, window]))


async def test_receives_in_line_take_from_the_kept_lock_and_leave_the_row_free(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name, shards=1, buckets=1, timeout=60)
    for i in range(0, N, 100):
        await cq.send_many(queue_name, [Job("t", j) for j in range(i, i + 100)])
    kept0 = sample("casque_locks_kept_total")
    two0 = sample("casque_take_round_trips_bucket", queue=queue_name, le="2.0")
    seen: dict[int, int] = {}

    async def receiver() -> None:
        while len(seen) < N:
            got = await cq.receive(queue_name, max=10, wait=0, visibility=60)
            for d in got:
                seen[d.message.payload] = seen.get(d.message.payload, 0) + 1
            await asyncio.gather(*(cq.delete(d.receipt) for d in got))
            if not got:
                await asyncio.sleep(0.01)  # the others still hold some in flight: nothing to take, ask again

    await asyncio.wait_for(asyncio.gather(*(receiver() for _ in range(RECEIVERS))), 60)
    kept = sample("casque_locks_kept_total") - kept0
    two = sample("casque_take_round_trips_bucket", queue=queue_name, le="2.0") - two0
    print(f"{N} received by {RECEIVERS} receivers: {kept:.0f} takes kept their lock, {two:.0f} took in 2 round trips")
    assert sorted(seen) == list(range(N)) and set(seen.values()) == {1}, "lost or received twice"
    assert kept > 0, "no take kept its lock for the receives in line"
    assert two > 0, "no take was a read and a batch"
    # Given up by the last take (nobody waiting, or nothing found) or by the lingering timer: not left to the TTL.
    t0 = time.monotonic()
    while await live_lock_columns(cq, queue_name):
        assert time.monotonic() - t0 < 1 + LINGER_MS / 1000, "a kept lock still blocks the row"
        await asyncio.sleep(0.05)


async def test_a_client_receiving_in_a_loop_takes_from_the_lock_its_last_receive_kept(
    cq: Casque, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One client: receive, delete, receive again at once (an SQS worker with a quick handler). From its second
    receive on, each finds the row's lock its last take kept, so its take is a read and a batch; a receive that
    comes after a pause longer than ``LINGER_MS`` keeps nothing, and the lock is gone once the loop stops.
    ``LINGER_MS`` is 500 ms here, not 50: in the suite's shared event loop a gap of 50 ms between two receives
    (ten deletes) came now and then, and this test is about what follows from the window, not its width."""
    linger_ms = 500
    monkeypatch.setattr(holds, "LINGER_MS", linger_ms)
    monkeypatch.setattr(receive, "LINGER_MS", linger_ms)
    await cq.create_queue(queue_name, shards=1, buckets=1, timeout=60)
    await cq.send_many(queue_name, [Job("t", j) for j in range(100)])
    kept0 = sample("casque_locks_kept_total")
    two0 = sample("casque_take_round_trips_bucket", queue=queue_name, le="2.0")
    seen: list[int] = []
    for _ in range(10):
        got = await cq.receive(queue_name, max=10, wait=0, visibility=60)
        seen += [d.message.payload for d in got]
        await asyncio.gather(*(cq.delete(d.receipt) for d in got))
    kept = sample("casque_locks_kept_total") - kept0
    two = sample("casque_take_round_trips_bucket", queue=queue_name, le="2.0") - two0
    print(f"10 receives in a loop: {kept:.0f} kept their lock, {two:.0f} took in 2 round trips")
    assert sorted(seen) == list(range(100)), "lost or received twice"
    # the first receive follows no other; the second follows one, and keeps its lock for the third, and so on
    assert kept >= 9 and two >= 8, "receives in a loop did not take from the kept lock"
    t0 = time.monotonic()
    while await live_lock_columns(cq, queue_name):
        assert time.monotonic() - t0 < 1 + linger_ms / 1000, "a kept lock still blocks the row"
        await asyncio.sleep(0.05)
    await cq.send_many(queue_name, [Job("t", j) for j in range(10)])
    await asyncio.sleep(linger_ms / 1000)  # the pause under test: the client is no longer looping
    kept0 = sample("casque_locks_kept_total")
    got = await cq.receive(queue_name, max=10, wait=0, visibility=60)
    assert len(got) == 10 and sample("casque_locks_kept_total") == kept0, "a receive after a pause kept its lock"
    assert not await live_lock_columns(cq, queue_name)

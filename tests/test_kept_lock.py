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

from daemon.base import metrics
from daemon.engine.client import Casque
from daemon.engine.send.producer import Job
from daemon.engine.take.holds import LINGER_MS

N = 1_000
RECEIVERS = 8


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


async def live_lock_columns(cq: Casque, queue: str) -> list[Any]:
    qs = await cq.queues.get(queue)
    window = cq.clock.now_ms() - qs.lock_ttl_ms - cq.settings.worker.clock_tolerance_ms
    return list(await cq.db.run(cq.table.lock_read, [queue, 0, 0, window]))


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

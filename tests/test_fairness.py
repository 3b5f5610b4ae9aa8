"""Fair queues (engine/fairness.py): a tenant's backlog can't delay the other tenants' messages.

What fairness controls is *which* message a receive takes, so that is what the tests assert: a
quiet tenant's message is taken by the first receive that starts after its send returned; a
receive that ran wholly after the send and returned other messages *overtook* it. Without
fairness the noisy backlog overtakes every quiet message thousands of times (measured: p99 of
32.5 s). The send-to-receive times are printed too: beside a backlog the receiver is never idle,
so a quiet message also waits for the receive in progress when it was sent (7 round trips of the
lock protocol on a pull), which an idle receiver's long poll doesn't.
"""

from __future__ import annotations

import asyncio
import statistics

from daemon.base.clock import ManualClock
from daemon.engine.client import Casque
from daemon.engine.fairness import NoisyGroups
from daemon.engine.producer import Job

NOISY_BACKLOG = 20_000
QUIET_GROUPS = 100
QUIET_ROUNDS = 2
MAX_OVERTAKES = 12


def test_a_group_is_noisy_over_its_share_and_floor_and_quiet_again_after_the_window() -> None:
    clock = ManualClock(0)
    groups = NoisyGroups(clock, window_ms=10_000)
    assert not any(groups.observe("q", "big") for _ in range(29))  # under the floor of 30
    assert groups.observe("q", "big")
    for i in range(300):  # 300 other tenants, one send each: big is 30 of 330, under 10 %
        assert not groups.observe("q", f"t{i}")
    assert not groups.observe("q", "t0")
    clock.advance(20_001)  # two half windows later the old sends are forgotten
    assert not groups.observe("q", "big")


async def _quiet_run(cq: Casque, queue: str, backlog: int, **shape: int) -> tuple[list[float], list[int]]:
    """A receiver drains the queue while 100 quiet tenants send 2 messages each, one every 10 ms,
    after a noisy tenant's ``backlog``. Per quiet message: its send-to-receive time (ms) and how
    many receives overtook it (started after its send returned, ended before the one that got it)."""
    await cq.create_queue(queue, max_attempts=0, **shape)
    for start in range(0, backlog, 2_000):
        await cq.send_many(queue, [Job("t", {"noisy": True}, group="noisy") for _ in range(min(2_000, backlog - start))])
    sent_at: dict[str, int] = {}
    receives: list[tuple[int, int]] = []  # (start, end) of every receive that returned messages
    got_by: dict[str, int] = {}  # quiet message -> index of the receive that returned it
    latencies: list[float] = []
    total = QUIET_ROUNDS * QUIET_GROUPS
    deletes: list[asyncio.Future[object]] = []

    async def receive() -> None:  # a pipelined consumer: it deletes in the background
        while len(latencies) < total:
            start = cq.clock.now_ms()
            got = await cq.receive(queue, max=10, wait=1, visibility=300)
            end = cq.clock.now_ms()
            if got:
                receives.append((start, end))
            for d in got:
                if "quiet" in d.message.payload:
                    got_by[str(d.message.id)] = len(receives) - 1
                    latencies.append(end - d.message.payload["sent"])
            deletes.append(asyncio.ensure_future(cq.delete_many([d.receipt for d in got])))

    async def send() -> None:
        for n in range(total):
            mid = await cq.send(queue, "t", {"quiet": True, "sent": cq.clock.now_ms()}, group=f"quiet{n % QUIET_GROUPS}")
            sent_at[mid] = cq.clock.now_ms()
            await asyncio.sleep(0.01)

    await asyncio.wait_for(asyncio.gather(receive(), send()), 120)
    await asyncio.gather(*deletes)
    overtakes = [sum(1 for s, e in receives[:got_by[mid]] if s > sent) for mid, sent in sent_at.items()]
    return latencies, overtakes


async def _compare(cq: Casque, queue_name: str, backlog: int, **shape: int) -> None:
    alone, _ = await _quiet_run(cq, f"{queue_name}-alone", 0, **shape)
    beside, overtakes = await _quiet_run(cq, f"{queue_name}-noisy", backlog, **shape)
    assert len(alone) == len(beside) == QUIET_ROUNDS * QUIET_GROUPS  # every quiet message received, none twice
    p99_alone, p99_beside = (statistics.quantiles(x, n=100)[98] for x in (alone, beside))
    print(f"shape {shape or 'default'}: quiet tenants' p99 send->receive alone {p99_alone:.0f} ms, beside a backlog of {backlog:,} "
          f"{p99_beside:.0f} ms; receives that overtook a quiet message: max {max(overtakes)}, total {sum(overtakes)}")
    # A few receives may still overtake one: a send's wake-up reaching the consumer after a take
    # read its row, a shard visited for a take that filled its batch before the named one, a row
    # whose lanes were peeked before the send. A bound that doesn't grow with the backlog (seen:
    # up to 8), never the backlog's thousands (without fairness: p99 32.5 s, every receive).
    assert max(overtakes) <= MAX_OVERTAKES, sorted(overtakes)[-10:]


async def test_a_noisy_tenants_backlog_does_not_delay_the_quiet_tenants(cq: Casque, queue_name: str) -> None:
    await _compare(cq, queue_name, NOISY_BACKLOG)


async def test_a_noisy_backlog_in_older_rows_does_not_delay_the_quiet_tenants(cq: Casque, queue_name: str) -> None:
    """1 s buckets: the backlog sits in rows older than the quiet tenants' messages, which a
    shard visit reads first (oldest first) unless the lanes decide (consumer.py ``_visit_shard``)."""
    await _compare(cq, queue_name, NOISY_BACKLOG // 2, bucket_seconds=1, buckets=60)

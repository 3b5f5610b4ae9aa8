"""Part "fair": a noisy tenant beside quiet ones (``python -m bench --only fair``).

A noisy tenant's backlog (20,000 quick, 100,000 full) beside 100 quiet tenants on one standard queue; the quiet
tenants' send-to-receive latency against a run without the noisy one, in the same run. Receivers (engine API, the
pull path `casque serve` uses) delete in the background while the quiet tenants send 4 messages each, one every
10 ms; 4 receivers (a fleet polls with several). Also counted: the receives that overtook a quiet message (started
after its send returned, ended before the one that got it), which is what fairness decides
(engine/send/fairness.py; tests/test_fairness.py runs ``measure`` at 20,000).
"""

from __future__ import annotations

import asyncio
import statistics
import uuid
from typing import Any

from daemon.engine.client import Casque
from daemon.engine.send.producer import Job

from .env import progress
from .plan import Plan


async def measure(
    cq: Casque, queue: str, backlog: int, quiet_groups: int = 100, rounds: int = 4, receivers: int = 1, **shape: Any
) -> tuple[list[float], list[int]]:
    """Receivers drain ``queue`` (deleting in the background) while ``quiet_groups`` tenants send
    ``rounds`` messages each, one every 10 ms, after a noisy tenant's ``backlog``. Per quiet
    message: its send-to-receive time (ms), and how many receives overtook it (started after its
    send returned, ended before the one that got it). tests/test_fairness.py uses it too."""
    await cq.create_queue(queue, max_attempts=0, retention=3600, **shape)
    for start in range(0, backlog, 2_000):
        await cq.send_many(
            queue, [Job("t", {"noisy": True}, group="noisy") for _ in range(min(2_000, backlog - start))]
        )
        if start % 20_000 == 0 and backlog > 20_000:
            progress(f"{queue}: backlog {start + 2_000:,} of {backlog:,} sent")
    sent_at: dict[str, int] = {}
    receives: list[tuple[int, int]] = []
    got_by: dict[str, int] = {}
    latencies: list[float] = []
    total = rounds * quiet_groups
    deletes: list[asyncio.Future[object]] = []

    async def receive() -> None:
        while len(latencies) < total:
            start = cq.clock.now_ms()
            got = await cq.receive(queue, max=10, wait=1, visibility=600)
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
            mid = await cq.send(
                queue, "t", {"quiet": True, "sent": cq.clock.now_ms()}, group=f"quiet{n % quiet_groups}"
            )
            sent_at[mid] = cq.clock.now_ms()
            await asyncio.sleep(0.01)

    await asyncio.wait_for(asyncio.gather(send(), *(receive() for _ in range(receivers))), 600)
    await asyncio.gather(*deletes)
    return latencies, [sum(1 for s, _ in receives[: got_by[mid]] if s > sent) for mid, sent in sent_at.items()]


async def quiet_run(
    cq: Casque, queue: str, backlog: int, quiet_groups: int, rounds: int, receivers: int
) -> dict[str, float]:
    latencies, overtakes = await measure(cq, queue, backlog, quiet_groups, rounds, receivers)
    q = statistics.quantiles(latencies, n=100)
    return {
        "received": len(latencies),
        "p50_ms": q[49],
        "p99_ms": q[98],
        "max_overtakes": max(overtakes),
        "overtakes": sum(overtakes),
    }


async def run(cq: Casque, plan: Plan) -> dict[str, Any]:
    """The part: the quiet tenants alone, then beside the plan's backlog, on fresh queues."""
    tag = uuid.uuid4().hex[:6]
    shape = {"quiet_groups": 100, "rounds": 4, "receivers": 4}
    alone = await quiet_run(cq, f"fair-alone-{tag}", 0, **shape)
    beside = await quiet_run(cq, f"fair-noisy-{tag}", plan.fair_backlog, **shape)
    return {"alone": alone, "beside": beside, "backlog": plan.fair_backlog, **shape}


def table(r: dict[str, Any]) -> str:
    a, b = r["alone"], r["beside"]
    lines = [
        "| quiet tenants' messages | received | p50 ms | p99 ms | max receives that overtook one |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines.append(f"| alone | {a['received']:.0f} | {a['p50_ms']:.0f} | {a['p99_ms']:.0f} | {a['max_overtakes']:.0f} |")
    lines.append(
        f"| beside a backlog of {r['backlog']:,} | {b['received']:.0f} | {b['p50_ms']:.0f} | {b['p99_ms']:.0f} | "
        f"{b['max_overtakes']:.0f} |"
    )
    lines.append(f"\np99 ratio beside / alone: {b['p99_ms'] / a['p99_ms']:.2f} (target <= 2)")
    return "\n".join(lines)

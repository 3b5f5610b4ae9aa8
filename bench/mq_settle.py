"""Part "settle": how long ``casque serve`` keeps reading once the queues it served go idle (``python -m bench
--only settle``; reads while idle ≈ 0).

The many-queues run's idle window opens a fixed time after its last request (``Size.settle_s``); this measures
what that time must be. It creates tiny queues (2,048 quick; full: 24,576), sends one message to each through the
engine, starts one ``casque serve`` at its defaults, and receives and deletes every message over SQS, so the server
keeps a pull consumer per queue whose row holds a cursor, as after the full run's drain. Then no client speaks to
it, and the server's own CQL reads are counted every 10 s until 90 s in a row had at most two a second (its sweep
has settled every row it keeps: engine/consume/sweep.py), or 15 minutes pass.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from daemon.engine.client import Casque
from daemon.engine.send.producer import Job

from .env import KEYSPACE, out_dir, progress
from .mq_host import bounded, settings_for
from .mq_serve import Server
from .mq_sizes import TINY
from .plan import Plan
from .sqs_json import SqsJson

STEP_S = 10.0
QUIET_PER_S = 2.0  # the activity index read (every 2 min, at most 16 requests) may fall in one 10 s step
#: quiet this long in a row before the server counts as settled: longer than two of the sweep's 30 s intervals,
#: so that the pause between two passes is not taken for the end of them
QUIET_FOR_S = 90.0
AT_MOST_S = 900.0


async def settle_curve(server: Server) -> dict[str, Any]:
    """The server's CQL reads per second, step by step from now, until ``QUIET_FOR_S`` in a row were quiet (or
    ``AT_MOST_S``); settled from the start of that quiet stretch."""
    t0, prev, curve = time.time(), server.stats().get("cql_reads", 0), []
    quiet_since: float | None = None
    while True:
        await asyncio.sleep(STEP_S)
        now = server.stats().get("cql_reads", 0)
        rate = (now - prev) / STEP_S
        prev = now
        at = round(time.time() - t0, 1)
        curve.append((at, rate))
        progress(f"  {at:6.0f} s after the last request: {rate:8.1f} CQL reads/s")
        quiet_since = (quiet_since if quiet_since is not None else at - STEP_S) if rate <= QUIET_PER_S else None
        if quiet_since is not None and at - quiet_since >= QUIET_FOR_S:
            quiet = [r for t, r in curve if t > quiet_since]
            return {
                "curve": curve,
                "settled": True,
                "settled_after_s": quiet_since,
                "quiet_reads_per_s": sum(quiet) / len(quiet),
            }
        if at >= AT_MOST_S:
            return {"curve": curve, "settled": False, "settled_after_s": None, "quiet_reads_per_s": None}


async def main(queues: int, concurrency: int) -> dict[str, Any]:
    settings = settings_for(KEYSPACE)
    settings.log.level = "warning"
    stamp = f"settle{int(time.time()) % 10_000_000}"
    names = [f"{stamp}_{i:06d}" for i in range(queues)]
    cq = await Casque.connect(settings)
    server = Server(KEYSPACE, out_dir("many-queues", stamp))
    try:
        progress(f"settle: {queues:,} tiny queues, one message each; casque serve at its defaults")
        await cq.create_queues(names, **TINY)
        await bounded(names, concurrency, lambda q: cq.send_many(q, [Job("t", {"q": q})]))
        await server.start()
        client = SqsJson(server.url, connections=concurrency + 8, timeout_s=60)

        async def take(queue: str) -> None:
            r = await client.call("ReceiveMessage", queue, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(r.get("Messages", []))]
            if entries:
                await client.call("DeleteMessageBatch", queue, Entries=entries)

        t0 = time.time()
        await bounded(names, concurrency, take)
        progress(f"settle: every queue received from and deleted over SQS in {time.time() - t0:.0f} s; now idle")
        await client.close()
        R = {"queues": queues, "touch_s": time.time() - t0, **await settle_curve(server)}
    finally:
        server.stop()
        await bounded(names, concurrency, lambda n: cq.stores.queues.delete(n))
        await cq.close()
    R["started"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0))
    return R


def part(plan: Plan) -> dict[str, Any]:
    """The part at the plan's size: the curve, and when the server settled."""
    R = asyncio.run(main(plan.settle_queues, 64))
    state = (
        f"settled {R['settled_after_s']:.0f} s after the last request, then {R['quiet_reads_per_s']:.2f} reads/s"
        if R["settled"]
        else f"not settled within {AT_MOST_S:.0f} s"
    )
    progress(f"settle: {state} ({R['queues']:,} queues kept)")
    return R

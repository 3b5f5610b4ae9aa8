"""Part 2: scheduling precision. How late do delayed messages and a per-second cron start?

One daemon (the best setting of part 1) serves a fresh queue. At the start, ``delayed_messages``
messages are sent with delays spread evenly over the run; a cron schedule fires every second
(``* * * * * *``, seconds field last). Lateness = handler start − due time (for the cron, its
scheduled fire time), measured inside the daemon. Nothing else runs on the queue, so the daemon
is mostly idle: this is the precision of its polling, not of a backlog.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from daemon.engine.client import Casque
from daemon.engine.send.producer import Job

from .casque_run import make_queue
from .daemonproc import Daemon, DaemonSpec
from .env import progress
from .plan import Plan
from .probe import TASK
from .stats import Latency, cdf_points


async def run(cq: Casque, plan: Plan, best: dict[str, Any]) -> dict[str, Any]:
    seconds = plan.schedule_seconds
    progress(f"2. scheduling: {plan.delayed_messages:,} delayed messages and a per-second cron over {seconds:.0f}s")
    queue = await make_queue(cq, "sched")
    daemon = await Daemon(DaemonSpec(queue, best["consumers"], best["batch_size"]), "schedule").start()
    try:
        rng = random.Random(7)
        delays = sorted(rng.uniform(1.0, seconds - 1.0) for _ in range(plan.delayed_messages))
        for i in range(0, len(delays), 500):
            await cq.send_many(queue, [Job(TASK, {"k": "delay"}, delay=d) for d in delays[i : i + 500]])
        await cq.send(queue, TASK, {"k": "cron"}, cron="* * * * * *", key="bench-cron")
        await asyncio.sleep(seconds + 1.0)
        await cq.cancel(queue, key="bench-cron")
    finally:
        daemon.stop()
    res = daemon.read()
    late = res.get("late_ms", {})
    out: dict[str, Any] = {}
    for kind in ("delay", "cron"):
        samples = [float(x) for x in late.get(kind, [])]
        lat = Latency.of(samples)
        out[kind] = {
            "latency": lat.as_dict(),
            "cdf": cdf_points(samples, 200),
            "min": min(samples) if samples else None,
        }
        progress(
            f"  {kind:<5} n={lat.count:<5} lateness p50 {lat.p50:.1f} ms  p99 {lat.p99:.1f} ms  max {lat.max:.1f} ms"
        )
    out["expected"] = {"delay": plan.delayed_messages, "cron": int(seconds)}
    out["settings"] = {"consumers": best["consumers"], "batch_size": best["batch_size"]}
    return out

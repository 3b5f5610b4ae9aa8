"""Part "idle": what an idle daemon costs the cluster, in CQL requests per second.

One daemon (the CLI, in its own process, default ``[worker]`` settings: what a user runs) serves
one fresh 16-shard queue and nothing is sent to it. After a warm-up (start-up, the first visit of
every row, a rescan round), the requests it sends are counted over a fixed window, inside the
daemon (bench/probe.py with ``BENCH_PROBE_LIVE=1``):

* on the wire: every request frame the driver sends (``Connection.send_msg``), by message type, so
  heartbeats (OPTIONS), the control connection and anything else that bypasses the engine count;
* through the engine's ``Database.run``, by statement and by the engine function that issued it,
  to say which loop costs what.

The headline is the wire figure: it is what the node has to serve for an idle daemon.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from daemon.engine.client import Casque

from . import cqlcount
from .casque_run import make_queue
from .daemonproc import Daemon, DaemonSpec
from .env import progress
from .plan import Plan

SHARDS = 16


async def _counts(path: Path, newer_than: float, timeout: float = 10.0) -> dict[str, Any]:
    """The daemon's running totals, written after ``newer_than`` (it rewrites them every 0.2 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            if data["t"] >= newer_than:
                return data
        except (OSError, ValueError, KeyError):
            pass
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the daemon wrote no CQL counts to {path} within {timeout:.0f}s")


async def run(cq: Casque, plan: Plan) -> dict[str, Any]:
    from daemon.base.config import WorkerSettings

    w = WorkerSettings()
    progress(
        f"idle: one daemon ({w.consumers} consumers), one {SHARDS}-shard queue, nothing sent: "
        f"{plan.idle_warmup_s:.0f}s warm-up, then requests counted over {plan.idle_seconds:.0f}s"
    )
    queue = await make_queue(cq, "idle", shards=SHARDS)
    daemon = await Daemon(DaemonSpec(queue, w.consumers, w.batch_size, env={"BENCH_PROBE_LIVE": "1"}), "idle").start()
    live = Path(str(daemon.result) + ".cql")
    try:
        await asyncio.sleep(plan.idle_warmup_s)
        before = await _counts(live, time.time())
        await asyncio.sleep(plan.idle_seconds)
        after = await _counts(live, time.time())
    finally:
        daemon.stop()
    names = daemon.read().get("statement_names", {})
    r = cqlcount.rates(before, after, names)
    progress(
        f"  idle daemon: {r['wire_per_s']:.1f} requests/s on the wire ({r['engine_per_s']:.1f}/s through the engine) "
        f"over {r['seconds']:.0f}s"
    )
    for stmt, per_s in list(r["engine_by_statement_per_s"].items())[:5]:
        progress(f"    {per_s:7.2f}/s  {stmt}")
    for caller, per_s in list(r["engine_by_caller_per_s"].items())[:5]:
        progress(f"    {per_s:7.2f}/s  from {caller}")
    return {"queue_shards": SHARDS, "consumers": w.consumers, "warmup_s": plan.idle_warmup_s, **r}

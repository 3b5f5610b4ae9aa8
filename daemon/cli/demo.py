"""``casque demo``: a local Cassandra node, the schema, a worker with the example handlers, and a
handful of jobs that show each path a message can take (done, delayed, prioritised, retried,
poisoned, unknown task). It stops the worker gracefully once every job has reached its end."""

from __future__ import annotations

import asyncio
import sys
import time

from daemon.base.config import Settings
from daemon.base.errors import CasqueError
from daemon.base.logs import get_logger
from daemon.engine.client import Casque
from daemon.engine.queues.index_backfill import backfill
from daemon.engine.storage.schema import ensure_schema
from daemon.service.worker import Worker

log = get_logger("casque.demo")
QUEUE = "demo"


def prepare(settings: Settings) -> None:
    from daemon.devnode import ClusterSpec, start

    start(ClusterSpec(native_port=settings.cassandra.port), progress=lambda line: print(line, file=sys.stderr))
    ensure_schema(settings, backfill=backfill)


async def send_jobs(cq: Casque) -> int:
    await cq.create_queue(QUEUE, if_missing=True, shards=4, timeout=10)
    for name in ("Ada", "Grace", "Linus"):
        await cq.send(QUEUE, "demo.greet", {"name": name})
    await cq.send(QUEUE, "demo.greet", {"name": "VIP (priority 9: first in its shard row)"}, priority=9)
    await cq.send(QUEUE, "demo.greet", {"name": "delayed by 3s"}, delay="3s", key="greet:later")
    for i in range(3):
        await cq.send(QUEUE, "demo.resize", {"image": f"cat-{i}.jpg", "seconds": 0.3})
    await cq.send(QUEUE, "demo.flaky", {"succeed_on": 3})
    await cq.send(QUEUE, "demo.doomed", {"order": 17})
    await cq.send(QUEUE, "os:system", "rm -rf /")  # an unknown task name is poisoned, never imported
    return 11


async def run(settings: Settings, deadline_s: float = 90.0) -> int:
    settings.worker.queues = [QUEUE]
    async with await Casque.connect(settings) as cq:
        since_ms = cq.clock.now_ms()  # the poison queue keeps earlier runs' records: this run's are poisoned after
        expected = await send_jobs(cq)
    log.info("demo_jobs_sent", queue=QUEUE, jobs=expected)
    worker = Worker(settings)
    runner = asyncio.create_task(worker.run())
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        await asyncio.sleep(0.5)
        d = worker.dispatcher
        if d is not None and d.counters.acked + d.counters.poisoned >= expected and not d.tasks:
            break
    worker.request_stop()
    code = await runner
    async with await Casque.connect(settings) as cq:
        every = await cq.admin.poisoned(QUEUE)
        left = await cq.peek(QUEUE, 50)
    poison = [p for p in every if p.poisoned_at >= since_ms]
    c = worker.dispatcher.counters if worker.dispatcher else None
    print("\n=== casque demo ===")
    if c:
        print(f"received {c.received} deliveries: {c.acked} acked, {c.retried} retried, {c.poisoned} poisoned")
    for p in poison[:10]:
        print(f"poison: {p.task:<12} {p.reason}")
    print(f"messages still queued: {len(left)}   poisoned by this run: {len(poison)} (the poison queue: {len(every)})")
    ok = c is not None and c.acked + c.poisoned >= expected and code == 0
    print("demo finished: every job reached its end" if ok else "demo did not finish in time: see the log above")
    return 0 if ok else 1


def main(settings: Settings) -> int:
    import uvloop

    try:
        prepare(settings)
    except CasqueError as exc:
        print(f"casque: {exc}", file=sys.stderr)
        return exc.exit_code
    return uvloop.run(run(settings))

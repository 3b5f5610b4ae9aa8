"""GetQueueAttributes' Approximate* counts read a bounded number of rows whatever the queue holds
(engine/observe/depth_estimate.py): counted per call from the server code's own CQL requests
(``Database.reads``), compared with ``casque stats``' exact counts on a 100,000-message queue (most
waiting, some in flight, some delayed) and on a small queue, through boto3 against a real
``casque serve``."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from daemon.base.config import Settings
from daemon.engine.client import Casque
from daemon.engine.observe.depth_estimate import BUDGET, HEAD, REFRESH_S
from daemon.engine.operations.stats import queue_stats
from daemon.engine.send.producer import Job
from daemon.http.sqs.actions import Call, SqsService
from daemon.http.sqs.actions.queues import QueueActions
from daemon.testing import sqsserver

COUNTS = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"]


async def exact(cq: Casque, name: str) -> tuple[int, int, int]:
    st = await queue_stats(cq.stores, name)
    return st.waiting_due, st.in_flight, st.scheduled


def answer(sqs: Any, url: str) -> tuple[int, int, int]:
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=COUNTS)["Attributes"]
    return int(attrs[COUNTS[0]]), int(attrs[COUNTS[1]]), int(attrs[COUNTS[2]])


async def fill(cq: Casque, name: str, waiting: int, in_flight: int, delayed: int) -> None:
    for i in range(0, waiting + in_flight, 500):
        await cq.send_many(name, [Job("sqs", "x") for _ in range(min(500, waiting + in_flight - i))])
    taken = 0
    while taken < in_flight:
        taken += len(await cq.receive(name, max=min(10, in_flight - taken), wait=0, visibility=900))
    await cq.send_many(name, [Job("sqs", "d", delay=900) for _ in range(delayed)])


async def test_a_small_queue_is_counted_exactly_at_once(sqs: Any, server: sqsserver.SqsServer, cq: Casque) -> None:
    name = f"cnt-{uuid.uuid4().hex[:10]}"
    url = (await asyncio.to_thread(sqs.create_queue, QueueName=name))["QueueUrl"]
    await fill(cq, name, waiting=7, in_flight=3, delayed=4)
    assert await exact(cq, name) == (7, 3, 4)
    assert await asyncio.to_thread(answer, sqs, url) == (7, 3, 4), (
        "every lane under HEAD rows: exact, on the first call"
    )


async def test_a_big_queue_costs_bounded_reads_per_call_and_converges_to_the_exact_counts(
    sqs: Any, server: sqsserver.SqsServer, cq: Casque, settings: Settings
) -> None:
    name = f"cnt-big-{uuid.uuid4().hex[:8]}"
    url = (await asyncio.to_thread(sqs.create_queue, QueueName=name))["QueueUrl"]
    await fill(cq, name, waiting=99_700, in_flight=300, delayed=200)
    truth = await exact(cq, name)
    assert truth == (99_700, 300, 200)
    qs = await cq.stores.queues.get(name, fresh=True)
    rows, lanes = qs.shards * qs.buckets, qs.shards * qs.buckets * len(qs.ranks())

    # The server's own code, in this process, so its CQL requests can be counted exactly.
    local = await Casque.connect(settings)
    try:
        service = SqsService(local, settings.sqs)
        queues = service.groups[0]
        assert isinstance(queues, QueueActions)
        depth = queues.depth
        call = Call({"QueueUrl": url, "AttributeNames": COUNTS}, "http://x")
        costs = []
        for _ in range(3):
            end = time.monotonic() + 120
            while depth.passes_running() and time.monotonic() < end:  # count the call's reads, not a background pass's
                await asyncio.sleep(0.1)
            before = local.db.reads
            await service.run("GetQueueAttributes", call)
            costs.append(local.db.reads - before)
        bound = 2 + rows + lanes  # settings + attributes, the cursors (first call only), one head per lane
        est = await depth.estimate(qs, local.clock.now_ms())
        print(
            f"\ncounts: reads per GetQueueAttributes {costs} (bound {bound}); rows read by a call {est.rows} (bound "
            f"{rows + lanes * HEAD}); the exact count reads {sum(truth)} rows"
        )
        assert costs[0] <= bound and all(c <= 2 + lanes for c in costs[1:])
        assert est.rows <= rows + lanes * HEAD and est.requests <= lanes
    finally:
        end = time.monotonic() + 120
        while depth.passes_running() and time.monotonic() < end:  # let its pass end before the connection closes
            await asyncio.sleep(0.1)
        await local.close()

    deadline = time.monotonic() + REFRESH_S + sum(truth) / BUDGET + 60  # the stated lag, and the slow shared box
    seen = []
    while time.monotonic() < deadline:
        seen.append(await asyncio.to_thread(answer, sqs, url))
        if seen[-1] == truth:
            break
        await asyncio.sleep(1)
    print(f"counts over boto3 until exact: {seen}")
    assert seen[-1] == truth, "a large lane's count is its exact count at its last pass"
    assert all(s[0] <= truth[0] for s in seen), "before its first pass a lane reports a lower bound, never more"

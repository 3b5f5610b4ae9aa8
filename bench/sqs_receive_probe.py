"""Where a receive+delete run's time goes: ``python -m bench.sqs_receive_probe [casque|elasticmq|traced] [RUNS]``.

The receive phase of ``bench.sqs``'s throughput run (4,000 messages sent first, then 8 aiobotocore tasks receiving
10 at a time and deleting with DeleteMessageBatch), with what the table leaves out: each ReceiveMessage's and
DeleteMessageBatch's latency (p50 / p90), the messages per receive, and the CPU of the Cassandra node, the server and
this client process over the receive phase alone (from /proc), in ms per message, and the cores they used together:
a run below 2 cores is waiting, not computing. ``traced`` runs casque serve under bench/sqs_cql_serve.py (every CQL
request charged to its call, written to /tmp/casque-calls.json) and prints the request sequences of the receives and
the gaps between their requests. One JSON line per run; every run uses one server process (a fresh queue each).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from aiobotocore.session import get_session
from botocore.config import Config

from .env import cpu_seconds
from .sqs import CREDS, casque_serve, elasticmq

CALLS = Path("/tmp/casque-calls.json")


def node_pid() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "CassandraDaemon"], capture_output=True, text=True).stdout.split()
    return [int(out[0])] if out else []


def q(xs: list[float], at: float) -> float:
    return round(sorted(xs)[min(len(xs) - 1, int(len(xs) * at))] * 1000, 1)


async def run(url: str, server: list[int], n: int = 4000, tasks: int = 8) -> dict[str, Any]:
    cfg = Config(max_pool_connections=tasks * 2, retries={"total_max_attempts": 1})
    async with get_session().create_client("sqs", endpoint_url=url, config=cfg, **CREDS) as c:
        url_q = (await c.create_queue(QueueName=f"probe-{uuid.uuid4().hex[:8]}"))["QueueUrl"]
        await c.receive_message(QueueUrl=url_q, WaitTimeSeconds=0)
        for w in range(tasks):
            for b in range(n // tasks // 10):
                entries = [{"Id": str(i), "MessageBody": f"{w}-{b}-{i}"} for i in range(10)]
                await c.send_message_batch(QueueUrl=url_q, Entries=entries)
        got: list[str] = []
        receives: list[float] = []
        deletes: list[float] = []
        sizes: list[int] = []

        async def receiver() -> None:
            idle = 0
            while len(got) < n and idle < 5:
                t0 = time.perf_counter()
                r = await c.receive_message(
                    QueueUrl=url_q, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=120
                )
                receives.append(time.perf_counter() - t0)
                msgs = r.get("Messages", [])
                sizes.append(len(msgs))
                idle = 0 if msgs else idle + 1
                if msgs:
                    got.extend(m["MessageId"] for m in msgs)
                    entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)]
                    t0 = time.perf_counter()
                    await c.delete_message_batch(QueueUrl=url_q, Entries=entries)
                    deletes.append(time.perf_counter() - t0)

        node = node_pid()
        before = (cpu_seconds(node), cpu_seconds(server), time.process_time())
        t0 = time.perf_counter()
        await asyncio.gather(*(receiver() for _ in range(tasks)))
        elapsed = time.perf_counter() - t0
        after = (cpu_seconds(node), cpu_seconds(server), time.process_time())
        await c.delete_queue(QueueUrl=url_q)
    cpu = [round((b - a) / len(got) * 1000, 3) for a, b in zip(before, after)]
    return {
        "msgs_s": round(len(got) / elapsed),
        "receives": len(receives),
        "receive_p50_p90_ms": [q(receives, 0.5), q(receives, 0.9)],
        "delete_p50_p90_ms": [q(deletes, 0.5), q(deletes, 0.9)],
        "messages_per_receive": round(statistics.mean(sizes), 2),
        "cpu_ms_per_msg_node_server_client": cpu,
        "cores": round(sum(cpu) * len(got) / elapsed / 1000, 2),
    }


def request_sequences() -> None:
    """The receives' request sequences (most common first) and the gaps between their requests, from CALLS."""
    time.sleep(0.3)  # the server writes the file every 50 ms
    calls = [c for c in json.loads(CALLS.read_text())["data"]["calls"].values() if c["action"] == "ReceiveMessage"]
    shapes = collections.Counter(tuple(r[1][:40] for r in c["requests"]) for c in calls)
    for shape, count in shapes.most_common(5):
        print(count, " -> ".join(shape))
    takes = [c["requests"] for c in calls if len(c["requests"]) >= 2]
    for i in range(1, max((len(t) for t in takes), default=1)):
        gaps = [t[i][0] - t[i - 1][0] for t in takes if len(t) > i]
        print(f"request {i} after request {i - 1}: p50 {statistics.median(gaps):.1f} ms, {len(gaps)} receives")


def main(argv: list[str]) -> int:
    which = argv[0] if argv else "casque"
    runs = int(argv[1]) if len(argv) > 1 else 1
    servers = {
        "casque": casque_serve,
        "elasticmq": elasticmq,
        "traced": functools.partial(casque_serve, launcher=("-m", "bench.sqs_cql_serve", str(CALLS))),
    }
    pids: list[int] = []
    with servers[which](pids) as url:
        for _ in range(runs):
            print(json.dumps(asyncio.run(run(url, pids))), flush=True)
    if which == "traced":
        request_sequences()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

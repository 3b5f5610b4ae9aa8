"""Racing consumers on shared shard rows: every message delivered, none twice within its timeout.

Three real processes (3 + 3 + 2 consumer coroutines) race over few shards, so the lock is contended
on every take. The timeout (10 minutes) outlasts the run: any second delivery is a lock violation.
The skew variant gives one process a clock 2 s ahead and another 2 s behind (clock tolerance 5 s).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from daemon.engine.client import Casque
from daemon.engine.send.producer import Job

from .conftest import TEST_KEYSPACE

WORKER = Path(__file__).parent / "support" / "race_worker.py"
N = 50_000


async def run_race(cq: Casque, queue: str, tmp_path: Path, offsets: list[int]) -> tuple[int, int, int, str]:
    await cq.create_queue(queue, shards=4, buckets=4, bucket_seconds=60, timeout=600, max_attempts=3)
    sent: list[str] = []
    for start in range(0, N, 5000):
        sent += await cq.send_many(queue, [Job("race", i) for i in range(start, start + 5000)])
    procs = []
    for i, (consumers, offset) in enumerate(zip([3, 3, 2], offsets)):
        out = tmp_path / f"deliveries-{i}.txt"
        cmd = [
            sys.executable,
            str(WORKER),
            "--keyspace",
            TEST_KEYSPACE,
            "--queue",
            queue,
            "--consumers",
            str(consumers),
            "--offset-ms",
            str(offset),
            "--out",
            str(out),
        ]
        procs.append(
            (out, await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        )
    logs = []
    for _out, proc in procs:
        stdout, _ = await proc.communicate()
        logs.append(stdout.decode())
        assert proc.returncode == 0, stdout.decode()[-3000:]
    deliveries: Counter[str] = Counter()
    for out, _ in procs:
        for line in out.read_text().splitlines():
            deliveries[line.split()[0]] += 1
    lost = len(set(sent) - set(deliveries))
    duplicated = sum(n - 1 for n in deliveries.values() if n > 1)
    return len(sent), lost, duplicated, "\n".join(logs)


@pytest.mark.slow
async def test_racing_consumers_deliver_everything_exactly_once_within_timeout(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    sent, lost, duplicated, logs = await run_race(cq, queue_name, tmp_path, [0, 0, 0])
    print(f"sent={sent} lost={lost} duplicated={duplicated}\n{logs}")
    assert sent == N
    assert lost == 0
    assert duplicated == 0


@pytest.mark.slow
async def test_racing_consumers_with_skewed_clocks_lose_and_duplicate_nothing(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    sent, lost, duplicated, logs = await run_race(cq, queue_name, tmp_path, [2000, -2000, 0])
    print(f"sent={sent} lost={lost} duplicated={duplicated}\n{logs}")
    assert sent == N
    assert lost == 0
    assert duplicated == 0

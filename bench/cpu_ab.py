"""The daemon's own CPU per message, for A/B runs of two checkouts (issue 27).

``python -m bench.cpu_ab [N] [--live] [--consumers C] [--batch B] [--profile FILE]``: fills a fresh queue with N no-op
messages first, then starts one daemon (this checkout's code) and lets it drain the queue. The daemon's CPU is read
from /proc/PID/stat when it is ready and again once the probe has counted N acks, so its start-up and its stop are
not in the figure; the throughput is N over the time from the first handler start to the last ack. One JSON line
on stdout: ``msgs_s``, ``daemon_cpu_ms_per_msg``. With ``--profile``, py-spy samples the daemon while it drains
(raw collapsed stacks written to FILE), which slows it: profile runs are not timing runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time

from daemon.engine.client import Casque
from daemon.engine.send.producer import Job

from .casque_run import casque_sender, make_queue
from .daemonproc import Daemon, DaemonSpec
from .env import bench_settings, cpu_seconds
from .probe import TASK
from .produce import send_fast
from .profiling import py_spy


async def fill(cq: Casque, queue: str, n: int, chunk: int = 500) -> None:
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        await cq.send_many(queue, [Job(TASK, {"t": time.time()}) for _ in range(k)])


def spy(pid: int, out: str) -> subprocess.Popen[bytes]:
    cmd = [
        py_spy(),
        "record",
        "--pid",
        str(pid),
        "--rate",
        "200",
        "--gil",
        "--format",
        "raw",
        "--output",
        out,
        "--nonblocking",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def drain(cq: Casque, queue: str, a: argparse.Namespace) -> dict[str, float]:
    n = a.n
    env = {"BENCH_PROBE_CQL": "1" if a.cql else "0"}
    daemon = await Daemon(DaemonSpec(queue, a.consumers, a.batch, expect=0, env=env), "cpu_ab").start()
    sampler = spy(daemon.pid, a.profile) if a.profile else None
    cpu0 = cpu_seconds([daemon.pid])
    acked0 = daemon.acked()
    if a.live:
        await send_fast(casque_sender(cq, queue), n)
    cpu1 = cpu0
    deadline = time.monotonic() + max(120.0, n / 200.0)
    try:
        while daemon.acked() < n and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            cpu1 = cpu_seconds([daemon.pid])
    finally:
        if sampler is not None:
            sampler.send_signal(2)  # SIGINT: py-spy writes what it sampled
            sampler.wait(30)
        daemon.stop()
    res = daemon.read()
    acked = int(res.get("acked", 0))
    span = float(res["last_ack"]) - float(res["first_start"])
    return {
        "n": n,
        "acked_at_ready": acked0,
        "acked": acked,
        "msgs_s": acked / span if span > 0 else 0.0,
        "daemon_cpu_s": cpu1 - cpu0,
        "daemon_cpu_ms_per_msg": 1000.0 * (cpu1 - cpu0) / max(1, acked),
        **({"cql": res.get("cql", {})} if a.cql else {}),
    }


async def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.cpu_ab")
    p.add_argument("n", type=int, nargs="?", default=10_000)
    p.add_argument("--consumers", type=int, default=8)
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--profile", default=None)
    p.add_argument("--cql", action="store_true", help="count the daemon's CQL requests (costs CPU: not for timing)")
    p.add_argument("--live", action="store_true", help="send while the daemon runs (as bench e2e), not before")
    a = p.parse_args(argv)
    cq = await Casque.connect(bench_settings())
    try:
        queue = await make_queue(cq, "cpuab")
        if not a.live:
            await fill(cq, queue, a.n)
        result = await drain(cq, queue, a)
    finally:
        await cq.close()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))

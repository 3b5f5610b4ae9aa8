"""Part "soak": the fault scenarios of tests/test_reliability.py at the plan's size (``python -m bench --only soak``).

Daemon faults against the local dev node (keyspace casque_bench): ``kill -9`` chaos, contention, clock skew (10,000
messages and 3 kills quick; 100,000 and 20 full). Full mode then loses a node of a 3-node RF=3 cluster of its own
(ports 9442/7400/7700), stopped at the end. Prints one line per scenario; the report has the table, and the part
counts as failed if anything was lost. Its figures go in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from daemon.base.config import Settings
from daemon.base.errors import StorageUnavailable
from daemon.devnode import ClusterSpec, start, start_node, stop
from daemon.engine.client import Casque
from daemon.engine.send.producer import Job
from daemon.engine.storage.schema import ensure_schema
from daemon.testing import nodes
from daemon.testing.chaos import Outcome, count, finish, kill_chaos, race
from daemon.testing.daemonproc import records, start_daemon, until
from daemon.testing.nodes import kill9_node, settings_for

from .plan import Plan

KEYSPACE = "casque_bench"


async def connect(settings: Settings) -> Casque:
    """The schema applied (idempotent) to the settings' keyspace, then a client on it."""
    ensure_schema(settings)
    return await Casque.connect(settings)


async def daemon_faults(messages: int, kills: int) -> list[tuple[str, Outcome]]:
    settings = Settings()
    settings.cassandra.keyspace = KEYSPACE
    cq = await connect(settings)
    stamp = int(time.time())
    results: list[tuple[str, Outcome]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, run in [
                (
                    f"kill -9 x{kills}, 3 daemons",
                    lambda d: kill_chaos(cq, f"soak_kill_{stamp}", d, KEYSPACE, messages, kills),
                ),
                (
                    "4 daemons x 8 consumers, 2 shards",
                    lambda d: race(cq, f"soak_race_{stamp}", d, KEYSPACE, messages, [0, 0, 0, 0], 8, 2),
                ),
                (
                    "clocks +2 s / -2 s / 0",
                    lambda d: race(cq, f"soak_skew_{stamp}", d, KEYSPACE, messages, [2000, -2000, 0], 4, 4),
                ),
            ]:
                workdir = Path(tmp) / name.split()[0].strip("-")
                workdir.mkdir(exist_ok=True)
                print(f"running: {name} ({messages} messages)...", flush=True)
                out = await run(workdir)
                print(f"  {out.line()}", flush=True)
                results.append((name, out))
    finally:
        await cq.close()
    return results


def failed(o: Outcome) -> bool:
    """Lost, or the same attempt twice; duplicates only where no daemon was killed (the races run with a 10-minute
    timeout, so any duplicate there is a violation)."""
    return bool(o.lost or o.same_attempt_twice or (o.kills == 0 and o.duplicated))


# --------------------------------------------------------------------------- node loss

RING = ClusterSpec(name="soak", nodes=3, native_port=9442, storage_port=7400, jmx_base=7700)
RING_KEYSPACE = "casque_soak"
LOST_NODE = 3


class Tail:
    """The handlers' record file read incrementally: at 100,000 lines, re-reading it on every
    poll would cost the 2-core machine more than the daemons being measured."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.ids = path, 0, set[str]()

    def seen(self) -> set[str]:
        if self.path.exists():
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
            whole = chunk[: chunk.rfind(b"\n") + 1]
            self.offset += len(whole)
            self.ids.update(line.split()[1] for line in whole.decode().splitlines() if line.strip())
        return self.ids


def ring_config(path: Path, queue: str) -> Path:
    """A daemon config pointing at RING."""
    return nodes.ring_config(path, RING, RING_KEYSPACE, [queue], consumers=4, batch_size=50, max_poll_interval="500ms")


async def produce(cq: Casque, queue: str, n: int, sent: list[str], failures: list[str]) -> None:
    """Send in chunks of 500 while the daemons consume; a chunk that fails is sent again (only
    ids that ``send_many`` returned count as sent, so a failed chunk can add extras, never losses)."""
    for start_at in range(0, n, 500):
        jobs = [Job("test.record", i) for i in range(start_at, min(n, start_at + 500))]
        while True:
            try:
                sent += await cq.send_many(queue, jobs)
                break
            except StorageUnavailable as exc:
                failures.append(str(exc))
                await asyncio.sleep(0.5)


async def node_loss(n: int, daemons: int = 3) -> Outcome:
    """RF=3 at LOCAL_QUORUM: a producer sends ``n`` while ``daemons`` consume; at 30 % sent node 3's
    JVM is killed with SIGKILL, and started again at 60 % sent (and at least 30 s later), so the
    loss falls on sends and takes alike (keyed on sends: on a loaded machine the producer can
    finish before 30 % is processed)."""
    loop = asyncio.get_running_loop()
    load_before = os.getloadavg()
    await asyncio.to_thread(start, RING)
    settings = settings_for(RING, RING_KEYSPACE)
    settings.cassandra.keyspace = RING_KEYSPACE
    cq = await connect(settings)
    queue = f"soak_node_loss_{int(time.time())}"
    started = loop.time()
    sent: list[str] = []
    failures: list[str] = []
    down, sent_while_down = 0.0, 0
    try:
        await cq.create_queue(queue, shards=8, timeout=10, max_attempts=50)
        with tempfile.TemporaryDirectory() as tmp:
            record = Path(tmp) / "record.txt"
            tail = Tail(record)
            cfg = ring_config(Path(tmp) / "ring.toml", queue)
            procs = [start_daemon(cfg, record, Path(tmp) / f"log-{i}") for i in range(daemons)]
            sending = asyncio.create_task(produce(cq, queue, n, sent, failures))
            try:
                await until(lambda: len(sent) >= n * 0.3 and len(tail.seen()) > 0, 1800, "30 % sent", procs[0])
                await asyncio.to_thread(kill9_node, RING, LOST_NODE)
                lost_at, sent_at_loss = loop.time(), len(sent)
                print(
                    f"  node{LOST_NODE} killed (kill -9) at {lost_at - started:.0f}s: {len(sent)} sent, "
                    f"{len(tail.ids)} processed",
                    flush=True,
                )
                await until(lambda: len(sent) >= n * 0.6 and loop.time() - lost_at >= 30, 1800, "60 % sent", procs[0])
                await asyncio.to_thread(start_node, RING, LOST_NODE)
                down, sent_while_down = loop.time() - lost_at, len(sent) - sent_at_loss
                print(
                    f"  node{LOST_NODE} back after {down:.0f}s: {len(sent)} sent, {len(tail.seen())} processed",
                    flush=True,
                )
                await sending
            except BaseException:
                sending.cancel()
                for p in procs:
                    p.kill9()
                raise
            await finish(procs, sent, record, 1800)
            out = count(sent, record)
            redelivered = sum(1 for r in records(record) if r[2] != "1")
    finally:
        await cq.close()
    out.seconds = loop.time() - started
    out.notes |= {
        "node_down_s": round(down, 1),
        "sent_while_down": sent_while_down,
        "failed_sends": len(failures),
        "redeliveries": redelivered,
        "load_before": round(load_before[0], 2),
        "load_after": round(os.getloadavg()[0], 2),
    }
    return out


async def run_node_loss(messages: int) -> Outcome:
    """The node-loss scenario on its own cluster, stopped at the end whatever happened."""
    try:
        out = await node_loss(messages)
    finally:
        await asyncio.to_thread(stop, RING)
    print(f"node loss (1 of 3, kill -9, RF=3 LOCAL_QUORUM): {out.line()}", flush=True)
    return out


def part(plan: Plan) -> dict[str, Any]:
    """The part at the plan's size: every scenario's counts, and ``ok`` (nothing lost)."""
    start(ClusterSpec())
    results = asyncio.run(daemon_faults(plan.soak_messages, plan.soak_kills))
    if plan.soak_node_loss:
        results.append(("1 node of 3 kill -9ed, RF=3 LOCAL_QUORUM", asyncio.run(run_node_loss(plan.soak_messages))))
    return {
        "messages": plan.soak_messages,
        "scenarios": [{"scenario": name, **dataclasses.asdict(o)} for name, o in results],
        "ok": not any(failed(o) for _, o in results),
    }

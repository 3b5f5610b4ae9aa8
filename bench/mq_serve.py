"""Phases 3 and 4 of the many-queues scenario (bench/many_queues.py): the ``casque serve`` process under
test (killed and restarted on its port), the users, producers and drain that run against it, and the RSS
sampler; kept apart from the sizes and figures because this is the part that talks to a live server.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .env import ROOT, cpu_seconds, progress
from .mq_host import bounded, free_port, pct, rss_kb
from .mq_ledger import Ledger
from .mq_sizes import Size
from .sqs_json import ServerGone, SqsJson

# --------------------------------------------------------------------------- 3. serve


class Server:
    """The ``casque serve`` process under test (wrapped by bench.many_queues_serve), on a fixed port
    so that it comes back at the same address after a kill."""

    def __init__(self, keyspace: str, workdir: Path) -> None:
        self.keyspace, self.workdir, self.port = keyspace, workdir, free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnation = 0
        self.finished: list[dict[str, Any]] = []  # the last stats of each process that ended

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stats_file(self) -> Path:
        return self.workdir / f"serve-{self.incarnation}.json"

    async def start(self, timeout: float = 60.0) -> None:
        self.incarnation += 1
        env = dict(
            os.environ,
            CASQUE_CASSANDRA__KEYSPACE=self.keyspace,
            CASQUE_LOG__LEVEL="warning",
            CASQUE_LOG__FORMAT="json",
            PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        )
        # The child writes through its own copy of the descriptor: ours can close once it has started.
        with open(self.workdir / f"serve-{self.incarnation}.log", "wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.many_queues_serve",
                    str(self.stats_file),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"casque serve exited with {self.proc.returncode}: see {log.name}")
            if b"casque: listening on" in Path(log.name).read_bytes():
                return
            await asyncio.sleep(0.05)
        self.proc.kill()
        raise RuntimeError(f"casque serve did not listen within {timeout:.0f}s: see {log.name}")

    def stats(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.stats_file.read_text())
            return data
        except (OSError, ValueError):
            return {}

    def errors(self) -> dict[str, int]:
        """The warnings and errors its processes logged, by event and the storage error's gist (from the Cassandra
        error code's message, e.g. READ_TOO_MANY_TOMBSTONES): what clients saw as 5xx, and why."""
        return log_errors(sorted(self.workdir.glob("serve-*.log")))

    def kill9(self) -> None:
        assert self.proc is not None
        self.finished.append(self.stats())
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.finished.append(self.stats())
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def log_errors(logs: list[Path]) -> dict[str, int]:
    """Count the JSON log lines of level warning or error in ``logs``, by event and error gist."""
    found: Counter[str] = Counter()
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("level") in ("warning", "error"):
                gist = re.search(r"[A-Z][A-Z_]{8,}", str(e.get("error", "")))
                found[e.get("event", "?") + (f": {gist.group(0)}" if gist else "")] += 1
    return dict(found.most_common())


@dataclass
class Sample:
    t: float
    phase: str
    incarnation: int
    touched: int
    rss_mb: float
    cpu_s: float = 0.0  # the server's CPU time so far (user + system)


class Run:
    """The serving phases: users, producers, the kill, the drain, and the RSS sampler."""

    def __init__(self, server: Server, names: list[str], cum: list[float], size: Size, ledger: Ledger) -> None:
        self.server, self.names, self.cum, self.size, self.ledger = server, names, cum, size, ledger
        self.rng = random.Random(42)
        self.online = self.rng.sample(names, min(size.users, len(names)))
        self.client = SqsJson(
            server.url, connections=size.users + size.drain_concurrency + 64, timeout_s=size.wait_s + 30
        )
        self.phase = "live"
        self.samples: list[Sample] = []
        self.stop_users = asyncio.Event()
        self.kill_at: float | None = None
        self.back_at: float | None = None
        self.retries = 0
        self.send_ms: list[float] = []  # SendMessage round trips (answered on the first try)
        self.empty_drain_receives = 0

    # ---- calls that outlive a restart -------------------------------------------------------
    async def retrying(self, action: str, queue: str, **params: Any) -> dict[str, Any]:
        while True:
            try:
                return await self.client.call(action, queue, **params)
            except ServerGone:
                self.retries += 1
                await asyncio.sleep(0.2)

    async def take(self, queue: str, wait_s: int) -> int:
        """One receive and the delete of what it brought; returns how many messages it brought."""
        r = await self.retrying(
            "ReceiveMessage",
            queue,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=wait_s,
            VisibilityTimeout=self.size.visibility_s,
        )
        msgs = r.get("Messages") or []
        if not msgs:
            return 0
        now = time.time()
        mids = {str(i): self.ledger.receive(m["Body"], now) for i, m in enumerate(msgs)}
        entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)]
        # retried across a restart, as SDKs do (receipts outlive the server process): a delete whose
        # answer the kill swallowed is repeated, and a stale receipt deletes nothing and is not an error
        out = await self.retrying("DeleteMessageBatch", queue, Entries=entries)
        for ok in out.get("Successful") or []:
            mid = mids.get(ok["Id"])
            if mid is not None:
                self.ledger.delete(mid)
        return len(msgs)

    # ---- the live phase -----------------------------------------------------------------------
    async def user(self, queue: str) -> None:
        # users come online over ``ramp_s``, as people do: 19,000 first long polls at once are a herd whose
        # cold reads (about 6 each, bench/mq_parked.py) take the node here ~95 s to serve, longer than a poll
        await asyncio.sleep(self.rng.uniform(0, self.size.ramp_s))
        while not self.stop_users.is_set():
            await self.take(queue, self.size.wait_s)

    async def producers(self) -> None:
        sem = asyncio.Semaphore(64)
        ids = itertools.count()
        online = set(self.online)
        t0 = time.monotonic()
        tasks = []

        async def send(mid: str, queue: str) -> None:
            async with sem:
                at = time.time()
                retries = self.retries
                r = await self.retrying("SendMessage", queue, MessageBody=f"{mid} {at:.6f}")
                if self.retries == retries:
                    self.send_ms.append((time.time() - at) * 1000)
                self.ledger.send(mid, queue, at, queue in online, r["MessageId"])

        for i in itertools.count():
            due = t0 + i / self.size.send_rate
            if due - t0 >= self.size.live_s:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            q = (
                self.rng.choice(self.online)
                if self.rng.random() < 0.5
                else self.rng.choices(self.names, cum_weights=self.cum)[0]
            )
            tasks.append(asyncio.create_task(send(f"l{next(ids)}", q)))
        await asyncio.gather(*tasks)

    async def chaos(self) -> None:
        await asyncio.sleep(self.size.live_s / 2)
        self.kill_at = time.time()
        progress(f"  kill -9 casque serve (pid {self.server.proc.pid if self.server.proc else '?'})")
        self.server.kill9()
        self.client.touched = set()
        await self.server.start()
        self.back_at = time.time()
        progress(f"  casque serve back after {self.back_at - self.kill_at:.1f}s")

    async def sampler(self) -> None:
        while True:
            proc = self.server.proc
            rss = rss_kb(proc.pid) if proc is not None and proc.poll() is None else None
            if rss is not None and proc is not None:
                self.samples.append(
                    Sample(
                        time.time(),
                        self.phase,
                        self.server.incarnation,
                        len(self.client.touched),
                        rss / 1024,
                        cpu_seconds([proc.pid]),
                    )
                )
            await asyncio.sleep(0.5)

    async def catch_up(self, limit_s: float) -> float:
        """Owners coming online first empty what the fill left in their queues; the producers start
        after, so that send→receive measures a message to an owner who is keeping up."""
        t0 = time.time()
        while any(self.ledger.outstanding[q] > 0 for q in self.online) and time.time() - t0 < limit_s:
            await asyncio.sleep(0.2)
        return time.time() - t0

    async def live(self) -> dict[str, Any]:
        users = [asyncio.create_task(self.user(q)) for q in self.online]
        backlog = sum(self.ledger.outstanding[q] for q in self.online)
        catch_up_s = await self.catch_up(self.size.live_s)
        chaos = asyncio.create_task(self.chaos()) if self.size.kill else None
        t0 = time.time()
        await self.producers()
        if chaos is not None:
            await chaos
        self.stop_users.set()
        await asyncio.gather(*users)
        return {
            "seconds": time.time() - t0,
            "users": len(self.online),
            "send_rate": self.size.send_rate,
            "backlog": backlog,
            "catch_up_s": catch_up_s,
            "send_p50_ms": pct(self.send_ms, 50),
            "send_p99_ms": pct(self.send_ms, 99),
        }

    # ---- the drain ----------------------------------------------------------------------------
    async def empty_queue(self, queue: str) -> None:
        """Receive until a receive comes back empty: the look at an idle queue, or a check that a queue
        the ledger has empty is empty (anything found is a delivery the ledger counts as a duplicate)."""
        while await self.take(queue, 0):
            pass
        self.empty_drain_receives += 1

    async def drain_queue(self, queue: str) -> None:
        """Receive until the ledger has the queue empty (no empty receive after: the ledger knows)."""
        while self.ledger.outstanding[queue] > 0 and await self.take(queue, 0):
            pass

    async def visit(self, item: tuple[str, str]) -> None:
        await (self.drain_queue if item[0] == "drain" else self.empty_queue)(item[1])

    def sweep_order(self) -> tuple[list[tuple[str, str]], dict[str, int]]:
        """What the drain visits, not every queue one by one: each queue the ledger still has messages in
        (drained), a random sample of ``idle_sample`` of the queues that got messages and have none left
        (checked empty: a message deleted and back would show there), and as many queues that never got one
        (the cost of looking at an idle queue is a figure per request, and the server's memory is plotted
        against the queues it served: a sample shows both). Shuffled, so idle and busy queues mix."""
        ever = {q for q, _, _ in self.ledger.sent.values()}
        owed = sorted(q for q in ever if self.ledger.outstanding[q] > 0)
        done = sorted(ever.difference(owed))
        checked = self.rng.sample(done, min(self.size.idle_sample, len(done)))
        never = [q for q in self.names if q not in ever]
        idle = self.rng.sample(never, min(self.size.idle_sample, len(never)))
        order = [("drain", q) for q in owed] + [("check", q) for q in checked + idle]
        self.rng.shuffle(order)
        return order, {"swept_busy": len(owed), "checked": len(checked), "swept_idle": len(idle)}

    def recheck_order(self) -> list[tuple[str, str]]:
        """After a visibility timeout: the queues the ledger still has messages in (taken, not deleted:
        visible again now), and a fresh sample of the others that got messages, checked empty again."""
        ever = {q for q, _, _ in self.ledger.sent.values()}
        owed = {q for q in ever if self.ledger.outstanding[q] > 0}
        rest = sorted(ever - owed)
        return [("drain", q) for q in sorted(owed)] + [
            ("check", q) for q in self.rng.sample(rest, min(self.size.idle_sample, len(rest)))
        ]

    async def drain(self, deadline_s: float) -> dict[str, Any]:
        self.phase = "drain"
        t0 = time.time()
        order, counts = self.sweep_order()
        await bounded(order, self.size.drain_concurrency, self.visit)
        sweep_s = time.time() - t0
        # anything taken and not deleted (lost responses around the kill) is visible again after this:
        await asyncio.sleep(self.size.visibility_s + 1)
        passes = 1
        again = self.recheck_order()
        await bounded(again, self.size.drain_concurrency, self.visit)
        t1 = time.time()
        while any(v > 0 for v in self.ledger.outstanding.values()) and time.time() - t1 < deadline_s:
            passes += 1
            await asyncio.sleep(1.0)
            owed = [("drain", q) for q, v in self.ledger.outstanding.items() if v > 0]
            await bounded(owed, self.size.drain_concurrency, self.visit)
        return {
            "sweep_seconds": sweep_s,
            "swept": len(order),
            **counts,
            "seconds": time.time() - t0,
            "extra_passes": passes,
            "queues_rechecked": len(again),
        }

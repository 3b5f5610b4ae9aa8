"""The many-queues scenario (issue 17): per-user queues, most of them idle, each pulled by its owner.

    python -m bench many-queues [--quick] [--write-docs]

1. **create** N tiny queues (1 shard, 1 bucket) from Python: ``Casque.create_queues`` when the engine has
   it, else ``create_queue``, 64 at a time; the rate, the p99 of one queue's write,
   and the ``queues`` table's size on disk (``nodetool flush`` + ``tablestats`` before and after).
2. **fill** M messages spread Zipf-like over the queues (weight 1/rank, ranks shuffled), with
   ``send_many`` per queue.
3. **serve**: one ``casque serve`` process (bench/many_queues_serve.py charges its CQL to each SQS
   request); U users, each an asyncio task of this process long-polling its own queue over HTTP and
   deleting what it got, while producers send to random queues (half to online owners, half Zipf
   over all). Halfway through, the server is killed with SIGKILL and started again on its port.
   Why this shape: SQS clients reach one serving process per host, and long polls park in that
   process (woken by the sends it serves); on 2 cores one server plus one client process is what
   fits, where a process per user would measure the machine's scheduler, not casque.
4. **drain**: every queue is visited with a short receive (the cost of looking at an idle queue,
   and the server's memory as the number of queues it has seen grows to N), then, once the
   visibility timeout of anything taken before has passed, every queue that got a message is
   visited again until the ledger has every message deleted.

The ledger lives in this process: a message's body is its ledger id and send time; sent = a send
the server acknowledged; deleted = a DeleteMessageBatch entry reported successful; lost = sent and
never deleted; duplicates = deliveries beyond the first. Results: bench/out/many-queues-<mode>.json,
the plot bench/out/bench-many-queues-rss.png, the section between the many-queues markers of
docs/benchmarks.md (with --write-docs) or bench/out/report-many-queues-<mode>.md.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .env import KEYSPACE, ROOT, cpu_seconds, out_dir, progress
from .sqs_json import ServerGone, SqsJson

TINY = {"shards": 1, "buckets": 1, "max_attempts": 1000}  # docs/design.md "Many queues": a tiny queue


@dataclass(frozen=True)
class Size:
    name: str
    queues: int
    messages: int  # the fill
    users: int  # online owners, one long-polling task each
    live_s: float  # how long users and producers run (the kill falls at half)
    send_rate: float  # producers' sends per second during the live phase
    wait_s: int = 5  # WaitTimeSeconds of a user's long poll
    visibility_s: int = 8
    create_concurrency: int = 64
    zipf_s: float = 1.0
    drain_concurrency: int = 48
    kill: bool = True
    #: the server's [cache] limits (engine's LRU bounds), lowered at small sizes so that the run
    #: passes them and shows memory levelling off; empty: the defaults
    cache: tuple[tuple[str, int], ...] = ()


QUICK = Size(
    "quick",
    queues=5_000,
    messages=5_000,
    users=200,
    live_s=30,
    send_rate=40,
    cache=(("queues", 1000), ("consumers", 250), ("activity", 1000)),
)
FULL = Size(
    "full",
    queues=1_000_000,
    messages=1_000_000,
    users=20_000,
    live_s=600,
    send_rate=300,
    wait_s=20,
    visibility_s=30,
    drain_concurrency=128,
)
TEST = Size(
    "test",
    queues=400,
    messages=400,
    users=20,
    live_s=8,
    send_rate=20,
    wait_s=2,
    visibility_s=3,
    drain_concurrency=16,
    cache=(("queues", 100), ("consumers", 50), ("activity", 100)),
)
#: the same path with 5 users and no kill: send→receive when the bench itself loads neither the server nor the node
LIGHT = Size("light", queues=50, messages=10, users=5, live_s=20, send_rate=5, wait_s=5, kill=False)
SIZES = {s.name: s for s in (QUICK, FULL, TEST, LIGHT)}


# --------------------------------------------------------------------------- the ledger


@dataclass
class Ledger:
    sent: dict[str, tuple[str, float, bool]] = field(
        default_factory=dict
    )  # id -> (queue, send time, to an online owner)
    engine_id: dict[str, str] = field(default_factory=dict)  # ledger id -> casque's message id (to look a lost one up)
    outstanding: Counter = field(default_factory=Counter)  # queue -> sent and not yet deleted
    deliveries: Counter = field(default_factory=Counter)  # id -> times a client received it
    first_seen: dict[str, float] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    deleted_twice: int = 0
    unknown: int = 0  # bodies that are no ledger id of this run

    def send(self, mid: str, queue: str, at: float, online: bool, engine_id: str) -> None:
        self.engine_id[mid] = engine_id
        if mid not in self.sent:
            self.sent[mid] = (queue, at, online)
            if mid not in self.deleted:  # a fast owner can receive and delete before the send's answer arrives
                self.outstanding[queue] += 1

    def receive(self, body: str, now: float) -> str | None:
        mid = body.split(" ", 1)[0]
        if mid not in self.sent and not mid.startswith(("f", "l")):
            self.unknown += 1
            return None
        self.deliveries[mid] += 1
        self.first_seen.setdefault(mid, now)
        return mid

    def delete(self, mid: str) -> None:
        if mid in self.deleted:
            self.deleted_twice += 1
            return
        self.deleted.add(mid)
        entry = self.sent.get(mid)
        if entry is not None:
            self.outstanding[entry[0]] -= 1

    def summary(self) -> dict[str, Any]:
        lost = [m for m in self.sent if m not in self.deleted]
        return {
            "sent": len(self.sent),
            "deleted": len(self.deleted & self.sent.keys()),
            "lost": len(lost),
            "lost_sample": lost[:10],
            "duplicate_deliveries": sum(n - 1 for n in self.deliveries.values() if n > 1),
            "deleted_twice": self.deleted_twice,
            "received_not_sent": len(self.deliveries.keys() - self.sent.keys()),
            "unknown_bodies": self.unknown,
        }


# --------------------------------------------------------------------------- small helpers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def pct(samples: list[float], q: float) -> float | None:
    if not samples:
        return None
    s = sorted(samples)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def zipf_cum(n: int, s: float) -> list[float]:
    return list(itertools.accumulate(1.0 / (r**s) for r in range(1, n + 1)))


def raise_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need <= hard or (soft < hard and need > hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft < need:
        raise SystemExit(
            f"bench: {need} open files needed (one connection per user) but the limit is {soft}: raise it (ulimit -n "
            f"{need * 2})"
        )


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


async def bounded(items: Iterable[Any], concurrency: int, one: Callable[[Any], Awaitable[None]]) -> None:
    it = iter(items)

    async def worker() -> None:
        for item in it:
            await one(item)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def table_stats(keyspace: str) -> dict[str, int]:
    """The queues table after a flush: bytes on disk (live) and the partition estimate."""
    casque = [sys.executable, "-m", "daemon.cli", "cassandra", "nodetool"]
    subprocess.run(casque + ["flush", keyspace, "queues"], cwd=ROOT, capture_output=True, timeout=300)
    out = subprocess.run(
        casque + ["tablestats", f"{keyspace}.queues"], cwd=ROOT, capture_output=True, text=True, timeout=300
    ).stdout
    found: dict[str, int] = {}
    for key, label in (("bytes", "Space used (live)"), ("partitions", "Number of partitions (estimate)")):
        m = re.search(rf"{re.escape(label)}: (\d+)", out)
        if m:
            found[key] = int(m.group(1))
    return found


# --------------------------------------------------------------------------- 1. create


async def create(cq: Any, names: list[str], size: Size) -> dict[str, Any]:
    """Create the queues: one streaming ``create_queues`` call if the engine has it, else
    ``create_queue`` ``create_concurrency`` at a time. Each queue's write (``QueueStore.create``,
    an LWT) is timed by wrapping it on this client, so the p99 is per queue either way."""
    took: list[float] = []
    store = cq.queues
    write = store.create

    async def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return await write(*args, **kwargs)
        finally:
            took.append((time.perf_counter() - t) * 1000)

    store.create = timed
    bulk = getattr(cq, "create_queues", None)
    t0 = time.perf_counter()
    try:
        if bulk is not None:
            step = max(1, len(names) // 10)
            await bulk(
                iter(names),
                if_missing=True,
                concurrency=size.create_concurrency,
                **TINY,
                progress=lambda done, _: done % step == 0 and progress(f"  {done:,} queues created"),
            )
        else:
            await bounded(names, size.create_concurrency, lambda n: cq.create_queue(n, if_missing=True, **TINY))
    finally:
        del store.create  # back to the class's method
    seconds = time.perf_counter() - t0
    return {
        "queues": len(names),
        "seconds": seconds,
        "rate": len(names) / seconds,
        "api": "create_queues" if bulk else "create_queue",
        "per": "queue (its LWT)",
        "p50_ms": pct(took, 50),
        "p99_ms": pct(took, 99),
        "max_ms": max(took) if took else None,
        "concurrency": size.create_concurrency,
        "settings": TINY,
    }


# --------------------------------------------------------------------------- 2. fill


async def fill(cq: Any, names: list[str], cum: list[float], size: Size, ledger: Ledger) -> dict[str, Any]:
    from daemon.engine.send.producer import Job

    rng = random.Random(17)
    counts = Counter(rng.choices(range(len(names)), cum_weights=cum, k=size.messages))
    ids = itertools.count()
    t0 = time.perf_counter()

    async def one(item: tuple[int, int]) -> None:
        q, n = names[item[0]], item[1]
        for start in range(0, n, 500):
            now = time.time()
            mids = [f"f{next(ids)}" for _ in range(min(500, n - start))]
            eids = await cq.send_many(q, [Job("sqs", f"{m} {now:.6f}") for m in mids])
            for m, eid in zip(mids, eids):
                ledger.send(m, q, now, False, eid)

    await bounded(sorted(counts.items()), 64, one)
    seconds = time.perf_counter() - t0
    top = counts.most_common(1)[0][1] if counts else 0
    return {
        "messages": size.messages,
        "queues_with_messages": len(counts),
        "largest_queue": top,
        "seconds": seconds,
        "rate": size.messages / seconds,
        "zipf_s": size.zipf_s,
    }


# --------------------------------------------------------------------------- 3. serve


class Server:
    """The ``casque serve`` process under test (wrapped by bench.many_queues_serve), on a fixed port
    so that it comes back at the same address after a kill."""

    def __init__(self, keyspace: str, workdir: Path, cache: dict[str, int]) -> None:
        self.keyspace, self.workdir, self.port, self.cache = keyspace, workdir, free_port(), cache
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
        env.update({f"CASQUE_CACHE__{k.upper()}": str(v) for k, v in self.cache.items()})
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
        while await self.take(queue, 0):
            pass
        self.empty_drain_receives += 1

    async def drain(self, deadline_s: float) -> dict[str, Any]:
        self.phase = "drain"
        t0 = time.time()
        order = list(self.names)
        self.rng.shuffle(order)
        await bounded(order, self.size.drain_concurrency, self.empty_queue)
        sweep_s = time.time() - t0
        # anything taken and not deleted (lost responses around the kill) is visible again after this:
        await asyncio.sleep(self.size.visibility_s + 1)
        passes = 1
        ever = sorted({q for q, _, _ in self.ledger.sent.values()})
        await bounded(ever, self.size.drain_concurrency, self.empty_queue)
        t1 = time.time()
        while any(v > 0 for v in self.ledger.outstanding.values()) and time.time() - t1 < deadline_s:
            passes += 1
            await asyncio.sleep(1.0)
            await bounded(
                [q for q, v in self.ledger.outstanding.items() if v > 0], self.size.drain_concurrency, self.empty_queue
            )
        return {
            "sweep_seconds": sweep_s,
            "seconds": time.time() - t0,
            "extra_passes": passes,
            "queues_rechecked": len(ever),
        }


# --------------------------------------------------------------------------- the whole scenario


def reads_figures(server: Server) -> dict[str, Any]:
    """CQL per SQS request, summed over the server's processes (the killed one up to its last write)."""
    total = {k: [0, 0, 0] for k in ("receive", "empty_long_poll", "empty_receive", "send", "delete", "other")}
    cql_requests = cql_reads = 0
    for s in server.finished:
        cql_requests += s.get("cql_requests", 0)
        cql_reads += s.get("cql_reads", 0)
        for k, v in (s.get("tally") or {}).items():
            total[k] = [a + b for a, b in zip(total[k], v)]
    per = {
        k: {
            "requests": v[0],
            "cql_per_request": v[1] / v[0] if v[0] else None,
            "reads_per_request": v[2] / v[0] if v[0] else None,
        }
        for k, v in total.items()
    }
    charged = sum(v[2] for v in total.values())
    last = server.finished[-1] if server.finished else {}
    return {
        "by_kind": per,
        "cql_requests": cql_requests,
        "cql_reads": cql_reads,
        "reads_outside_requests": cql_reads - charged,
        "cql_latency_ms": last.get("cql_latency_ms", {}),
    }


def latency_figures(ledger: Ledger, kill_at: float | None, back_at: float | None, wait_s: int) -> dict[str, Any]:
    """send → first receive of live messages to online owners; "calm" leaves out those sent while a
    poll that the kill cut off could have held them (they come back only after the visibility timeout)."""
    every, calm = [], []
    for mid, (_, at, online) in ledger.sent.items():
        if not online or mid not in ledger.first_seen:
            continue
        ms = (ledger.first_seen[mid] - at) * 1000
        every.append(ms)
        near_kill = kill_at is not None and back_at is not None and kill_at - wait_s - 1 <= at <= back_at + 1
        if not near_kill:
            calm.append(ms)
    return {
        "count": len(every),
        "p50_ms": pct(every, 50),
        "p99_ms": pct(every, 99),
        "max_ms": max(every) if every else None,
        "calm_count": len(calm),
        "calm_p50_ms": pct(calm, 50),
        "calm_p99_ms": pct(calm, 99),
    }


def cpu_share(samples: list[Sample], phase: str) -> float | None:
    """The server's CPU use in a phase, in % of one core (each process's samples counted apart)."""
    cpu = wall = 0.0
    for inc in {s.incarnation for s in samples}:
        mine = [s for s in samples if s.incarnation == inc and s.phase == phase]
        if len(mine) > 1:
            cpu += mine[-1].cpu_s - mine[0].cpu_s
            wall += mine[-1].t - mine[0].t
    return 100 * cpu / wall if wall else None


def rss_figures(samples: list[Sample]) -> dict[str, Any]:
    """The last incarnation's RSS as the queues it has seen grow: the drain sweep takes it to N."""
    if not samples:
        return {}
    last = [s for s in samples if s.incarnation == samples[-1].incarnation]
    top = max(s.touched for s in last) or 1
    at: dict[str, Any] = {}
    for frac in (0.25, 0.5, 0.75, 1.0):
        near = [s.rss_mb for s in last if s.touched >= frac * top]
        at[f"{int(frac * 100)}%"] = near[0] if near else None
    half, full = at.get("50%"), at.get("100%")
    return {
        "cpu_pct": {phase: cpu_share(samples, phase) for phase in ("live", "drain")},
        "queues_touched": top,
        "rss_mb_at": at,
        "growth_second_half_mb": (full - half) if half is not None and full is not None else None,
        "peak_mb": max(s.rss_mb for s in samples),
        "samples": [asdict(s) for s in samples],
    }


async def scenario(size: Size, keyspace: str = KEYSPACE, measure_table: bool = True) -> dict[str, Any]:
    from daemon.base.config import load_settings
    from daemon.engine.client import Casque
    from daemon.engine.storage.db import Database
    from daemon.engine.storage.schema import apply_schema

    raise_fd_limit(size.users + size.drain_concurrency + 256)
    settings = load_settings(env={k: v for k, v in os.environ.items() if not k.startswith("CASQUE_")})
    settings.cassandra.keyspace = keyspace
    settings.log.level = "warning"
    db = Database(settings.cassandra).connect()
    try:
        apply_schema(db, keyspace, settings.schema)
    finally:
        db.close()
    stamp = f"mq{int(time.time()) % 10_000_000}_{random.randrange(1000):03d}"
    names = [f"{stamp}_{i:07d}" for i in range(size.queues)]
    cum = zipf_cum(size.queues, size.zipf_s)
    rng = random.Random(7)
    rng.shuffle(names)  # Zipf rank is not the name order
    R: dict[str, Any] = {
        "size": asdict(size),
        "keyspace": keyspace,
        "prefix": stamp,
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    ledger = Ledger()
    cq = await Casque.connect(settings)
    workdir = out_dir("many-queues", stamp)
    cache = dict(size.cache) if hasattr(settings, "cache") else {}  # an engine without LRU limits has no [cache]
    R["server_cache"] = cache
    server = Server(keyspace, workdir, cache)
    try:
        before = await asyncio.to_thread(table_stats, keyspace) if measure_table else {}
        progress(f"many-queues {size.name}: creating {size.queues:,} tiny queues")
        R["create"] = await create(cq, names, size)
        progress(
            f"  {R['create']['rate']:,.0f} queues/s ({R['create']['api']}), p99 {R['create']['p99_ms']:.1f} ms per "
            f"{R['create']['per']}"
        )
        if measure_table:
            after = await asyncio.to_thread(table_stats, keyspace)
            # bytes ÷ partitions at one moment: compaction between two measurements (the keyspace is
            # shared with earlier runs, whose deleted rows it purges) makes a before/after difference meaningless
            per = after["bytes"] / after["partitions"] if after.get("bytes") and after.get("partitions") else None
            R["table"] = {"before": before, "after": after, "bytes_per_partition": per}
        progress(f"  filling {size.messages:,} messages, Zipf s={size.zipf_s}")
        R["fill"] = await fill(cq, names, cum, size, ledger)
        progress(
            f"  {R['fill']['rate']:,.0f} msg/s into {R['fill']['queues_with_messages']:,} queues (largest "
            f"{R['fill']['largest_queue']:,})"
        )
        await server.start()
        run = Run(server, names, cum, size, ledger)
        sampler = asyncio.create_task(run.sampler())
        try:
            progress(
                f"  serving: {size.users:,} users long-polling, producers at {size.send_rate:g} msg/s for "
                f"{size.live_s:g}s"
            )
            R["live"] = await run.live()
            progress(f"  draining every queue ({size.queues:,})")
            R["drain"] = await run.drain(deadline_s=3 * size.visibility_s + 60)
        finally:
            sampler.cancel()
            server.stop()
            await run.client.close()
        R["kill"] = {
            "done": run.kill_at is not None,
            "down_s": (run.back_at - run.kill_at) if run.kill_at and run.back_at else None,
            "client_retries": run.retries,
        }
        R["ledger"] = ledger.summary()
        R["latency"] = latency_figures(ledger, run.kill_at, run.back_at, size.wait_s)
        R["reads"] = reads_figures(server)
        R["rss"] = rss_figures(run.samples)
        R["empty_receives_in_drain"] = run.empty_drain_receives
        if ledger.summary()["lost"]:
            R["lost_lookup"] = await look_up_lost(cq, ledger)  # the queues stay, for a closer look
        else:
            await cleanup(cq, names)
    finally:
        server.stop()
        await cq.close()
    R["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return R


async def look_up_lost(cq: Any, ledger: Ledger, at_most: int = 50) -> list[dict[str, Any]]:
    """Where the lost messages are: still stored (in which state, attempt, due) or gone."""
    out = []
    for mid in [m for m in ledger.sent if m not in ledger.deleted][:at_most]:
        queue = ledger.sent[mid][0]
        m = await cq.get(queue, ledger.engine_id[mid])
        out.append(
            {
                "id": mid,
                "queue": queue,
                "engine_id": ledger.engine_id[mid],
                "deliveries": ledger.deliveries[mid],
                "stored": m is not None,
                **({"state": m.state, "attempt": m.attempt, "due_ms": m.due_ms} if m else {}),
            }
        )
    return out


async def cleanup(cq: Any, names: list[str]) -> None:
    """The queue rows go (their messages are drained and expire by TTL): runs don't pile up rows."""
    await bounded(names, 64, lambda n: cq.queues.delete(n))


def headline(R: dict[str, Any]) -> str:
    led, lat, rd, rss = R["ledger"], R["latency"], R["reads"]["by_kind"], R["rss"]
    f = lambda x, d=1: "–" if x is None else f"{x:,.{d}f}"  # noqa: E731
    return (
        f"sent {led['sent']:,}, lost {led['lost']}, duplicate deliveries {led['duplicate_deliveries']}; "
        f"send→receive p50 {f(lat['p50_ms'])} / p99 {f(lat['p99_ms'])} ms; reads per receive "
        f"{f(rd['receive']['reads_per_request'], 2)}, "
        f"per empty long poll {f(rd['empty_long_poll']['reads_per_request'], 2)}, per idle short receive "
        f"{f(rd['empty_receive']['reads_per_request'], 2)}; "
        f"RSS {f(rss.get('rss_mb_at', {}).get('50%'))} → {f(rss.get('rss_mb_at', {}).get('100%'))} MB over the second "
        "half of "
        f"{rss.get('queues_touched', 0):,} queues"
    )


def full_estimate_min(R: dict[str, Any]) -> float:
    """Minutes the full size would take on this machine, from this run's rates (linear in size:
    create, fill and the drain sweep scale with the queue and message counts, the live phase is fixed)."""
    create_s = FULL.queues / R["create"]["rate"]
    fill_s = FULL.messages / R["fill"]["rate"]
    sweep_s = FULL.queues * R["drain"]["sweep_seconds"] / R["size"]["queues"]
    return (create_s + fill_s + FULL.live_s + 2 * sweep_s + FULL.visibility_s) / 60

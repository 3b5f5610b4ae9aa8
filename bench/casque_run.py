"""One measured casque run: a fresh queue, one daemon process, N no-op messages, one result.

Throughput is N / (last ack written − first send call), both wall-clock times on this machine.
Latency is send→handler-start per message. CPU seconds of the daemon and of the Cassandra node
(from /proc) and the CQL the producer and the daemon issued are kept with the result.
"""

from __future__ import annotations

import asyncio
import resource
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from daemon.base.model import encode_payload
from daemon.engine.client import Casque
from daemon.engine.send.producer import Job

from . import cqlcount
from .daemonproc import Daemon, DaemonSpec
from .env import QUEUE_RETENTION_S, cpu_seconds, node_pid, progress
from .probe import TASK
from .produce import Sender, Sent, send_fast, send_paced
from .stats import Latency


@dataclass
class RunResult:
    system: str
    label: str
    n: int
    throughput: float
    send_rate: float
    latency: Latency
    duration_s: float
    settings: dict[str, Any] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    cql: dict[str, Any] = field(default_factory=dict)
    samples_ms: list[float] = field(default_factory=list)
    offered_rate: float | None = None
    probe: dict[str, Any] = field(default_factory=dict)  # more of what the probe measured, when asked (``keep``)

    def as_dict(self, with_samples: bool = False) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "samples_ms"}
        d["latency"] = self.latency.as_dict()
        if with_samples:
            d["samples_ms"] = self.samples_ms
        return d


def casque_sender(cq: Casque, queue: str, extra: dict[str, Any] | None = None) -> Sender:
    async def send(count: int, t: float) -> None:
        payload = {"t": t, **(extra or {})}
        await cq.send_many(queue, [Job(TASK, payload) for _ in range(count)])

    return send


def new_queue_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


async def make_queue(cq: Casque, prefix: str, **options: Any) -> str:
    name = new_queue_name(prefix)
    options.setdefault("retention", QUEUE_RETENTION_S)
    await cq.create_queue(name, **options)
    return name


async def run_casque(
    cq: Casque,
    n: int,
    consumers: int,
    batch: int,
    *,
    label: str,
    rate: float | None = None,
    daemon_extra: dict[str, Any] | None = None,
    concurrency: int | None = None,
    on_started: Any = None,
    timeout: float | None = None,
    count_cql: bool = True,
    probe_env: dict[str, str] | None = None,
    keep: tuple[str, ...] = (),
    warmup: int = 0,
) -> RunResult:
    """Start a daemon on a fresh queue, send ``n`` messages (as fast as possible, or at ``rate``/s),
    wait until all are acked. ``probe_env`` turns on more of the probe; ``keep`` names what of its
    result file to return in ``RunResult.probe``. ``warmup``: first send that many messages (their
    latency not recorded) and wait until they are acked, as bench/peers.py does for every peer."""
    queue = await make_queue(cq, "e2e")
    env = {"BENCH_PROBE_CQL": "1" if count_cql else "0", **(probe_env or {})}
    if concurrency:
        env["BENCH_PROBE_CONCURRENCY"] = str(concurrency)
    spec = DaemonSpec(queue, consumers, batch, expect=n + warmup, extra=daemon_extra, env=env)
    daemon = await Daemon(spec, label).start()
    try:
        if warmup:
            await warm_up(cq, queue, daemon, warmup)
    except BaseException:
        daemon.stop()
        raise
    npid = node_pid()
    node_cpu0 = cpu_seconds([npid]) if npid else 0.0
    counts0 = cqlcount.snapshot()
    self0 = resource.getrusage(resource.RUSAGE_SELF)
    try:
        if on_started is not None:
            await on_started(daemon)
        send = casque_sender(cq, queue)
        sent: Sent = await (send_fast(send, n) if rate is None else send_paced(send, n, rate))
        budget = timeout if timeout is not None else max(120.0, n / 300.0)
        res = await daemon.wait(budget)
    finally:
        daemon.stop()
    node_cpu = (cpu_seconds([npid]) - node_cpu0) if npid else 0.0
    self1 = resource.getrusage(resource.RUSAGE_SELF)
    producer_cpu = (self1.ru_utime + self1.ru_stime) - (self0.ru_utime + self0.ru_stime)  # this process: the producer
    acked = int(res.get("acked", 0)) - warmup
    if acked < n:
        progress(f"  warning: {label}: only {acked} of {n} acked before the time limit")
    end = float(res.get("last_ack") or time.time())
    duration = end - sent.first
    samples = [float(x) for x in res.get("send_ms", [])]
    producer = _delta(counts0, cqlcount.COUNTS)
    return RunResult(
        system="casque",
        label=label,
        n=n,
        throughput=acked / duration if duration > 0 else 0.0,
        send_rate=sent.rate,
        latency=Latency.of(samples),
        duration_s=duration,
        offered_rate=rate,
        settings={
            "consumers": consumers,
            "batch_size": batch,
            **({"handler_concurrency": concurrency} if concurrency else {}),
            **(daemon_extra or {}),
        },
        cpu={"daemon_s": float(res.get("cpu_s", 0.0)), "node_s": node_cpu, "producer_s": producer_cpu},
        cql={
            "daemon": res.get("cql", {}),
            "producer": producer,
            "acked": acked,
            "payload_bytes": len(encode_payload({"t": time.time()}, 1 << 20)),  # what one message carries
        },
        samples_ms=samples,
        probe={k: res[k] for k in keep if k in res},
    )


async def warm_up(cq: Casque, queue: str, daemon: Daemon, count: int, timeout: float = 120.0) -> None:
    """Send ``count`` messages whose send time is 0 (the probe records no latency for them) and wait
    until the daemon has acked them all. A daemon measured from its ``worker_ready`` line still does
    its start-up work while the first messages come: every consumer goes round every shard until
    wake hints flow, and the first depth count reads every row (measured at 304 msg/s: ~45 take reads
    per 50 ms instead of ~15 for the first 0.2 s, those messages 26-43 ms late against a p50 of 7.6,
    28 of the slowest 2 % of an 8 s run). The peers get 200 such messages before their clock starts."""
    await cq.send_many(queue, [Job(TASK, {"t": 0.0}) for _ in range(count)])
    deadline = time.monotonic() + timeout
    while daemon.acked() < count:
        if daemon.proc is not None and daemon.proc.poll() is not None:
            raise RuntimeError(f"the casque daemon exited during the warm-up: see {daemon.log}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"casque: warm-up messages still unacked after {timeout:.0f}s: see {daemon.log}")
        await asyncio.sleep(0.05)  # the probe rewrites its ack count every 0.2 s


def _delta(before: cqlcount.CqlCounts, after: cqlcount.CqlCounts) -> dict[str, Any]:
    """What the producer issued during one run (the counter is process-wide)."""
    d = after.as_dict()
    b = before.as_dict()
    out: dict[str, Any] = {k: d[k] - b[k] for k in d if k not in ("by_statement", "by_caller", "latency")}
    out["by_statement"] = {
        k: v - b["by_statement"].get(k, 0) for k, v in d["by_statement"].items() if v - b["by_statement"].get(k, 0)
    }
    return out

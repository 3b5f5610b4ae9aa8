"""Per-daemon metrics in the Prometheus format, and the HTTP endpoint that serves them.

    GET /metrics   Prometheus text format
    GET /healthz   200 while the event loop answers (liveness)
    GET /readyz    200 once connected and serving, 503 before that and while draining

Counters are by queue and task. Nothing here touches Cassandra: these are this daemon's own
numbers; ``casque stats`` gives the queue's numbers read from Cassandra.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from daemon.base.config import MetricsSettings
from daemon.base.errors import ConfigError
from daemon.base.logs import get_logger
from daemon.base.model import Message

log = get_logger("casque.metrics")
REGISTRY = CollectorRegistry(auto_describe=True)
_QT = ["queue", "task"]

SENT = Counter("casque_sent", "Messages sent by this process", _QT, registry=REGISTRY)
RECEIVED = Counter("casque_received", "Deliveries taken from the queue", _QT, registry=REGISTRY)
ACKED = Counter("casque_acked", "Messages whose handler succeeded", _QT, registry=REGISTRY)
RETRIED = Counter("casque_retried", "Failures put back for another attempt", _QT, registry=REGISTRY)
POISONED = Counter("casque_poisoned", "Messages moved to the poison queue", _QT, registry=REGISTRY)
TIMED_OUT = Counter("casque_timed_out", "Handlers cancelled at their timeout", _QT, registry=REGISTRY)
CONTENTION = Counter("casque_lock_contention", "Shard-row locks found busy", ["queue"], registry=REGISTRY)
SWEPT = Counter(
    "casque_swept",
    "Messages the sweep found below a row's cursor and put back within reach",
    ["queue"],
    registry=REGISTRY,
)
EMPTY_POLLS = Counter(
    "casque_empty_polls", "Full rounds over a queue's shards that found nothing due", ["queue"], registry=REGISTRY
)
TAKE_ROUND_TRIPS = Histogram(
    "casque_take_round_trips",
    "Sequential CQL round trips of a fetch that took messages, from its first read",
    ["queue"],
    registry=REGISTRY,
    buckets=(1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32),
)
HELD_ROWS = Gauge(
    "casque_held_rows",
    "Shard rows whose lock this daemon keeps between takes (engine/take/holds.py)",
    ["queue"],
    registry=REGISTRY,
)
HANDLER_SECONDS = Histogram(
    "casque_handler_seconds",
    "Handler run time",
    _QT,
    registry=REGISTRY,
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120),
)
LATENESS_SECONDS = Histogram(
    "casque_lateness_seconds",
    "Handler start minus due time",
    _QT,
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30),
)
HINTS_SENT = Counter(
    "casque_hints_sent", "Wake-hint datagrams sent to other processes after acknowledged sends", registry=REGISTRY
)
HINTS_SEND_FAILED = Counter(
    "casque_hints_send_failed",
    "Wake hints not sent (socket error, directory unreadable, over the per-send cap)",
    ["reason"],
    registry=REGISTRY,
)
HINTS_RECEIVED = Counter("casque_hints_received", "Valid wake-hint datagrams received", registry=REGISTRY)
HINTS_REJECTED = Counter(
    "casque_hints_rejected",
    "Datagrams dropped by the hint listener (version, truncated, signature, malformed, stale)",
    ["reason"],
    registry=REGISTRY,
)
QUEUES_GROWN = Counter(
    "casque_queues_grown",
    "Queues whose shards this process doubled (engine/operations/shard_growth.py)",
    registry=REGISTRY,
)
RECEIVES_JOINED = Counter(
    "casque_receives_joined",
    "Receives of a standard queue answered from their share of a group's joint take, not a take of their own "
    "(engine/delivery/joint_take.py)",
    registry=REGISTRY,
)
LOCKS_KEPT = Counter(
    "casque_locks_kept",
    "Takes that kept their row's lock for the receives waiting in line, whose take is then a read and a batch "
    "(engine/take/holds.py adopt)",
    registry=REGISTRY,
)
SENDS_CAUGHT = Counter(
    "casque_sends_caught",
    "Messages a send wrote in flight for a poll parked in this process and handed over (engine/wake/catch.py)",
    registry=REGISTRY,
)
CATCH_WRITES_FAILED = Counter(
    "casque_catch_writes_failed",
    "Writes of messages handed to a parked poll that failed: in doubt, such a message comes back after its "
    "visibility timeout if the write was applied (engine/wake/catch.py)",
    registry=REGISTRY,
)
IN_FLIGHT = Gauge("casque_in_flight", "Messages held by this daemon (running or waiting for a slot)", registry=REGISTRY)
CONSUMERS_BUSY = Gauge("casque_consumers_busy", "Consumer coroutines in the middle of a fetch", registry=REGISTRY)

_EVENTS = {"received": RECEIVED, "acked": ACKED, "retried": RETRIED, "poisoned": POISONED, "timed_out": TIMED_OUT}


_children: dict[tuple[str, str], dict[str, Any]] = {}


def _series(queue: str, task: str) -> dict[str, Any]:
    """Label lookups cost more than the increments: resolve each (queue, task) once."""
    found = _children.get((queue, task))
    if found is None:
        found = {name: c.labels(queue, task) for name, c in _EVENTS.items()}
        found["lateness"] = LATENESS_SECONDS.labels(queue, task)
        found["handler"] = HANDLER_SECONDS.labels(queue, task)
        _children[(queue, task)] = found
    return found


_PER_QUEUE = (
    SENT,
    RECEIVED,
    ACKED,
    RETRIED,
    POISONED,
    TIMED_OUT,
    CONTENTION,
    SWEPT,
    EMPTY_POLLS,
    TAKE_ROUND_TRIPS,
    HANDLER_SECONDS,
    LATENESS_SECONDS,
)


def forget_queues(queues: set[str]) -> None:
    """Drop every series of these queues (called, in batches, for queues that left this process's
    bounded caches): the series a process exports follow the queues active now, not every queue it
    ever touched. A queue that comes back starts its counters from 0, which rate() reads as a reset."""
    for metric in _PER_QUEUE:
        for labels in [k for k in list(metric._metrics) if k and k[0] in queues]:
            metric.remove(*labels)
    for key in [k for k in _children if k[0] in queues]:
        del _children[key]


def observe(event: str, m: Message, duration: float, now_ms: int) -> None:
    """The dispatcher's observer, called once per outcome (acked, retried, poisoned, timed_out):
    it also counts the reception and the lateness of the start, which the dispatcher recorded."""
    if event in ("received", "started"):
        return
    series = _series(m.queue, m.task)
    series["received"].inc()
    series[event].inc()
    if m.started_ms:
        series["lateness"].observe(max(0.0, (m.started_ms - (m.scheduled_ms or m.due_ms)) / 1000))
        series["handler"].observe(duration)


class MetricsServer:
    """A tiny asyncio HTTP/1.0 server: three GET paths, no dependencies, no threads."""

    def __init__(self, host: str, port: int, ready: Callable[[], bool]) -> None:
        self.host = host
        self.port = port
        self.ready = ready
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics_listening", url=f"http://{self.host}:{self.port}/metrics")

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=5)
            while (await asyncio.wait_for(reader.readline(), timeout=5)) not in (b"\r\n", b"\n", b""):
                pass
            status, ctype, body = self._route(request.decode("latin-1").split())
            head = (
                f"HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\nConnection: "
                "close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    def _route(self, parts: list[str]) -> tuple[str, str, bytes]:
        path = parts[1].split("?")[0] if len(parts) >= 2 else ""
        if len(parts) < 2 or parts[0] != "GET":
            return "405 Method Not Allowed", "text/plain", b"only GET\n"
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(REGISTRY)
        if path == "/healthz":
            return "200 OK", "text/plain", b"ok\n"
        if path == "/readyz":
            return (
                ("200 OK", "text/plain", b"ready\n")
                if self.ready()
                else ("503 Service Unavailable", "text/plain", b"not ready\n")
            )
        return "404 Not Found", "text/plain", b"try /metrics, /healthz or /readyz\n"


def bind_gauges(in_flight: Callable[[], float], busy: Callable[[], float]) -> None:
    IN_FLIGHT.set_function(in_flight)
    CONSUMERS_BUSY.set_function(busy)


def counter_value(counter: Any, *labels: str) -> float:
    """Read one labelled counter (for tests and the stats writer)."""
    return float(counter.labels(*labels)._value.get())


async def start_server(m: MetricsSettings, ready: Callable[[], bool]) -> MetricsServer | None:
    """The /metrics endpoint of a process (``casque run``, ``casque serve``) when ``metrics.enabled``."""
    if not m.enabled:
        return None
    server = MetricsServer(m.host, m.port, ready=ready)
    try:
        await server.start()
    except OSError as exc:
        raise ConfigError(
            f"metrics.port {m.port} on {m.host} cannot be used ({exc.strerror}): pick a free port or set "
            f"metrics.enabled = false"
        ) from None
    return server

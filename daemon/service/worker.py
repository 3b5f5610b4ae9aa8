"""``casque run``: the daemon's life, from connecting to draining.

    load config + handler modules -> connect, create the served queues if missing, read their settings, warm
    (again with backoff while Cassandra does not answer: service/startup.py) -> READY=1 -> dispatch until a signal
    -> drain -> exit

SIGTERM/SIGINT: stop pulling, let in-flight handlers finish within ``worker.drain_timeout``, write
their acks, exit 0; a second signal cancels them at once (exit 1) and they come back after their
timeout. SIGHUP re-reads the config file and applies what is safe to change live (log level, batch
size, poll intervals).
"""

from __future__ import annotations

import asyncio
import gc
import signal
from dataclasses import replace

from daemon import __version__
from daemon.base import metrics
from daemon.base.clock import SYSTEM_CLOCK, Clock
from daemon.base.config import Settings, load_settings
from daemon.base.errors import CasqueError, ConfigError
from daemon.base.logs import configure_logging, get_logger
from daemon.base.metrics import MetricsServer, start_server
from daemon.base.model import QueueSettings
from daemon.engine.client import Casque
from daemon.engine.cluster.heartbeats import this_process
from daemon.engine.consume.sweep import SWEEP_EVERY_S, Sweeper
from daemon.engine.observe.samples import DEPTH_EVERY_S
from daemon.engine.operations.reaper import QueueReaper
from daemon.engine.operations.stats import STATS_EVERY_S, Cursors, daemon_id
from daemon.engine.storage.table import all_rows
from daemon.service.dispatcher import Dispatcher
from daemon.service.hooks import Hooks
from daemon.service.observers import HistoryObserver, MetricsObserver
from daemon.service.queue_gauges import QueueGauges
from daemon.service.registry import Registry
from daemon.service.registry import registry as default_registry
from daemon.service.sdnotify import Notifier
from daemon.service.startup import start_when_ready

log = get_logger("casque.worker")


class Worker:
    def __init__(
        self,
        settings: Settings,
        queues: list[str] | None = None,
        concurrency: int | None = None,
        registry: Registry = default_registry,
        notifier: Notifier | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        worker = settings.worker
        if concurrency is not None:
            worker = replace(worker, consumers=concurrency)
        self.settings = replace(settings, worker=worker)
        self.queues = queues or list(worker.queues)  # empty: the handlers' queues, known once their modules load
        self.registry = registry
        self.clock = clock
        self.notifier = notifier or Notifier()
        self.cq: Casque | None = None
        self.dispatcher: Dispatcher | None = None
        self._signals = 0
        self._stop = asyncio.Event()
        self.serving = False
        self.daemon = daemon_id()
        self._queue_settings: dict[str, QueueSettings] = {}
        self._depth_cursors: dict[str, Cursors] = {}  # remembered between counts: one read per row, not two
        self._depths: dict[str, tuple[int, int, int]] = {}  # finished counts not yet written to a sample

    async def run(self, burst: bool = False) -> int:
        self.registry.load_modules(self.settings.worker.handler_modules)
        self.queues = self.queues or served_queues(self.settings, self.registry)
        self._install_signals()
        first = lambda cq: self._start_on(cq, burst)  # noqa: E731 - one attempt's first reads
        cq = await start_when_ready(self.settings, first, self._stop, self.notifier, self.clock)
        if cq is None:
            return 0  # asked to stop while still waiting for Cassandra
        assert self.dispatcher is not None and self.cq is cq
        metrics.bind_gauges(
            lambda: len(self.dispatcher.tasks) if self.dispatcher else 0,
            lambda: self.dispatcher.busy_consumers if self.dispatcher else 0,
        )
        server = await self._start_metrics()
        # What exists now (modules, the driver's metadata, prepared statements) lives as long as
        # the process: out of the collector's sight, a full collection walks only what serving
        # allocates, and a full collection holds up the loop (and the takes) for less time.
        gc.freeze()
        w = self.settings.worker
        tasks = ", ".join(self.registry.names())
        status = f"serving {', '.join(self.queues)} with {w.consumers} consumers per queue, tasks: {tasks}"
        log.info(
            "worker_ready",
            queues=self.queues,
            consumers=w.consumers,
            batch_size=w.batch_size,
            in_flight=w.in_flight,
            tasks=self.registry.names(),
            burst=burst,
        )
        self.notifier.ready(status)
        self.serving = True
        background = [
            asyncio.create_task(self._watchdog()),
            asyncio.create_task(self._stats_loop()),
            asyncio.create_task(self._sweep_loop()),
            asyncio.create_task(self._depth_loop()),
        ]
        if server is not None and self.settings.metrics.queue_gauges:
            m = self.settings.metrics
            gauges = QueueGauges(cq, self.daemon, m.queue_gauges_interval, only=m.queue_gauges_queues)
            background.append(asyncio.create_task(gauges.run(), name="casque-queue-gauges"))
        # one sweeper per cluster (a lease)
        expiry = QueueReaper(cq.stores, self.daemon, self.settings.worker.expiry_interval_ms)
        background.append(asyncio.create_task(expiry.run(), name="casque-queue-expiry"))
        try:
            await self.dispatcher.run(burst=burst)
            self.serving = False
            return await self._shutdown()
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await self._write_stats()
            await self.history.flush()
            if server is not None:
                await server.close()
            await cq.close()

    async def _start_on(self, cq: Casque, burst: bool) -> None:
        """One startup attempt on a fresh connection (service/startup.py makes it again while Cassandra does not
        answer): the served queues created if missing, their settings read, the dispatcher built and warmed."""
        self.cq, self.dispatcher = cq, None
        for q in self.queues:
            if await cq.create_queues([q], concurrency=1, fifo=_fifo(q)):
                log.info("queue_created", queue=q)
        # the daemon's own records, written where the console and 'casque stats' read them (engine/stores.py)
        st = cq.stores
        self.history, self.samples, self.heartbeats = st.history, st.samples, st.heartbeats
        self.heartbeat = this_process(self.queues, self.settings.worker.consumers, cq.clock.now_ms(), __version__)
        self._queue_settings = {q: await cq.queue_settings(q) for q in self.queues}
        own = [MetricsObserver(cq.clock), HistoryObserver(self.history, cq.clock, self._queue_settings.get)]
        dispatcher = Dispatcher(
            cq, self.registry, self.settings.worker, self.queues, hooks=Hooks(own + self.registry.middleware)
        )
        if self.settings.hints.listen:
            await cq.listen_for_hints(self.queues)  # other processes' sends wake our consumers at once
        await dispatcher.warm(burst)
        self.dispatcher = dispatcher
        if self._stop.is_set():  # a signal came during the attempt: the dispatcher starts stopping
            dispatcher.stopping.set()

    async def _start_metrics(self) -> MetricsServer | None:
        return await start_server(self.settings.metrics, ready=lambda: self.serving)

    async def _stats_loop(self) -> None:
        """At once (the first heartbeat), then every 10 s: refresh the served queues' settings and
        write this daemon's stats rows."""
        while True:
            await self._write_stats()
            await asyncio.sleep(STATS_EVERY_S)

    async def _depth_loop(self) -> None:
        """Count each served queue's depth (every row, from its cursors) about every
        DEPTH_EVERY_S, one row at a time: at once on start, later spread over half the interval
        with a pause after each row: counted many rows at once, a whole queue's rows hold up the
        takes sharing the process and the node. The rows are counted at slightly different
        moments, so the figure is the depth over the count's duration, not a snapshot."""
        assert self.cq is not None
        spread = 0.0  # the first count: as soon as it can, one read in flight
        while True:
            started = asyncio.get_running_loop().time()
            for q in self.queues:
                try:
                    qs = await self.cq.queue_settings(q)
                    rows = max(1, sum(1 for _ in all_rows(qs)))
                    d = await self.cq.observe.depth(
                        qs,
                        self.cq.clock.now_ms(),
                        parallel=1,
                        cursors=self._depth_cursors.setdefault(q, {}),
                        pace_s=spread / rows / len(self.queues),
                    )
                    self._depths[q] = (d.waiting_due, d.scheduled, d.in_flight)
                except CasqueError as exc:
                    log.warning("depth_not_counted", queue=q, error=str(exc))
            spread = DEPTH_EVERY_S / 2
            await asyncio.sleep(max(1.0, DEPTH_EVERY_S - (asyncio.get_running_loop().time() - started)))

    async def _sweep_loop(self) -> None:
        """Every 30 s: the low-watermark sweep of each served queue (engine/consume/sweep.py), which finds
        messages left below a cursor; a failed pass is logged and tried again next time."""
        assert self.dispatcher is not None
        sweepers = [Sweeper(c) for c in self.dispatcher.consumers.values()]
        while True:
            await asyncio.sleep(SWEEP_EVERY_S)
            for sweeper in sweepers:
                try:
                    await sweeper.sweep()
                except CasqueError as exc:
                    log.warning("sweep_failed", queue=sweeper.consumer.queue, error=str(exc))

    async def _write_stats(self) -> None:
        """This daemon's heartbeat; then per served queue the counters, and the depth when a new
        count has finished."""
        if self.cq is None or self.dispatcher is None:
            return
        now = self.cq.clock.now_ms()
        try:
            self.heartbeat.heartbeat, self.heartbeat.in_flight = now, len(self.dispatcher.tasks)
            await self.heartbeats.beat(self.heartbeat)  # first: peers split the shards by it, a count must not delay it
            for q in self.queues:
                self._queue_settings[q] = await self.cq.queue_settings(q)
                self.cq.served(q)  # a served queue is polled: active, like a receive (idle expiry)
                c, cs = self.dispatcher.per_queue[q], self.dispatcher.consumers[q].stats
                depth = self._depths.pop(q, None)  # the latest count, once (_depth_loop)
                await self.samples.write(
                    q, now, self.daemon, c, cs.contention, cs.empty_polls, len(self.dispatcher.tasks), depth
                )
        except CasqueError as exc:
            log.warning("stats_write_failed", error=str(exc))

    async def _shutdown(self) -> int:
        assert self.dispatcher is not None
        in_flight = len(self.dispatcher.tasks)
        self.notifier.stopping(f"draining {in_flight} in-flight messages")
        log.info("worker_draining", in_flight=in_flight, drain_timeout=self.settings.worker.drain_timeout_ms / 1000)
        if self._signals > 1:
            await self.dispatcher.abort()
            log.warning("worker_stopped_at_once", cancelled=in_flight)
            return 1
        drained = await self.dispatcher.drain(self.settings.worker.drain_timeout_ms)
        if self._signals > 1:
            log.warning("worker_stopped_at_once", cancelled=in_flight)
            return 1
        c = self.dispatcher.counters
        log.info(
            "worker_stopped",
            drained=drained,
            received=c.received,
            acked=c.acked,
            retried=c.retried,
            poisoned=c.poisoned,
            timed_out=c.timed_out,
        )
        return 0

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_stop, sig)
        loop.add_signal_handler(signal.SIGHUP, self._on_reload)

    def _on_stop(self, sig: signal.Signals) -> None:
        log.info("signal_received", signal=sig.name, action="drain" if self._signals == 0 else "stop now")
        self.request_stop()

    def request_stop(self) -> None:
        """Begin a graceful stop (a second call stops at once), as SIGTERM does."""
        self._signals += 1
        self._stop.set()
        if self.dispatcher is None:
            return
        self.dispatcher.stopping.set()
        if self._signals > 1:
            asyncio.get_running_loop().create_task(self.dispatcher.abort())

    def _on_reload(self) -> None:
        self.notifier.reloading()
        try:
            fresh = load_settings(self.settings.source if self.settings.source != "<defaults>" else None)
        except CasqueError as exc:
            log.error("reload_failed", error=str(exc))
            self.notifier.ready("reload failed: keeping the old settings")  # READY=1 ends systemd's "reloading" state
            return
        configure_logging(fresh.log.level, fresh.log.format)
        if self.dispatcher is not None:
            d = self.dispatcher.settings
            for name in ("batch_size", "poll_interval_ms", "max_poll_interval_ms"):
                setattr(d, name, getattr(fresh.worker, name))
        log.info("config_reloaded", level=fresh.log.level, batch_size=fresh.worker.batch_size)
        self.notifier.ready("reloaded")

    async def _watchdog(self) -> None:
        interval = self.notifier.watchdog_interval
        while interval:
            self.notifier.watchdog()
            await asyncio.sleep(interval)


def _fifo(name: str) -> bool | None:
    """A served queue that doesn't exist yet is created with the config's defaults, and FIFO for a
    "*.fifo" name (SQS's rule: only a FIFO queue is so named, engine/queues/store.py)."""
    return name.endswith(".fifo") or None


def served_queues(settings: Settings, registry: Registry) -> list[str]:
    """``worker.queues`` if set, else the queues the registered handlers name (``@register(...,
    queue=...)``, "default" when a handler names none)."""
    queues = list(settings.worker.queues) or registry.queues()
    if not queues:
        raise ConfigError(
            "no queues to serve: register handlers (worker.handler_modules), or set worker.queues or --queues"
        )
    return queues


async def check(settings: Settings, registry: Registry = default_registry) -> list[str]:
    """``casque run --check``: config, handlers and connection; returns what was checked."""
    registry.load_modules(settings.worker.handler_modules)
    cq = await Casque.connect(settings)
    try:
        found = []
        for q in served_queues(settings, registry):
            try:
                qs = await cq.queue_settings(q)
                found.append(f"queue {q} ({qs.shards} shards)")
            except CasqueError:
                found.append(f"queue {q} (will be created on start)")
    finally:
        await cq.close()
    return [
        f"config {settings.source}",
        f"handlers: {', '.join(registry.names()) or 'none'}",
        f"Cassandra {','.join(settings.cassandra.contact_points)}:{settings.cassandra.port} keyspace "
        f"{settings.cassandra.keyspace}",
    ] + found

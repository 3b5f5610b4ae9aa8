"""The daemon's own middleware: Prometheus counters and message history.

They see a delivery through the same hooks a user's middleware does (hooks.py), so what is
counted and recorded is exactly what hooks are told: ``before`` is a start, ``after`` an acked or
timed-out call, ``on_retry`` a retry, ``on_poison`` a poison (also when no handler ran).
"""

from __future__ import annotations

from collections.abc import Callable

from daemon.base import metrics
from daemon.base.clock import Clock
from daemon.base.model import QueueSettings
from daemon.engine.observe.history import History
from daemon.service.hooks import Delivery, Middleware


class MetricsObserver(Middleware):
    """Counts outcomes and observes handler time and lateness (base/metrics.py)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def after(self, d: Delivery) -> None:
        if d.outcome in ("acked", "timed_out"):
            metrics.observe(d.outcome, d.message, d.duration, self.clock.now_ms())

    def on_retry(self, d: Delivery) -> None:
        metrics.observe("retried", d.message, d.duration, self.clock.now_ms())

    def on_poison(self, d: Delivery) -> None:
        metrics.observe("poisoned", d.message, d.duration, self.clock.now_ms())


class HistoryObserver(Middleware):
    """Writes history rows for queues that keep history (fire-and-forget, engine/observe/history.py)."""

    def __init__(self, history: History, clock: Clock, settings_of: Callable[[str], QueueSettings | None]) -> None:
        self.history = history
        self.clock = clock
        self.settings_of = settings_of

    def _record(self, event: str, d: Delivery) -> None:
        qs = self.settings_of(d.queue)
        if qs is not None and qs.history:
            self.history.record(event, d.message, d.duration, self.clock.now_ms(), qs)

    def before(self, d: Delivery) -> None:
        self._record("started", d)

    def after(self, d: Delivery) -> None:
        if d.outcome in ("acked", "timed_out"):
            self._record(d.outcome, d)

    def on_retry(self, d: Delivery) -> None:
        self._record("retried", d)

    def on_poison(self, d: Delivery) -> None:
        self._record("poisoned", d)

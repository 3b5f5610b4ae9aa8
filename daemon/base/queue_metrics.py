"""Queue-level Prometheus gauges: what is *in* each queue, not what this daemon did.

They are read from Cassandra (the same exact counts as ``casque stats``) by the one daemon that
holds the ``queue_gauges`` lease (service/queue_gauges.py), every ``metrics.queue_gauges_interval``,
and served from memory: a scrape costs nothing, however many queues. Other daemons export no
``casque_queue_*`` series, so ``max by (queue)`` over all targets is the value, and a holder change
never leaves two stale copies behind. ``casque_queue_gauges_updated_seconds`` says how fresh they are.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Gauge

from daemon.base.metrics import REGISTRY

DEPTH = Gauge("casque_queue_depth", "Messages due now and waiting for a consumer", ["queue"], registry=REGISTRY)
SCHEDULED = Gauge(
    "casque_queue_scheduled", "Messages due later (delayed, retries, schedules)", ["queue"], registry=REGISTRY
)
IN_FLIGHT = Gauge(
    "casque_queue_in_flight", "Messages taken and not yet acked (any daemon)", ["queue"], registry=REGISTRY
)
POISONED = Gauge("casque_queue_poisoned", "Messages in the poison queue", ["queue"], registry=REGISTRY)
OLDEST_DUE_AGE = Gauge(
    "casque_queue_oldest_due_age_seconds",
    "How long the oldest waiting message has been due (0: none)",
    ["queue"],
    registry=REGISTRY,
)
HOLDER = Gauge("casque_queue_gauges_holder", "1 while this daemon computes the queue gauges", registry=REGISTRY)
UPDATED = Gauge(
    "casque_queue_gauges_updated_seconds", "Unix time of the last complete round of queue gauges", registry=REGISTRY
)
ROUND_SECONDS = Gauge(
    "casque_queue_gauges_round_seconds", "How long the last round of queue gauges took", registry=REGISTRY
)

_PER_QUEUE = (DEPTH, SCHEDULED, IN_FLIGHT, POISONED, OLDEST_DUE_AGE)


def publish(
    queue: str, depth: int, scheduled: int, in_flight: int, poisoned: int, oldest_due_age_s: float | None
) -> None:
    for gauge, value in zip(_PER_QUEUE, (depth, scheduled, in_flight, poisoned, oldest_due_age_s or 0.0)):
        gauge.labels(queue).set(value)


def forget(queues: set[str]) -> None:
    """Drop the series of queues that are gone (deleted, or this daemon no longer holds the lease)."""
    for queue in queues:
        for gauge in _PER_QUEUE:
            try:
                gauge.remove(queue)
            except KeyError:
                pass


def value(gauge: Any, queue: str) -> float:
    """Read one queue's gauge (tests)."""
    return float(gauge.labels(queue)._value.get())

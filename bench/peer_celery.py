"""Peer: Celery with the Redis broker, late acks. The worker is ``celery -A bench.peer_celery worker``.

Configured as Celery's "Optimizing" guide says for many short tasks: a large prefetch multiplier
(64), no result backend (``task_ignore_result``), rate limits off; ``task_acks_late`` because the
comparison is between queues that survive a worker crash (casque acks after the handler too).
"""

from __future__ import annotations

import os

from celery import Celery

from .peer_record import record

BROKER = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6391/1")
PREFETCH = 64

app = Celery("bench_celery", broker=BROKER)
app.conf.update(
    task_acks_late=True,
    task_ignore_result=True,
    worker_prefetch_multiplier=PREFETCH,
    worker_disable_rate_limits=True,
    task_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    broker_transport_options={"visibility_timeout": 3600},
    worker_hijack_root_logger=False,
)


@app.task(name="bench.noop")
def noop(t: float) -> None:
    record(t)

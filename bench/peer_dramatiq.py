"""Peer: Dramatiq with its Redis broker. The worker is its own CLI,
``dramatiq bench.peer_dramatiq --processes 1 --threads C``: one worker process with C threads, so
at most C tasks run at once, as every other peer.

Configured as Dramatiq's guide sets up the Redis broker (``RedisBroker(url=...)`` and
``dramatiq.set_broker``), with its default middleware and its defaults otherwise: the worker
prefetches 2 × threads messages and acks each after the actor returns (a worker that dies leaves
its unacked messages to be requeued, the same at-least-once contract as casque); no result
backend, since the docs add one only to keep return values. hiredis is installed, as its
installation guide advises for the Redis broker.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq import Middleware
from dramatiq.brokers.redis import RedisBroker

from .peer_record import flush, record

DB = 3  # Celery uses db 1, arq db 2 of the bench's Redis
URL = f"redis://127.0.0.1:{os.environ.get('BENCH_REDIS_PORT', '6391')}/{DB}"
QUEUE = "default"  # an actor's queue unless it names another: its messages sit in dramatiq:default(.msgs)


class FlushSamples(Middleware):
    """The bench's only addition: a worker process ends with ``os._exit`` (multiprocessing), so
    peer_record's atexit hook never runs there; write the last samples when the worker stops."""

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        flush()


broker = RedisBroker(url=URL)
broker.add_middleware(FlushSamples())
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name="noop")
def noop(t: float) -> None:
    record(t)

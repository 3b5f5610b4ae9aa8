"""Peer: procrastinate on PostgreSQL. The worker is its own CLI,
``procrastinate --log-level=warning --app=bench.peer_procrastinate.app worker --concurrency C``
(warning, as Celery's worker runs: at its default, info, procrastinate logs two lines per job).

Configured as its quickstart and how-to guides do: an ``App`` on a ``PsycopgConnector`` (psycopg 3
with its connection pool; psycopg's compiled implementation installed), the schema applied once
(``procrastinate schema --apply``'s ``apply_schema``: the bench does it before the first run), and
``--concurrency`` for C sub-workers in one process ("Execute multiple jobs at the same time"), and a
pool of C + 1 connections, as its discussion of pool sizing asks for short jobs (psycopg_pool's
default is 4).
Everything else is the default: the worker wakes on LISTEN/NOTIFY (polling every 5 s only as a
fallback), fetches one job per query with ``FOR UPDATE SKIP LOCKED``, and marks a job
``succeeded`` after the task returns (finished jobs stay in the table: ``delete_jobs=never``). The
task is ``async`` so the sub-workers run it on the worker's event loop.
"""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

from .peer_record import record

DSN = os.environ.get("BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5439/casque_bench")
CONCURRENCY = int(os.environ.get("BENCH_PEER_CONCURRENCY", "32"))
POOL = (
    CONCURRENCY + 1
)  # "Mind the size of your PostgreSQL pool": short jobs want one connection per sub-worker, plus one

connector = PsycopgConnector(conninfo=DSN, max_size=POOL)
app = App(connector=connector)


@app.task(name="noop")
async def noop(t: float) -> None:
    record(t)

"""Per-task throughput, latency and failure rates, from the ``history`` table.

History is written by daemons for queues created with ``--history`` (daemon/history.py): one row per
state change, partitioned by (queue, UTC day), events ``running`` (with ``lateness_ms``: start minus
due), ``done``, ``failed`` (an attempt that will be retried), ``poisoned``, ``timed_out`` (the last
three with ``duration_ms`` of the attempt when known). Over the window [since, now]:

* ``done_per_s`` = done events / window seconds (throughput); ``done``, ``failed``, ``poisoned``,
  ``timed_out`` counts; ``failure_rate`` = (failed + poisoned + timed_out) / (done + those);
* ``duration_ms_p50/p90/p99``: attempt durations (done, failed, poisoned); ``lateness_ms_p50/p90/p99``:
  how late attempts started (running). Percentiles are nearest-rank (the value at rank ceil(p x n)),
  computed by Spark's ``percentile_approx`` (accuracy 10000:
  rank error at most 1/10000 of the count).

The table may be missing (a keyspace created before history existed): then there are no task
statistics, the summary says why, and the rest of the job runs as usual.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from daemon.base.config import Settings

from . import tables

FAILURES = ("failed", "poisoned", "timed_out")
FINISHED = ("done", "failed", "poisoned")
ACCURACY = 10_000
HISTORY = "message_history"
MISSING = "the keyspace has no history table: run 'casque schema apply', and create queues with --history to record it"


def days(since_ms: int, now_ms: int) -> list[str]:
    """The UTC days (history partitions) that overlap [since, now]."""
    first = datetime.fromtimestamp(since_ms / 1000, tz=UTC).date()
    last = datetime.fromtimestamp(now_ms / 1000, tz=UTC).date()
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def history(spark: Any, settings: Settings, queues: list[str], since_ms: int, now_ms: int) -> Any | None:
    """History rows of the queues in the window, or None when the table does not exist. Partitions
    are (queue, subject, day), so this is a table scan filtered here; each event counts once (its
    ``id:`` row; a keyed message's ``key:`` copy is skipped)."""
    from pyspark.sql import functions as F

    if not tables.exists(settings, HISTORY):
        return None
    h = tables.read(spark, settings, HISTORY)
    return h.where(
        F.col("queue").isin(queues)
        & F.col("day").isin(days(since_ms, now_ms))
        & F.col("subject").startswith("id:")
        & (F.col("at") >= since_ms)
        & (F.col("at") <= now_ms)
    )


def per_task(h: Any, window_s: float) -> Any:
    """One row per (queue, task) with counts, throughput, failure rate and percentiles."""
    from pyspark.sql import functions as F

    def count(*events: str) -> Any:
        return F.sum(F.col("event").isin(*events).cast("long"))

    def pct(column: str, events: tuple[str, ...], name: str) -> list[Any]:
        value = F.when(F.col("event").isin(*events), F.col(column))
        return [F.percentile_approx(value, p / 100, ACCURACY).alias(f"{name}_p{p}") for p in (50, 90, 99)]

    stats = h.groupBy("queue", "task").agg(
        count("running").alias("started"),
        count("done").alias("done"),
        count("failed").alias("failed"),
        count("poisoned").alias("poisoned"),
        count("timed_out").alias("timed_out"),
        *pct("duration_ms", FINISHED, "duration_ms"),
        *pct("lateness_ms", ("running",), "lateness_ms"),
    )
    ended = F.col("done") + F.col("failed") + F.col("poisoned") + F.col("timed_out")
    return stats.withColumn("done_per_s", F.col("done") / F.lit(window_s)).withColumn(
        "failure_rate", F.when(ended > 0, (ended - F.col("done")) / ended)
    )


def per_hour(h: Any) -> Any:
    """Done and failed events per (queue, task, UTC hour), for the throughput plots."""
    from pyspark.sql import functions as F

    hour = F.date_trunc("hour", F.timestamp_millis(F.col("at"))).alias("hour")
    return h.groupBy("queue", "task", hour).agg(
        F.sum((F.col("event") == "done").cast("long")).alias("done"),
        F.sum(F.col("event").isin(*FAILURES).cast("long")).alias("failures"),
    )

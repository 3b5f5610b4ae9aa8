"""The ``stats`` job: how deep every queue is, where, and how old its oldest due message is.

Definitions (the same as ``casque stats``, daemon/stats.py, over the same reads):

* live rows of ``messages`` with kind = 1, read per shard row from each priority lane's cursor;
* ``waiting_due``: state 0 and due <= now; ``scheduled``: state 0 and due > now; ``in_flight``:
  state 1 (timeout columns); ``poisoned``: rows of ``poison`` for the queue;
* ``oldest_due_age_s`` = (now - min(due) over waiting_due rows) / 1000, null if there are none;
* ``skew`` = max rows per shard / mean rows per shard, over shards 0..shards-1 (every live row
  counts: waiting, scheduled and in flight), rounded to 3 places; null for an empty queue;
* depth per (bucket, shard): the live rows of that shard row, by state.

How the rows are read: Spark spreads the queues' shard rows (queues x buckets x shards, from the
``queues`` table) over its tasks, and each task reads its rows with the engine's own statements
(``daemon.engine.operations.stats`` reads: the row's cursors, then one slice per lane from its cursor), so consumed
history and its tombstones are never scanned and the counts agree with ``casque stats`` by
construction. Only the live rows travel to Spark, which does every aggregation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from daemon.base.clock import Clock
from daemon.base.config import Settings
from daemon.base.logs import get_logger
from daemon.base.terminal import iso as iso_ms
from daemon.engine.client import Casque

from . import report, tables, tasks, workers
from .outputs import join, local_dir, rows_as_dicts, write_json, write_parquet
from .progress import Progress

log = get_logger("casque.pipeline.stats")

CELLS_PER_STEP = 512
PARALLEL_READS = 32


@dataclass
class Depth:
    """The stats job's DataFrames (before they are written)."""

    queues: Any  # one row per queue: the summary
    rows: Any  # one row per (queue, bucket, shard)
    shards: Any  # one row per (queue, shard)
    buckets: Any  # one row per (queue, bucket)
    held: tuple[Any, ...] = ()  # persisted inputs, released when the job ends


def grid(spark: Any, settings: Settings, queues: list[str]) -> Any:
    """Every shard row of the queues: (queue, shards, bucket, shard), never a table scan."""
    from pyspark.sql import functions as F

    q = (
        tables.read(spark, settings, "queues")
        .where(F.col("name").isin(queues))
        .select(F.col("name").alias("queue"), "shards", "buckets")
    )
    return (
        q.withColumn("bucket", F.explode(F.sequence(F.lit(0), F.col("buckets") - 1)))
        .withColumn("shard", F.explode(F.sequence(F.lit(0), F.col("shards") - 1)))
        .select("queue", "shards", "bucket", "shard")
    )


def live_messages(spark: Any, settings: Settings, cells: Any) -> Any:
    """The live messages of the given shard rows: (queue, bucket, shard, state, due)."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("queue", StringType()),
            StructField("bucket", IntegerType()),
            StructField("shard", IntegerType()),
            StructField("state", IntegerType()),
            StructField("due", LongType()),
        ]
    )
    parts = max(1, spark.sparkContext.defaultParallelism)
    rdd = cells.select("queue", "bucket", "shard").repartition(parts).rdd.mapPartitions(read_partition(settings))
    return spark.createDataFrame(rdd, schema)


def read_partition(settings: Settings) -> Callable[[Iterable[Any]], Iterator[tuple[Any, ...]]]:
    """The function Spark runs on each partition of shard rows (on the executors)."""

    def run(cells: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        cq = workers.client(settings)
        batch: list[Any] = []
        for cell in cells:
            batch.append(cell)
            if len(batch) == CELLS_PER_STEP:
                yield from workers.run(_read_cells(cq, batch))
                batch = []
        if batch:
            yield from workers.run(_read_cells(cq, batch))

    return run


async def _read_cells(cq: Casque, cells: list[Any]) -> list[tuple[Any, ...]]:
    sem = asyncio.Semaphore(PARALLEL_READS)

    async def one(cell: Any) -> list[tuple[Any, ...]]:
        qs = await cq.queue_settings(cell.queue)
        async with sem:
            rows = await cq.observe.live_rows(qs, cell.bucket, cell.shard)
        return [(cell.queue, cell.bucket, cell.shard, r.state, r.due) for r in rows]

    found = await asyncio.gather(*(one(c) for c in cells))
    return [row for rows in found for row in rows]


def depth(cells: Any, live: Any, poison: Any, now_ms: int) -> Depth:
    """Aggregate live messages into the per-row, per-shard, per-bucket and per-queue tables."""
    from pyspark.sql import functions as F

    in_flight = F.coalesce(F.col("state"), F.lit(0)) == 1
    due = ~in_flight & (F.col("due") <= now_ms)
    per_row = live.groupBy("queue", "bucket", "shard").agg(
        F.sum(due.cast("long")).alias("waiting_due"),
        F.sum((~in_flight & ~due).cast("long")).alias("scheduled"),
        F.sum(in_flight.cast("long")).alias("in_flight"),
        F.count(F.lit(1)).alias("total"),
        F.min(F.when(due, F.col("due"))).alias("oldest_due_ms"),
    )
    counts = ["waiting_due", "scheduled", "in_flight", "total"]
    rows = cells.join(per_row, ["queue", "bucket", "shard"], "left").fillna(0, subset=counts)
    shards = rows.groupBy("queue", "shard").agg(*(F.sum(c).alias(c) for c in counts))
    buckets = rows.groupBy("queue", "bucket").agg(*(F.sum(c).alias(c) for c in counts))
    per_queue = rows.groupBy("queue", "shards").agg(
        *(F.sum(c).alias(c) for c in counts), F.min("oldest_due_ms").alias("oldest_due_ms")
    )
    widest = shards.groupBy("queue").agg(F.max("total").alias("max_shard"))
    poisoned = poison.groupBy("queue").agg(F.count(F.lit(1)).alias("poisoned"))
    summary = (
        per_queue.join(widest, "queue")
        .join(poisoned, "queue", "left")
        .fillna(0, subset=["poisoned"])
        .withColumn("oldest_due_age_s", (F.lit(now_ms) - F.col("oldest_due_ms")) / 1000)
        .withColumn("skew", F.when(F.col("total") > 0, F.col("max_shard") / (F.col("total") / F.col("shards"))))
        .select(
            "queue",
            "waiting_due",
            "scheduled",
            "in_flight",
            "poisoned",
            "oldest_due_age_s",
            "oldest_due_ms",
            "skew",
            "shards",
            "total",
            "max_shard",
        )
    )
    return Depth(summary, rows.drop("shards"), shards, buckets)


def compute(spark: Any, settings: Settings, queues: list[str], now_ms: int) -> Depth:
    """Read and aggregate the depth of ``queues`` at ``now_ms``."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    cells = grid(spark, settings, queues).persist()
    live = live_messages(spark, settings, cells).persist(StorageLevel.MEMORY_AND_DISK)
    live.count()  # read Cassandra once: every output below is computed from this one snapshot
    keys = spark.createDataFrame([(q,) for q in queues], "queue string")
    poison = tables.read(spark, settings, "poison", keys=keys).select("queue").where(F.col("queue").isNotNull())
    d = depth(cells, live, poison, now_ms)
    d.held = (cells, live)
    return d


def queue_json(row: dict[str, Any], shards: list[dict[str, Any]], buckets: list[dict[str, Any]]) -> dict[str, Any]:
    """One queue of the JSON summary, with the rounding ``casque stats`` prints (skew: 3 places)."""
    skew = row["skew"]
    return {
        "waiting_due": row["waiting_due"],
        "scheduled": row["scheduled"],
        "in_flight": row["in_flight"],
        "poisoned": row["poisoned"],
        "oldest_due_age_s": row["oldest_due_age_s"],
        "skew": round(skew, 3) if skew is not None else None,
        "shards": row["shards"],
        "total": row["total"],
        "per_shard": [s["total"] for s in sorted(shards, key=lambda s: s["shard"])],
        "per_bucket": {
            str(b["bucket"]): {k: b[k] for k in ("waiting_due", "scheduled", "in_flight", "total")}
            for b in sorted(buckets, key=lambda b: b["bucket"])
        },
    }


def run(
    spark: Any,
    settings: Settings,
    queues: list[str] | None = None,
    now_ms: int | None = None,
    since_s: float = 86400.0,
    out: str = "casque-stats",
    report_dir: str | None = None,
) -> dict[str, Any]:
    """The whole job: read, aggregate, write Parquet, summary.json and report.html; return the summary."""
    from pyspark import StorageLevel

    now = now_ms if now_ms is not None else Clock().now_ms()
    names = tables.queue_names(spark, settings, queues)
    started = time.monotonic()
    with Progress(spark, "stats"):
        d = compute(spark, settings, names, now)
        frames = {"queues": d.queues, "rows": d.rows, "shards": d.shards, "buckets": d.buckets}
        for df in frames.values():
            df.persist(StorageLevel.MEMORY_AND_DISK)  # one snapshot of Cassandra feeds every output
        for name, df in frames.items():
            write_parquet(df, join(out, name))
        history = _history_part(spark, settings, names, now - int(since_s * 1000), now, out)
    summary = {
        "generated_at": iso_ms(Clock().now_ms()),
        "now": iso_ms(now),
        "now_ms": now,
        "keyspace": settings.cassandra.keyspace,
        "queues": _queues_json(d),
        "history": history.pop("summary"),
        "seconds": round(time.monotonic() - started, 1),
    }
    target = local_dir(out, report_dir)
    write_json(target / "summary.json", summary)
    (target / "report.html").write_text(report.render(summary, history["hours"]), encoding="utf-8")
    for df in (*frames.values(), *d.held):
        df.unpersist()
    log.info("stats_done", queues=len(names), seconds=summary["seconds"], out=out, report=str(target / "report.html"))
    return summary


def _queues_json(d: Depth) -> dict[str, Any]:
    shards: dict[str, list[dict[str, Any]]] = {}
    buckets: dict[str, list[dict[str, Any]]] = {}
    for row in rows_as_dicts(d.shards):
        shards.setdefault(row["queue"], []).append(row)
    for row in rows_as_dicts(d.buckets):
        buckets.setdefault(row["queue"], []).append(row)
    return {
        q["queue"]: queue_json(q, shards.get(q["queue"], []), buckets.get(q["queue"], []))
        for q in sorted(rows_as_dicts(d.queues), key=lambda q: q["queue"])
    }


def _history_part(
    spark: Any, settings: Settings, names: list[str], since_ms: int, now_ms: int, out: str
) -> dict[str, Any]:
    """Task statistics from history, or a note saying why there are none (the table is optional)."""
    window_s = (now_ms - since_ms) / 1000
    base = {"since": iso_ms(since_ms), "until": iso_ms(now_ms), "window_s": window_s}
    h = tasks.history(spark, settings, names, since_ms, now_ms) if names else None
    if h is None:
        note = tasks.MISSING if names else "no queues"
        log.warning("stats_without_history", reason=note)
        return {"summary": {**base, "available": False, "note": note, "tasks": []}, "hours": []}
    h = h.persist()
    per_task, per_hour = tasks.per_task(h, window_s), tasks.per_hour(h)
    write_parquet(per_task, join(out, "tasks"))
    write_parquet(per_hour, join(out, "task_hours"))
    found = sorted(rows_as_dicts(per_task), key=lambda t: (-t["done"], t["queue"], t["task"]))
    hours = rows_as_dicts(per_hour)
    h.unpersist()
    return {"summary": {**base, "available": True, "note": None, "tasks": found}, "hours": hours}

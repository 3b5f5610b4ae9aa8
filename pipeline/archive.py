"""The ``archive`` job: history and poison rows older than a cut-off, to Parquet by date, and
(with ``--purge``) deleted from Cassandra once the written files have been read back and matched.

Layout: ``<out>/<table>/run=<run id>/date=<UTC day>/part-*.parquet``. Each run writes its own
directory, so a run never overwrites an earlier one, and the read-back covers exactly its files.

Verification before any delete: the selected rows are held (persisted) as one snapshot; after the
write, the run's files are read back and compared with it row by row: same count, and the same set
of (primary key, SHA-256 of the whole row as JSON). Only then are rows deleted, and only the rows
read back from the archive, each with ``USING TIMESTAMP`` = its write time as archived: a delete
removes that version and nothing written later (a message poisoned again after the read survives).
Deletes are cell-level (one row at a time), never partition or range tombstones (docs/design.md).

``history`` may not exist (older keyspaces): it is then skipped, and the manifest says so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from daemon.base.config import Settings
from daemon.base.errors import UsageError
from daemon.base.logs import get_logger
from daemon.engine.client import Casque

from . import tables, workers
from .errors import VerificationError
from .outputs import join, local_dir, write_json, write_parquet
from .progress import Progress

log = get_logger("casque.pipeline.archive")

PARALLEL_DELETES = 64


@dataclass(frozen=True)
class Table:
    """What the archive needs to know about one table."""

    name: str
    time_column: str  # rows older than the cut-off by this column are archived
    key: tuple[str, ...]  # the primary key (what a delete names)
    columns: tuple[str, ...]  # the regular columns: the row's write time is the latest of theirs


TABLES = {
    "history": Table(
        "message_history",
        "at",
        ("queue", "subject", "day", "at", "id", "event"),
        ("task", "attempt", "duration_ms", "lateness_ms", "error", "key"),
    ),
    "poison": Table(
        "poison",
        "poisoned_at",
        ("queue", "id"),
        (
            "poisoned_at",
            "task",
            "payload",
            "headers",
            "attempt",
            "priority",
            "key",
            "trigger",
            "error_type",
            "error",
            "traceback",
            "reason",
        ),
    ),
}


@dataclass(frozen=True)
class ArchiveSpec:
    out: str
    cutoff_ms: int
    queues: list[str] | None = None
    tables: list[str] = field(default_factory=lambda: list(TABLES))
    purge: bool = False
    report_dir: str | None = None


def run(spark: Any, settings: Settings, spec: ArchiveSpec) -> dict[str, Any]:
    """Archive each table; return the manifest (also written as archive-<run>.json)."""
    unknown = [t for t in spec.tables if t not in TABLES]
    if unknown or not spec.tables:
        raise UsageError(f"--tables {','.join(spec.tables)!r}: choose from {', '.join(TABLES)}")
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    manifest: dict[str, Any] = {
        "run": run_id,
        "cutoff_ms": spec.cutoff_ms,
        "out": spec.out,
        "queues": spec.queues,
        "tables": {},
    }
    for name in spec.tables:
        table = TABLES[name]
        if not tables.exists(settings, table.name):
            manifest["tables"][name] = {"note": f"the keyspace has no {name} table: nothing to archive"}
            log.warning("archive_table_missing", table=name)
            continue
        with Progress(spark, f"archive_{name}"):
            manifest["tables"][name] = archive_table(spark, settings, table, spec, run_id)
    write_json(local_dir(spec.out, spec.report_dir) / f"archive-{run_id}.json", manifest)
    return manifest


def select(spark: Any, settings: Settings, table: Table, queues: list[str] | None, cutoff_ms: int) -> Any:
    """The rows to archive, with their write time (us) and UTC date."""
    from pyspark.sql import functions as F

    if (
        queues and table.name == "poison"
    ):  # one partition per queue: read them by direct join, not by scanning the table
        df = tables.read(
            spark, settings, table.name, keys=spark.createDataFrame([(q,) for q in queues], "queue string")
        )
    else:  # history partitions are (queue, subject, day): subjects are not known up front, so scan
        df = tables.read(spark, settings, table.name)
        if queues:
            df = df.where(F.col("queue").isin(queues))
    written = F.greatest(*(F.expr(f"writetime({c})") for c in table.columns)).alias("writetime_us")
    date = F.date_format(F.timestamp_millis(F.col(table.time_column)), "yyyy-MM-dd").alias("date")
    return df.where(F.col(table.time_column) < cutoff_ms).select(*table.key, *table.columns, written, date)


def archive_table(spark: Any, settings: Settings, table: Table, spec: ArchiveSpec, run_id: str) -> dict[str, Any]:
    from pyspark import StorageLevel

    path = join(spec.out, table.name, f"run={run_id}")
    src = select(spark, settings, table, spec.queues, spec.cutoff_ms).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        selected = src.count()
        result: dict[str, Any] = {"path": path, "selected": selected, "archived": 0, "verified": False, "purged": 0}
        if selected == 0:
            return {**result, "verified": True, "note": f"no {table.name} rows before the cut-off"}
        write_parquet(src, path, partition_by=["date"], files=None)
        back = spark.read.parquet(path)
        result["archived"] = back.count()
        check = verify(src, back, table)
        result.update(check, verified=True)
        if spec.purge:
            result["purged"] = purge(settings, table, back)
        log.info("archive_table_done", table=table.name, **{k: v for k, v in result.items() if k != "path"}, path=path)
        return result
    finally:
        src.unpersist()


def verify(src: Any, back: Any, table: Table) -> dict[str, int]:
    """Compare the archive read back with the selected snapshot; raise VerificationError (and so
    purge nothing) unless every row is there, once, and equal."""
    selected, archived = src.count(), back.count()
    ours, theirs = _digests(src, table), _digests(back, table)
    missing = ours.exceptAll(theirs).count()
    extra = theirs.exceptAll(ours).count()
    if selected != archived or missing or extra:
        raise VerificationError(
            f"{table.name}: archive read back {archived} rows for {selected} selected ({missing} missing or different, "
            f"{extra} unexpected): nothing was purged; check the output path and run again"
        )
    return {"missing": missing, "unexpected": extra}


def _digests(df: Any, table: Table) -> Any:
    """(primary key, SHA-256 of every archived column as JSON) per row; the date partition column
    is left out (Spark reads it back as a date, not as text)."""
    from pyspark.sql import functions as F

    body = F.to_json(F.struct(*table.key, *table.columns, "writetime_us"))
    return df.select(*table.key, F.sha2(body, 256).alias("digest"))


def purge(settings: Settings, table: Table, back: Any) -> int:
    """Delete the archived rows (each at its archived write time) from Spark tasks; return the count."""
    rdd = back.select("writetime_us", *table.key).rdd.mapPartitions(delete_partition(settings, table))
    return int(rdd.sum())


def delete_partition(settings: Settings, table: Table) -> Callable[[Iterable[Any]], Iterator[int]]:
    def run(rows: Iterable[Any]) -> Iterator[int]:
        cq = workers.client(settings)
        yield workers.run(_delete(cq, settings.cassandra.keyspace, table, [tuple(r) for r in rows]))

    return run


async def _delete(cq: Casque, keyspace: str, table: Table, rows: list[tuple[Any, ...]]) -> int:
    import uuid

    where = " AND ".join(f"{c} = ?" for c in table.key)
    stmt = cq.db.prepare(f"DELETE FROM {keyspace}.{table.name} USING TIMESTAMP ? WHERE {where}")
    id_at = table.key.index("id") + 1
    sem = asyncio.Semaphore(PARALLEL_DELETES)

    async def one(row: tuple[Any, ...]) -> None:
        params = list(row)
        params[id_at] = uuid.UUID(params[id_at])
        async with sem:
            await cq.db.run(stmt, params)

    await asyncio.gather(*(one(r) for r in rows))
    return len(rows)

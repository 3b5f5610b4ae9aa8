"""The ``load`` job: bulk enqueue from Parquet, CSV or JSON lines, as if each row were sent from Python.

1. Read the input and select the mapped fields (``pipeline.mapping``), keeping each row's number and
   its original columns as JSON (for the reject output).
2. Spread the rows over ``--partitions`` writers. With keys, rows are partitioned by key shard (the
   partition of ``keys`` their LWT goes to) and sorted by row number, so the rows of one key are
   sent one after another in input order, as a single Python sender would, conflicts resolve the
   same way, and no two writers race for one ``keys`` partition (keyed sends need the LWT, so they
   go through ``Producer.send`` in the task, see ``pipeline.sender``).
3. Each task sends its rows with the producer's own code and yields one result per row; Spark
   writes the results once, partitioned by status: ``<out>/results/status=loaded|replaced|kept``
   and the reject output ``status=rejected`` (with error, reason and the input row), plus
   ``status=failed`` if Cassandra refused writes. Writing is the job's only action, so no row is
   ever sent twice by a second evaluation.
4. Counts are read back from those files into ``summary.json`` and the command's output.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from daemon.base.config import Settings
from daemon.base.errors import UsageError
from daemon.base.logs import get_logger
from daemon.engine.send.producer import OnConflict
from daemon.engine.storage.placement import KEY_SHARDS

from . import workers
from .mapping import check_mapping, parse_pairs, policy_of, to_fields
from .outputs import join, local_dir, write_json, write_parquet
from .progress import Progress
from .sender import RESULT_COLUMNS, load_partition

log = get_logger("casque.pipeline.load")

FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json"}
WRITTEN = ("loaded", "replaced")


@dataclass(frozen=True)
class LoadSpec:
    queue: str
    input: str
    fmt: str
    mapping: dict[str, str]
    consts: dict[str, str] = field(default_factory=dict)
    on_conflict: OnConflict = "replace"
    out: str = "casque-load"
    report_dir: str | None = None
    partitions: int | None = None
    chunk: int = 2000

    @classmethod
    def from_options(
        cls,
        queue: str,
        input: str,
        fmt: str | None,
        maps: list[str],
        consts: list[str],
        on_conflict: str,
        out: str,
        report_dir: str | None,
        partitions: int | None,
        chunk: int,
    ) -> LoadSpec:
        """Build from command-line strings, with one-line errors for anything malformed."""
        mapping, constant = parse_pairs(maps, "--map"), parse_pairs(consts, "--const")
        check_mapping(mapping, constant)
        if partitions is not None and partitions < 1 or chunk < 1:
            raise UsageError("--partitions and --chunk must be at least 1")
        return cls(
            queue,
            input,
            fmt or input_format(input),
            mapping,
            constant,
            policy_of(on_conflict),
            out,
            report_dir,
            partitions,
            chunk,
        )

    @property
    def keyed(self) -> bool:
        return "key" in self.mapping or "key" in self.consts


def input_format(path: str) -> str:
    suffix = PurePosixPath(path.rstrip("/")).suffix.lower()
    if suffix in FORMATS:
        return FORMATS[suffix]
    if not suffix:
        return "parquet"  # a directory of part files, as Spark writes them
    raise UsageError(f"cannot tell the format of {path!r} from its extension: give --format parquet, csv or json")


def read_input(spark: Any, spec: LoadSpec) -> Any:
    """The input as a DataFrame: CSV with a header row (values as text, quotes doubled inside quoted
    values as RFC 4180 has it), JSON lines, or Parquet."""
    reader = spark.read.option("header", "true").option("escape", '"') if spec.fmt == "csv" else spark.read
    try:
        return reader.format(spec.fmt).load(spec.input)
    except Exception as exc:  # AnalysisException: path does not exist, unreadable files
        raise UsageError(f"cannot read {spec.input} as {spec.fmt}: {str(exc).splitlines()[0][:200]}") from None


def prepare(spark: Any, df: Any, spec: LoadSpec) -> Any:
    """Row number, original row as JSON, the mapped fields; partitioned for the writers."""
    from pyspark.sql import functions as F

    original = F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns])).alias("_input")
    numbered = df.withColumn("_row", F.monotonically_increasing_id())
    prepared = numbered.select(F.col("_row"), original, *to_fields(numbered, spec.mapping, spec.consts))
    writers = spec.partitions or spark.sparkContext.defaultParallelism
    if not spec.keyed:
        return prepared.repartition(writers)
    key_shard = (F.crc32(F.col("f_key").cast("string")) % KEY_SHARDS).cast("string")  # = daemon.placement.key_shard
    return prepared.repartition(writers, F.coalesce(key_shard, F.col("_row").cast("string"))).sortWithinPartitions(
        "_row"
    )


def run(spark: Any, settings: Settings, spec: LoadSpec) -> dict[str, Any]:
    """Load, write the per-row results, and return the summary (also written as summary.json)."""
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    workers.run(workers.client(settings).stores.queues.get(spec.queue, fresh=True))  # QueueNotFound before any work
    schema = StructType([StructField(name, _parse_datatype_string(kind)) for name, kind in RESULT_COLUMNS])
    prepared = prepare(spark, read_input(spark, spec), spec)
    done = spark.sparkContext.accumulator(0)
    rdd = prepared.rdd.mapPartitions(load_partition(settings, spec.queue, spec.on_conflict, spec.chunk, done))
    results = join(spec.out, "results")
    started = time.monotonic()
    log.info(
        "load_started", queue=spec.queue, input=spec.input, format=spec.fmt, mapping=spec.mapping, consts=spec.consts
    )
    with Progress(spark, "load", rows=done):
        write_parquet(spark.createDataFrame(rdd, schema), results, partition_by=["status"], files=None)
    seconds = time.monotonic() - started
    summary = summarize(spark.read.parquet(results), spec, results, seconds)
    write_json(local_dir(spec.out, spec.report_dir) / "summary.json", summary)
    log.info(
        "load_done",
        **{k: summary[k] for k in ("queue", "rows", "loaded", "rejected", "keys_conflicting", "failed", "rows_per_s")},
    )
    return summary


def summarize(back: Any, spec: LoadSpec, results: str, seconds: float) -> dict[str, Any]:
    """Counts per status, conflicting keys and the reasons of rejects/failures, from the written results."""
    from pyspark.sql import functions as F

    by_status = {r.status: r["count"] for r in back.groupBy("status").count().collect()}
    rows = sum(by_status.values())
    reasons = (
        back.where(F.col("status").isin("rejected", "failed"))
        .groupBy("status", "error")
        .agg(F.count(F.lit(1)).alias("count"), F.first("reason").alias("sample"))
        .orderBy(F.desc("count"))
        .collect()
    )
    loaded = sum(by_status.get(s, 0) for s in WRITTEN)
    return {
        "queue": spec.queue,
        "input": spec.input,
        "format": spec.fmt,
        "rows": rows,
        "loaded": loaded,
        "replaced": by_status.get("replaced", 0),
        "kept": by_status.get("kept", 0),
        "rejected": by_status.get("rejected", 0),
        "failed": by_status.get("failed", 0),
        "keys_conflicting": back.where(F.col("conflict")).count(),
        "reasons": [{"status": r.status, "error": r.error, "count": r["count"], "sample": r.sample} for r in reasons],
        "seconds": round(seconds, 1),
        "rows_per_s": round(rows / seconds) if seconds > 0 else None,
        "results": results,
        "rejects": join(results, "status=rejected"),
        "failures": join(results, "status=failed"),
    }

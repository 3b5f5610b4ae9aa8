"""The ``create-queues`` job: create a queue for every name in a dataset (per-user queues, say).

1. Read the names: a text file (one name per line), CSV with a header, JSON lines or Parquet, the
   names in ``--column`` (default ``name``; ``value`` for text). Blank names are dropped.
2. Spread them over ``--partitions`` tasks. Each task checks every name (``validate_queue_name``:
   a bad one is counted as rejected, with a sample, and created nowhere) and creates the rest with
   the engine's own ``Casque.create_queues`` (no LWT: the claim protocol of
   engine/queues/bulk_create.py, a chunk of names a request, ``--concurrency`` chunks at a time per
   task), so a queue made here is exactly one made from Python or ``casque queues create-many``.
3. Existing queues are left as they are, never written over (``if_missing``; those whose settings
   differ from the job's are counted as ``differing``, with a sample): running the job twice
   creates nothing the second time, so a failed run is simply run again. Two tasks given one name
   (a name listed twice) race by that protocol: one creates it, the other counts it as existing.
Each task returns its counts; the job's only action collects them, so no name is sent twice by a
second evaluation (and if one were, ``if_missing`` would make it a no-op).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from daemon.base.config import Settings
from daemon.base.errors import UsageError
from daemon.base.logs import get_logger
from daemon.engine.queues.bulk_create import CONCURRENCY
from daemon.engine.queues.settings import settings_from_defaults
from daemon.engine.storage.schema import validate_queue_name

from . import workers
from .load import input_format
from .outputs import local_dir, write_json

log = get_logger("casque.pipeline.queues")
TEXT_SUFFIXES = (".txt", ".lst", ".names")


@dataclass(frozen=True)
class QueuesSpec:
    input: str
    fmt: str
    column: str
    options: dict[str, Any] = field(
        default_factory=dict
    )  # create_queue's options (shards=1, buckets=1, expire_after=...)
    partitions: int | None = None
    concurrency: int = CONCURRENCY  # chunks in flight per task
    report_dir: str | None = None

    @classmethod
    def from_options(
        cls,
        input: str,
        fmt: str | None,
        column: str | None,
        options: dict[str, Any],
        partitions: int | None,
        concurrency: int,
        report_dir: str | None,
    ) -> QueuesSpec:
        """Checked on the driver, before Spark does anything: the settings (with a sample name) and the counts."""
        if partitions is not None and partitions < 1 or concurrency < 1:
            raise UsageError("--partitions and --concurrency must be at least 1")
        options = {k: v for k, v in options.items() if v is not None}
        settings_from_defaults("sample", Settings().queue_defaults, **options)  # one-line error for a bad option
        chosen = fmt or ("text" if input.rstrip("/").lower().endswith(TEXT_SUFFIXES) else input_format(input))
        return cls(
            input,
            chosen,
            column or ("value" if chosen == "text" else "name"),
            options,
            partitions,
            concurrency,
            report_dir,
        )


def read_names(spark: Any, spec: QueuesSpec) -> Any:
    """The names as a one-column DataFrame (``name``), blanks dropped."""
    from pyspark.sql import functions as F

    reader = spark.read.option("header", "true") if spec.fmt == "csv" else spark.read
    try:
        df = reader.format(spec.fmt).load(spec.input)
    except Exception as exc:  # AnalysisException: path does not exist, unreadable files
        raise UsageError(f"cannot read {spec.input} as {spec.fmt}: {str(exc).splitlines()[0][:200]}") from None
    if spec.column not in df.columns:
        raise UsageError(
            f"{spec.input} has no column {spec.column!r} (columns: {', '.join(df.columns)}): give --column"
        )
    name = F.trim(F.col(f"`{spec.column}`").cast("string"))
    return df.select(name.alias("name")).where(F.col("name").isNotNull() & (F.length("name") > 0))


def create_partition(
    settings: Settings, spec: QueuesSpec
) -> Callable[[Iterable[Any]], Iterator[tuple[str, int, str, str]]]:
    """The task: check the names, create the valid ones; yields (status, count, sample name, error)."""

    def run(rows: Iterable[Any]) -> Iterator[tuple[str, int, str, str]]:
        good: list[str] = []
        rejected, sample, error = 0, "", ""
        for r in rows:
            try:
                good.append(validate_queue_name(r.name))
            except UsageError as exc:
                rejected, sample, error = rejected + 1, sample or r.name, error or str(exc)
        cq = workers.client(settings)
        differing: list[str] = []

        def on_existing(name: str, same: bool) -> None:
            if not same:
                differing.append(name)

        created = (
            workers.run(
                cq.create_queues(
                    good, if_missing=True, concurrency=spec.concurrency, on_existing=on_existing, **spec.options
                )
            )
            if good
            else 0
        )
        yield ("created", created, "", "")
        yield ("existing", len(good) - created, "", "")  # a name given twice counts once as existing
        if differing:
            yield ("differing", len(differing), differing[0], "exists with other settings: left as it is")
        if rejected:
            yield ("rejected", rejected, sample, error)

    return run


def run(spark: Any, settings: Settings, spec: QueuesSpec) -> dict[str, Any]:
    """Create the queues and return the summary (also written as summary.json with --report-dir)."""
    started = time.monotonic()
    names = read_names(spark, spec)
    writers = spec.partitions or spark.sparkContext.defaultParallelism
    log.info(
        "create_queues_started",
        input=spec.input,
        format=spec.fmt,
        column=spec.column,
        options=spec.options,
        partitions=writers,
    )
    counts = {"created": 0, "existing": 0, "rejected": 0}
    differing = 0  # among the existing: queues whose settings are not the job's (left as they are)
    samples: list[dict[str, str]] = []
    others: list[str] = []
    for status, count, sample, error in (
        names.repartition(writers).rdd.mapPartitions(create_partition(settings, spec)).collect()
    ):
        if status == "differing":
            differing, others = differing + count, others + [sample]
            continue
        counts[status] += count
        if sample:
            samples.append({"name": sample, "error": error})
    seconds = time.monotonic() - started
    total = sum(counts.values())
    summary = {
        "input": spec.input,
        "names": total,
        **counts,
        "differing": differing,
        "differing_sample": others[:10],
        "rejects": samples[:10],
        "seconds": round(seconds, 1),
        "queues_per_s": round(total / seconds) if seconds > 0 else None,
    }
    if spec.report_dir:
        write_json(local_dir(spec.report_dir, None) / "summary.json", summary)
    log.info(
        "create_queues_done", **{k: summary[k] for k in ("names", "created", "existing", "rejected", "queues_per_s")}
    )
    return summary

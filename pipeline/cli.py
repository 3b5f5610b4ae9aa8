"""``casque pipeline <job>``: the Spark jobs from the command line, locally or under spark-submit.

    casque pipeline stats [--queues a,b] [--out DIR] [--since 24h] [--now ISO]
    casque pipeline load QUEUE INPUT [--format csv|json|parquet] --map task=COL [--map ...] [--const ...]
    casque pipeline archive --older-than 30d | --before ISO --out DIR [--tables history,poison] [--purge]
    casque pipeline create-queues NAMES [--format text|csv|json|parquet] [--column name] [--shards 1 --buckets 1 ...]
    casque pipeline jar        # the connector's jars, comma-separated, for spark-submit --jars
    casque pipeline entry      # the script to give spark-submit

``add_cli(subparsers)`` registers all of it under ``casque``; ``main()`` is the same command line on
its own (``python -m pipeline`` and the spark-submit entry script). Jobs start Spark locally
(``--master``, default local[*]) unless spark-submit started it (docs/pipeline.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.base.config import Settings
from daemon.base.durations import parse_duration
from daemon.base.errors import UsageError
from daemon.base.terminal import parse_time, print_table, run_command, settings_of

from .errors import PipelineError
from .mapping import FIELDS, POLICIES

Job = Callable[[Any, Settings, argparse.Namespace], int]


def add_cli(subparsers: Any) -> None:
    """Register ``pipeline`` and its jobs on the ``casque`` command line."""
    p = subparsers.add_parser(
        "pipeline", help="Spark jobs: stats, load (bulk enqueue), archive (local Spark or spark-submit)"
    )
    add_jobs(p.add_subparsers(metavar="JOB"))


def add_jobs(jobs: Any) -> None:
    """The jobs and helpers, on ``casque pipeline`` or on the stand-alone command line."""
    _add_stats(jobs)
    _add_load(jobs)
    _add_archive(jobs)
    _add_create_queues(jobs)
    jar = jobs.add_parser(
        "jar", help="fetch (once) and print the Spark Cassandra connector's jars, comma-separated, for --jars"
    )
    jar.set_defaults(func=cmd_jar)
    entry = jobs.add_parser("entry", help="print the Python file to give spark-submit")
    entry.set_defaults(func=cmd_entry)


def main(argv: list[str] | None = None) -> int:
    """The pipeline's command line on its own: ``python -m pipeline [-c FILE] JOB ...`` (spark-submit
    runs this through ``__main__.py``)."""
    parser = argparse.ArgumentParser(prog="casque-pipeline", description="casque's Spark jobs (see docs/pipeline.md)")
    parser.add_argument(
        "-c",
        "--config",
        help="TOML config file (default: $CASQUE_CONFIG, ./config/casque.toml, /etc/casque/casque.toml)",
    )
    add_jobs(parser.add_subparsers(metavar="JOB"))
    return run_command(parser, argv)


# ---- running a job ----------------------------------------------------------------------------
def _spark_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--master",
        default="local[*]",
        help="Spark master when casque starts Spark (default local[*]; ignored under spark-submit)",
    )
    p.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting (repeatable)"
    )


def with_spark(job: Job) -> Callable[[argparse.Namespace], int]:
    """Load the config, start Spark, run the job, and stop Spark and the clients whatever happens."""

    def run(args: argparse.Namespace) -> int:
        from . import workers
        from .session import start_session

        settings = settings_of(args)
        spark = start_session(settings, args.master, _conf_pairs(args.spark_conf))
        try:
            return job(spark, settings, args)
        finally:
            workers.close_all()
            spark.stop()

    return run


def _conf_pairs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"invalid --spark-conf {item!r}: use KEY=VALUE, e.g. spark.driver.memory=4g")
        out[key.strip()] = value
    return out


def _queues(text: str | None) -> list[str] | None:
    return [q.strip() for q in text.split(",") if q.strip()] if text else None


def _ms(text: str | None) -> int | None:
    return int(parse_time(text) * 1000) if text else None


# ---- stats ------------------------------------------------------------------------------------
def _add_stats(jobs: Any) -> None:
    s = jobs.add_parser(
        "stats", help="depth per shard and bucket, due/scheduled/in flight/poisoned, age, skew, per-task history stats"
    )
    s.add_argument("--queues", help="comma-separated queues (default: every queue)")
    s.add_argument("--out", default="casque-stats", help="output directory or URI for Parquet (default ./casque-stats)")
    s.add_argument("--report-dir", help="local directory for summary.json and report.html (default: --out when local)")
    s.add_argument("--since", default="24h", help="history window for task statistics (default 24h)")
    s.add_argument("--now", help="compute as of this ISO 8601 time (default: now)")
    _spark_options(s)
    s.set_defaults(func=with_spark(cmd_stats))


def cmd_stats(spark: Any, settings: Settings, args: argparse.Namespace) -> int:
    from .stats import run

    summary = run(
        spark,
        settings,
        _queues(args.queues),
        _ms(args.now),
        parse_duration(args.since, "--since"),
        args.out,
        args.report_dir,
    )
    rows = [
        [
            q,
            str(v["waiting_due"]),
            str(v["scheduled"]),
            str(v["in_flight"]),
            str(v["poisoned"]),
            "-" if v["oldest_due_age_s"] is None else f"{v['oldest_due_age_s']:.1f}s",
            "-" if v["skew"] is None else str(v["skew"]),
        ]
        for q, v in summary["queues"].items()
    ]
    print_table(["QUEUE", "DUE", "SCHEDULED", "IN FLIGHT", "POISONED", "OLDEST DUE", "SKEW"], rows)
    history = summary["history"]
    print(
        f"tasks: {len(history['tasks'])} from history" if history["available"] else f"tasks: none ({history['note']})"
    )
    print(f"written: {args.out} (Parquet), summary.json and report.html in {args.report_dir or args.out}")
    return 0


# ---- load -------------------------------------------------------------------------------------
def _add_load(jobs: Any) -> None:
    ld = jobs.add_parser(
        "load", help="bulk enqueue from Parquet, CSV or JSON, placed exactly as the Python producer places messages"
    )
    ld.add_argument("queue")
    ld.add_argument("input", help="input file, directory or URI")
    ld.add_argument("--format", choices=["parquet", "csv", "json"], help="input format (default: from the extension)")
    ld.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="FIELD=EXPR",
        help=f"column or Spark SQL expression for a field; fields: {', '.join(FIELDS)}",
    )
    ld.add_argument(
        "--const",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="the same value for every row, e.g. task=send_email",
    )
    ld.add_argument(
        "--on-conflict",
        choices=POLICIES,
        default="replace",
        help="for keyed rows without an on_conflict column (default replace)",
    )
    ld.add_argument(
        "--out", default="casque-load", help="where the per-row results and rejects go (default ./casque-load)"
    )
    ld.add_argument("--report-dir", help="local directory for summary.json (default: --out when local)")
    ld.add_argument("--partitions", type=int, help="parallel writers (default: Spark's default parallelism)")
    ld.add_argument("--chunk", type=int, default=2000, help="rows per producer call in a task (default 2000)")
    _spark_options(ld)
    ld.set_defaults(func=with_spark(cmd_load))


def cmd_load(spark: Any, settings: Settings, args: argparse.Namespace) -> int:
    from .load import LoadSpec, run

    spec = LoadSpec.from_options(
        args.queue,
        args.input,
        args.format,
        args.map,
        args.const,
        args.on_conflict,
        args.out,
        args.report_dir,
        args.partitions,
        args.chunk,
    )
    s = run(spark, settings, spec)
    print(
        f"loaded {s['loaded']} of {s['rows']} rows into {args.queue} in {s['seconds']}s ({s['rows_per_s']} rows/s); "
        f"rejected {s['rejected']}, keys conflicting {s['keys_conflicting']} (replaced {s['replaced']}, kept "
        f"{s['kept']}), failed {s['failed']}"
    )
    for reason in s["reasons"][:10]:
        print(f"  {reason['count']:>8}  {reason['error']}: {reason['sample']}")
    print(f"per-row results: {s['results']} (rejects: {s['rejects']})")
    if s["failed"]:
        raise PipelineError(
            f"{s['failed']} rows were not written because Cassandra failed: re-load them from {s['failures']}"
        )
    return 0


# ---- archive ----------------------------------------------------------------------------------
def _add_archive(jobs: Any) -> None:
    a = jobs.add_parser(
        "archive", help="export history and poison rows older than a cut-off to Parquet by date; optionally purge them"
    )
    a.add_argument(
        "--out", required=True, help="archive directory or URI (each run writes <out>/<table>/run=<id>/date=<day>)"
    )
    cut = a.add_mutually_exclusive_group(required=True)
    cut.add_argument("--older-than", help="cut-off as an age, e.g. 30d")
    cut.add_argument("--before", help="cut-off as an ISO 8601 time")
    a.add_argument("--queues", help="comma-separated queues (default: every queue)")
    a.add_argument("--tables", default="history,poison", help="which tables (default history,poison)")
    a.add_argument(
        "--purge",
        action="store_true",
        help="after a verified write (read back, compare counts and ids), delete the archived rows",
    )
    a.add_argument("--report-dir", help="local directory for the run's manifest JSON (default: --out when local)")
    _spark_options(a)
    a.set_defaults(func=with_spark(cmd_archive))


def cmd_archive(spark: Any, settings: Settings, args: argparse.Namespace) -> int:
    from daemon.base.clock import Clock

    from .archive import ArchiveSpec, run

    cutoff = (
        int(parse_time(args.before) * 1000)
        if args.before
        else Clock().now_ms() - int(parse_duration(args.older_than, "--older-than") * 1000)
    )
    spec = ArchiveSpec(
        out=args.out,
        cutoff_ms=cutoff,
        queues=_queues(args.queues),
        tables=_queues(args.tables) or [],
        purge=args.purge,
        report_dir=args.report_dir,
    )
    m = run(spark, settings, spec)
    for name, t in m["tables"].items():
        print(
            f"{name}: {t['note']}"
            if t.get("note")
            else f"{name}: archived {t['archived']} rows to {t['path']}, verified {t['verified']}, purged {t['purged']}"
        )
    return 0


# ---- create-queues ----------------------------------------------------------------------------
def _add_create_queues(jobs: Any) -> None:
    c = jobs.add_parser(
        "create-queues", help="bulk-create a queue for every name in a dataset (existing queues are left as they are)"
    )
    c.add_argument(
        "input", help="names: text (one per line), CSV with a header, JSON lines or Parquet; file, directory or URI"
    )
    c.add_argument(
        "--format",
        choices=["text", "parquet", "csv", "json"],
        help="input format (default: from the extension; .txt is text)",
    )
    c.add_argument("--column", help="the column holding the names (default: name; value for text)")
    c.add_argument("--shards", type=int, help="concurrency shards of each queue (1 for small per-user queues)")
    c.add_argument("--buckets", type=int, help="rolling time buckets of each queue")
    c.add_argument("--bucket-seconds", type=int, help="length of one time bucket in seconds")
    c.add_argument("--timeout", help="default message timeout, e.g. 30s")
    c.add_argument("--max-attempts", type=int, help="deliveries before a message is poisoned")
    c.add_argument("--retention", help="how long finished data is kept, e.g. 7d")
    c.add_argument("--expire-after", help="delete each queue after this long without a send or receive, e.g. 30d")
    c.add_argument("--partitions", type=int, help="parallel tasks (default: Spark's default parallelism)")
    c.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="chunks of names each task has in flight (default 4; 200 names a chunk)",
    )
    c.add_argument("--report-dir", help="local directory for summary.json")
    _spark_options(c)
    c.set_defaults(func=with_spark(cmd_create_queues))


def cmd_create_queues(spark: Any, settings: Settings, args: argparse.Namespace) -> int:
    from .queues import QueuesSpec, run

    durations = {
        k: parse_duration(v, k.replace("_", "-"))
        for k in ("timeout", "retention", "expire_after")
        if (v := getattr(args, k)) is not None
    }
    options = {
        "shards": args.shards,
        "buckets": args.buckets,
        "bucket_seconds": args.bucket_seconds,
        "max_attempts": args.max_attempts,
        **durations,
    }
    spec = QueuesSpec.from_options(
        args.input, args.format, args.column, options, args.partitions, args.concurrency, args.report_dir
    )
    s = run(spark, settings, spec)
    print(
        f"{s['names']} names: {s['created']} queues created, {s['existing']} existed, {s['rejected']} rejected "
        f"in {s['seconds']}s ({s['queues_per_s']} names/s)"
    )
    for r in s["rejects"]:
        print(f"  rejected {r['name']!r}: {r['error']}")
    if s["differing"]:
        print(f"  {s['differing']} existed with other settings, left as they are: {', '.join(s['differing_sample'])}")
    return 0


# ---- helpers for spark-submit -----------------------------------------------------------------
def cmd_jar(args: argparse.Namespace) -> int:
    from .jars import ensure_connector

    print(",".join(str(j) for j in ensure_connector(progress=lambda line: print(line, file=sys.stderr))))
    return 0


def cmd_entry(args: argparse.Namespace) -> int:
    print(Path(__file__).with_name("__main__.py"))
    return 0

"""Where a job's outputs go: Parquet through Spark (any path Spark can write: local, HDFS, S3),
and the small JSON summary and HTML report through the driver's own filesystem.

On a cluster a local ``--out`` would scatter Parquet parts over the executors' disks, so Parquet
takes any Hadoop URI while the driver-side files go to a local directory: ``--out`` itself when it
is local, else ``--report-dir``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .errors import PipelineError


def is_local(path: str) -> bool:
    return urlparse(path).scheme in ("", "file")


def local_dir(out: str, report_dir: str | None) -> Path:
    """The driver-side directory for summary.json and report.html (created)."""
    if report_dir:
        chosen = Path(report_dir)
    elif is_local(out):
        chosen = Path(urlparse(out).path if out.startswith("file:") else out)
    else:
        raise PipelineError(f"--out {out} is not a local path: give --report-dir for the JSON summary and the report")
    try:
        chosen.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PipelineError(f"cannot create {chosen} ({exc.strerror}): choose another --out/--report-dir") from None
    return chosen


def join(base: str, *parts: str) -> str:
    """Join path parts onto a local path or a URI."""
    return "/".join([base.rstrip("/"), *parts])


def write_parquet(df: Any, path: str, partition_by: list[str] | None = None, files: int | None = 1) -> None:
    """Overwrite ``path`` with ``df``; small tables become one file (``files``), big ones keep Spark's parts."""
    out = df.coalesce(files) if files else df
    writer = out.write.mode("overwrite")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.parquet(path)


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a reader never sees half a summary)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def rows_as_dicts(df: Any) -> list[dict[str, Any]]:
    """Collect a small DataFrame as plain dicts (for the summary and the report)."""
    return [r.asDict(recursive=True) for r in df.collect()]

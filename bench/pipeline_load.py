"""Part "pipeline": bulk-load throughput, the Spark ``load`` job against the Python producer's ``send_many``, on
the same rows, against the same node, in one run (``python -m bench --only pipeline``; the machine is shared:
compare within a run).

Every row is an unkeyed message (task, a ~120-byte JSON payload, priorities 0..2): the path that scales; 20,000 rows
quick, 100,000 full, Spark ``local[2]`` with 2 and 4 writers. Keyed rows cost one LWT each on either path, so they are
not what this compares. Queues live in the bench keyspace and expire with a one-hour retention. docs/pipeline.md
reads the figures.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from daemon.engine.client import Casque
from daemon.engine.send.producer import Job

from .env import QUEUE_RETENTION_S, out_dir, schema_settings
from .plan import Plan

CHUNK = 2000


def rows(n: int) -> list[dict[str, Any]]:
    return [{"task": "bench.noop", "n": i, "pad": "x" * 100, "p": i % 3} for i in range(n)]


async def python_send_many(settings: Any, data: list[dict[str, Any]], senders: int) -> float:
    """Seconds for ``send_many`` of every row in chunks of CHUNK, from ``senders`` concurrent loops."""
    cq = await Casque.connect(settings)
    try:
        queue = await _queue(cq)
        chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]
        started = time.monotonic()

        async def loop(mine: list[list[dict[str, Any]]]) -> None:
            for chunk in mine:
                await cq.send_many(
                    queue, [Job(r["task"], {"n": r["n"], "pad": r["pad"]}, priority=r["p"]) for r in chunk]
                )

        await asyncio.gather(*(loop(chunks[k::senders]) for k in range(senders)))
        return time.monotonic() - started
    finally:
        await cq.close()


async def _queue(cq: Casque) -> str:
    name = f"bench_load_{uuid.uuid4().hex[:8]}"
    await cq.create_queue(name, shards=16, retention=QUEUE_RETENTION_S)
    return name


def spark_load(spark: Any, settings: Any, source: str, partitions: int) -> tuple[float, dict[str, Any]]:
    from pipeline import workers
    from pipeline.load import LoadSpec, run

    queue = workers.run(_queue(workers.client(settings)))
    spec = LoadSpec.from_options(
        queue,
        source,
        "parquet",
        ["task=task", "payload=to_json(named_struct('n', n, 'pad', pad))", "priority=p"],
        [],
        "replace",
        str(out_dir("pipeline_load", f"run_{partitions}")),
        None,
        partitions,
        CHUNK,
    )
    started = time.monotonic()
    summary = run(spark, settings, spec)
    return time.monotonic() - started, summary


def part(plan: Plan, master: str = "local[2]", partitions: tuple[int, ...] = (2, 4)) -> dict[str, Any]:
    """The part at the plan's size: rows per second of each method."""
    settings = schema_settings()
    data = rows(plan.pipeline_rows)
    results: list[dict[str, Any]] = []
    for senders in (1, 4):
        seconds = asyncio.run(python_send_many(settings, data, senders))
        results.append(
            {"method": f"send_many, {senders} loop(s), chunks of {CHUNK}", "rows": len(data), "seconds": seconds}
        )
    results += _spark_runs(settings, data, master, list(partitions))
    for r in results:
        r["rows_per_s"] = round(r["rows"] / r["seconds"])
    _print(results)
    return {"rows": len(data), "master": master, "results": results}


def _spark_runs(settings: Any, data: list[dict[str, Any]], master: str, partitions: list[int]) -> list[dict[str, Any]]:
    from pipeline import workers
    from pipeline.session import start_session

    started = time.monotonic()
    spark = start_session(settings, master)
    startup = time.monotonic() - started
    out: list[dict[str, Any]] = []
    try:
        source = str(Path(out_dir("pipeline_load")) / "input.parquet")
        table = [(r["task"], r["n"], r["pad"], r["p"]) for r in data]
        spark.createDataFrame(table, "task string, n long, pad string, p int").write.mode("overwrite").parquet(source)
        for n in partitions:
            seconds, summary = spark_load(spark, settings, source, n)
            assert summary["loaded"] == len(data), summary
            out.append(
                {"method": f"spark load, {master}, {n} writers (whole job)", "rows": len(data), "seconds": seconds}
            )
            out.append(
                {
                    "method": f"spark load, {master}, {n} writers (write phase)",
                    "rows": len(data),
                    "seconds": summary["seconds"],
                }
            )
    finally:
        workers.close_all()
        spark.stop()
    out.append({"method": f"spark start-up ({master}), not in the rows above", "rows": 0, "seconds": startup})
    return out


def _print(results: list[dict[str, Any]]) -> None:
    width = max(len(r["method"]) for r in results)
    print(f"{'METHOD':<{width}}  {'ROWS':>8}  {'SECONDS':>8}  {'ROWS/S':>8}")
    for r in results:
        print(f"{r['method']:<{width}}  {r['rows']:>8}  {r['seconds']:>8.1f}  {r['rows_per_s']:>8}")

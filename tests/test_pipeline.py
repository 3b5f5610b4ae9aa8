"""The Spark pipeline against the real node: Spark in local[2], one session for the whole module.

The jobs block (they drive Spark), so async tests run them in a thread; the engine's own client
(``cq``) builds workloads and checks results. Job outputs are read back from the files they wrote.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from daemon.base.config import Settings
from daemon.base.errors import UsageError
from daemon.engine.client import Casque
from daemon.engine.operations.stats import queue_stats
from daemon.engine.schedules.triggers import make_trigger
from daemon.engine.send.producer import Job, build_message
from daemon.engine.storage.db import Database
from daemon.engine.storage.placement import id_due_ms, row_of
from daemon.engine.storage.schema import apply_schema
from daemon.engine.storage.table import ttl_for
from pipeline import archive, jars, stats, workers
from pipeline.errors import MappingError
from pipeline.load import LoadSpec
from pipeline.load import run as load
from pipeline.mapping import check_mapping, parse_pairs, to_job
from pipeline.session import JAVA17_OPTIONS, local_conf

from .conftest import ROOT, TEST_KEYSPACE

NO_HISTORY_KEYSPACE = "casque_pipeline_nohist"


@pytest.fixture(scope="module")
def spark(settings: Settings, no_history: Settings) -> Iterator[Any]:
    """One Spark session for the module. It starts after every keyspace the tests read exists: the
    connector caches the driver's schema metadata at its first read, so a keyspace created after
    that is not found (this failed on a fresh machine, where nothing was left from earlier runs)."""
    from pipeline.session import start_session

    session = start_session(settings, "local[2]")
    yield session
    workers.close_all()
    session.stop()


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return str(path)


def spec(
    queue: str, path: str, out: Path, maps: list[str], consts: list[str] | None = None, on_conflict: str = "replace"
) -> LoadSpec:
    return LoadSpec.from_options(queue, path, None, maps, consts or [], on_conflict, str(out), None, None, 2000)


def read_results(spark: Any, out: Path) -> list[dict[str, Any]]:
    return [r.asDict() for r in spark.read.parquet(str(out / "results")).collect()]


# ---- pure parts: no Spark, no Cassandra -----------------------------------------------------------
def test_mapping_turns_rows_into_the_jobs_send_would_build() -> None:
    job = to_job(
        {
            "task": "t",
            "payload": '{"a": 1}',
            "at": "2030-01-01T00:00:00Z",
            "priority": "5",
            "key": "k",
            "headers": '{"h": "v"}',
            "timeout": "30s",
            "max_attempts": 3.0,
            "seed": "s1",
        },
        "keep",
    )
    assert job == Job("t", {"a": 1}, None, 1893456000.0, 5, "30s", 3, {"h": "v"}, "k", "keep", None, b"s1")
    sched = to_job({"task": "t", "cron": "0 9 * * *", "tz": "Europe/Berlin", "times": "3"})
    assert sched.schedule == make_trigger(cron="0 9 * * *", tz="Europe/Berlin", times=3)
    for bad, words in (
        ({"task": "t", "payload": "{nope"}, "not valid JSON"),
        ({"task": "t", "priority": "1.5"}, "whole number"),
        ({"task": "t", "tz": "UTC"}, "only apply to schedules"),
        ({"task": "t", "at": "yesterday"}, "invalid at"),
        ({"task": "t", "on_conflict": "merge"}, "on_conflict"),
        ({"payload": "1"}, "task is empty"),
    ):
        with pytest.raises(Exception, match=words):
            to_job(bad)


def test_mapping_options_fail_with_one_line_naming_the_fix() -> None:
    with pytest.raises(MappingError, match="unknown field 'taks'"):
        parse_pairs(["taks=kind"], "--map")
    with pytest.raises(MappingError, match="no task"):
        check_mapping({"payload": "body"}, {})
    with pytest.raises(MappingError, match="both mapped and constant"):
        check_mapping({"task": "a"}, {"task": "b"})


def test_local_spark_gets_java17_options_and_the_cached_connector(settings: Settings) -> None:
    found = jars.ensure_connector()
    assert jars.is_installed() and any(j.name == "spark-cassandra-connector_2.12-3.5.1.jar" for j in found)
    conf = local_conf(settings, "local[2]", {"spark.driver.memory": "3g"})
    assert (
        conf["spark.driver.extraJavaOptions"] == JAVA17_OPTIONS
        and "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED" in JAVA17_OPTIONS
    )
    assert conf["spark.jars"].split(",") == [str(j) for j in found]
    assert conf["spark.cassandra.connection.host"] == "127.0.0.1" and conf["spark.driver.memory"] == "3g"


def test_cli_registers_pipeline_jobs() -> None:
    import argparse

    from pipeline.cli import add_cli

    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers())
    args = parser.parse_args(
        ["pipeline", "load", "q", "in.csv", "--map", "task=kind", "--const", "priority=2", "--on-conflict", "keep"]
    )
    assert (args.queue, args.input, args.map, args.const, args.on_conflict) == (
        "q",
        "in.csv",
        ["task=kind"],
        ["priority=2"],
        "keep",
    )
    args = parser.parse_args(["pipeline", "archive", "--out", "a", "--older-than", "30d", "--purge"])
    assert args.purge and args.older_than == "30d" and callable(args.func)
    args = parser.parse_args(
        ["pipeline", "create-queues", "users.txt", "--shards", "1", "--buckets", "1", "--expire-after", "30d"]
    )
    assert (args.input, args.shards, args.buckets, args.expire_after, args.concurrency) == (
        "users.txt",
        1,
        1,
        "30d",
        4,  # chunks of 200 names in flight per task (engine/queues/bulk_create.py), no longer single LWTs
    ) and callable(args.func)


# ---- stats ----------------------------------------------------------------------------------------
async def _known_workload(cq: Casque, q: str) -> dict[str, Any]:
    await cq.create_queue(q, shards=4, history=True)
    due_now = await cq.send_many(q, [Job("t", i, priority=i % 3) for i in range(40)])
    later = await cq.send_many(q, [Job("t", i, delay="1h") for i in range(7)])
    consumer = cq.consumer(q)
    taken = await consumer.fetch(12) + await consumer.fetch(12)
    for m in taken[:3]:
        await cq.stores.acker.poison(m, "test", "Boom", "boom")
    live = set(due_now + later) - {str(m.id) for m in taken[:3]}
    return {"taken": len(taken), "live": live, "due_now": due_now}


async def _history_rows(cq: Casque, q: str, now: int) -> None:
    """Per task: 'fast' done 10 times (1..10 ms), failed twice and poisoned once; 'slow' done 4 times."""
    day = time.strftime("%Y-%m-%d", time.gmtime(now / 1000))
    insert = cq.db.prepare(
        f"INSERT INTO {TEST_KEYSPACE}.message_history (queue, subject, day, at, id, event, task, attempt, duration_ms, "
        "lateness_ms) VALUES (?,?,?,?,?,?,?,?,?,?) USING TTL 86400"
    )
    events: list[tuple[str, str, float | None]] = []
    events += (
        [("fast", "done", float(d)) for d in range(1, 11)]
        + [("fast", "failed", 50.0)] * 2
        + [("fast", "poisoned", 60.0)]
    )
    events += [("slow", "done", 1000.0)] * 4 + [("fast", "running", None)] * 13
    for i, (task, event, duration) in enumerate(events):
        lateness = float(i) if event == "running" else None
        mid = uuid.uuid4()
        await cq.db.run(insert, [q, f"id:{mid}", day, now - 1000 - i, mid, event, task, 1, duration, lateness])


async def test_stats_job_equals_the_known_workload_and_casque_stats(
    spark: Any, settings: Settings, cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    w = await _known_workload(cq, queue_name)
    now = cq.clock.now_ms()
    await _history_rows(cq, queue_name, now)
    out = tmp_path / "stats"
    summary = await asyncio.to_thread(stats.run, spark, settings, [queue_name], now, 3600.0, str(out))
    got = summary["queues"][queue_name]
    taken = w["taken"]
    assert (got["waiting_due"], got["scheduled"], got["in_flight"], got["poisoned"]) == (40 - taken, 7, taken - 3, 3)
    oldest = min(id_due_ms(uuid.UUID(i)) for i in w["due_now"] if i in w["live"])
    assert got["oldest_due_age_s"] == (now - oldest) / 1000
    qs = await cq.stores.queues.get(queue_name)
    expected_rows = Counter(row_of(uuid.UUID(i), qs.bucket_ms, qs.buckets, qs.shards) for i in w["live"])
    per_shard = [sum(n for (_, s), n in expected_rows.items() if s == shard) for shard in range(4)]
    assert got["per_shard"] == per_shard and got["skew"] == round(max(per_shard) / (sum(per_shard) / 4), 3)
    ref = await queue_stats(cq.stores, queue_name, now_ms=now)  # casque stats, on the same data at the same instant
    assert (
        ref.waiting_due,
        ref.scheduled,
        ref.in_flight,
        ref.poisoned,
        ref.oldest_due_age_s,
        ref.per_shard,
        ref.skew,
    ) == (
        got["waiting_due"],
        got["scheduled"],
        got["in_flight"],
        got["poisoned"],
        got["oldest_due_age_s"],
        got["per_shard"],
        got["skew"],
    )
    rows = {(r.bucket, r.shard): r.total for r in spark.read.parquet(str(out / "rows")).collect()}
    assert {k: v for k, v in rows.items() if v} == dict(expected_rows) and len(rows) == qs.buckets * qs.shards
    tasks = {t["task"]: t for t in summary["history"]["tasks"]}
    fast, slow = tasks["fast"], tasks["slow"]
    assert (fast["done"], fast["failed"], fast["poisoned"], fast["started"]) == (10, 2, 1, 13)
    assert fast["failure_rate"] == 3 / 13 and fast["done_per_s"] == 10 / 3600
    assert (fast["duration_ms_p50"], fast["duration_ms_p99"], slow["duration_ms_p50"]) == (
        7.0,
        60.0,
        1000.0,
    )  # nearest rank: the 7th of 13
    assert fast["lateness_ms_p50"] is not None and slow["lateness_ms_p50"] is None
    assert json.loads((out / "summary.json").read_text())["queues"][queue_name] == got
    report = (out / "report.html").read_text()
    assert report.count("data:image/png;base64,") >= 3 and queue_name in report and "fast" in report


@pytest.fixture(scope="module")
def no_history(settings: Settings) -> Settings:
    """A keyspace of our own whose schema predates the history table."""
    other = replace(settings, cassandra=replace(settings.cassandra, keyspace=NO_HISTORY_KEYSPACE))
    db = Database(other.cassandra).connect()
    try:
        apply_schema(db, NO_HISTORY_KEYSPACE, other.schema)
        db.execute(f"DROP TABLE IF EXISTS {NO_HISTORY_KEYSPACE}.message_history")
    finally:
        db.close()
    return other


# ---- load -----------------------------------------------------------------------------------------
async def test_load_places_rows_exactly_as_the_python_producer(
    spark: Any, settings: Settings, cq: Casque, tmp_path: Path
) -> None:
    """Same jobs, one queue loaded by Spark and one sent from Python: stored rows are equal, column
    by column (ids too: seeded ids and fixed due times make them deterministic)."""
    a, b = f"par_a_{uuid.uuid4().hex[:6]}", f"par_b_{uuid.uuid4().hex[:6]}"
    for q in (a, b):
        await cq.create_queue(q, shards=8, max_attempts=4)
    at = cq.clock.now_ms() / 1000 + 3600
    rows = [
        {
            "task": f"t{i % 3}",
            "body": json.dumps({"n": i, "s": "é"}),
            "at": at + i,
            "prio": i % 7 - 3,
            "seed": f"s{i}",
            "hdr": json.dumps({"h": str(i)}) if i % 2 else None,
            "timeout": "45s" if i % 5 == 0 else None,
            "tries": 2 if i % 4 == 0 else None,
            "key": f"k{i}" if i % 10 == 0 else None,
            "every": "1m" if i % 25 == 0 else None,
        }
        for i in range(200)
    ]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    maps = [
        "task=task",
        "payload=body",
        "at=at",
        "priority=prio",
        "seed=seed",
        "headers=hdr",
        "timeout=timeout",
        "max_attempts=tries",
        "key=key",
        "every=every",
    ]
    summary = await asyncio.to_thread(load, spark, settings, spec(a, src, tmp_path / "out", maps))
    assert (summary["loaded"], summary["rejected"], summary["failed"]) == (200, 0, 0)
    fields = dict(m.split("=") for m in maps)
    jobs = [to_job({field: r[column] for field, column in fields.items()}) for r in rows]
    await cq.send_many(b, jobs)
    loaded, sent = await _stored(cq, a), await _stored(cq, b)
    qa = await cq.stores.queues.get(a, fresh=True)
    assert qa.priorities == frozenset(range(-3, 4)) == (await cq.stores.queues.get(b, fresh=True)).priorities
    plain = [i for i, r in enumerate(rows) if not r["every"] or not r["key"]]
    by_payload = lambda stored: {json.loads(r["payload"])["n"]: r for r in stored.values()}  # noqa: E731
    la, sb = by_payload(loaded), by_payload(sent)
    for i in range(200):
        x, y = dict(la[i]), dict(sb[i])
        assert abs(x.pop("ttl") - y.pop("ttl")) <= 120 and abs(x.pop("enqueued_at") - y.pop("enqueued_at")) <= 120_000
        if i not in plain:  # a keyed schedule's id is seeded by (queue, key, first fire): it differs per queue
            assert x.pop("id") != y.pop("id") and json.loads(x.pop("trigger")).pop("origin") != json.loads(
                y.pop("trigger")
            ).pop("origin")
            x.pop("bucket"), y.pop("bucket"), x.pop("shard"), y.pop("shard")
        assert x == y, i
    for i in range(200):  # and each loaded row is what build_message makes of it, placed by row_of
        r = la[i]
        m = build_message(qa, jobs[i], r["enqueued_at"])
        assert (r["due"], r["rank"], r["max_attempts"], r["timeout_ms"], r["key"]) == (
            m.due_ms,
            m.rank,
            m.max_attempts,
            m.timeout_ms,
            m.key,
        )
        assert (r["bucket"], r["shard"]) == row_of(uuid.UUID(r["id"]), qa.bucket_ms, qa.buckets, qa.shards)
        assert (
            abs(r["ttl"] - ttl_for(r["due"], r["enqueued_at"], qa.retention_s)) <= 120
            and r["kind"] == 1
            and r["state"] == 0
        )


async def _stored(cq: Casque, q: str) -> dict[str, dict[str, Any]]:
    """Every stored message of a queue, every column, read through the engine's row list."""
    from daemon.engine.storage.table import all_rows

    qs = await cq.stores.queues.get(q, fresh=True)
    stmt = cq.db.prepare(
        "SELECT bucket, shard, kind, rank, due, id, state, task, payload, headers, attempt, "
        "max_attempts, timeout_ms, key, "
        f"trigger, enqueued_at, last_error, TTL(task) AS ttl FROM {TEST_KEYSPACE}.messages WHERE "
        "queue = ? AND bucket = ? "
        "AND shard = ? AND kind = 1"
    )
    out = {}
    for bucket, shard in all_rows(qs):
        for r in await cq.db.run_all(stmt, [q, bucket, shard]):
            out[str(r.id)] = {
                **r._asdict(),
                "id": str(r.id),
                "payload": r.payload.decode(),
                "headers": dict(r.headers or {}),
            }
    return out


async def test_load_20k_rows_then_every_one_is_consumed_like_python_sends(
    spark: Any, settings: Settings, cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    """20,000 rows: each of the two writers (local[2]) sends about five chunks of 2,000, the keyed rows go by key
    shard, and the consumer reads 40 fetches of 500 across 16 shards; every row delivered once."""
    await cq.create_queue(queue_name, shards=16)
    rows: list[dict[str, Any]] = [{"task": "t", "n": i, "p": (0, 0, 1, -1, 3)[i % 5]} for i in range(19_000)]
    rows += [
        {"task": "t", "n": 19_000 + i, "p": 0, "key": f"key-{i % 300}"} for i in range(900)
    ]  # 3 rows per key: the last wins
    rows += [
        {"task": "tick", "n": 19_900 + i, "p": 0, "key": f"sched-{i}", "every": "1s", "times": 2} for i in range(100)
    ]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    maps = ["task=task", "payload=to_json(named_struct('n', n))", "priority=p", "key=key", "every=every", "times=times"]
    started = time.monotonic()
    summary = await asyncio.to_thread(load, spark, settings, spec(queue_name, src, tmp_path / "out", maps))
    seconds = time.monotonic() - started
    assert (summary["rows"], summary["loaded"], summary["rejected"], summary["failed"]) == (20_000, 20_000, 0, 0)
    assert summary["replaced"] == summary["keys_conflicting"] == 600
    print(f"\nload: 20,000 rows in {seconds:.1f}s ({summary['rows_per_s']} rows/s inside the write)")
    assert 3 in (await cq.stores.queues.get(queue_name, fresh=True)).priorities
    delivered = await _consume(cq, queue_name, expected=19_000 + 300 + 200)
    plain = Counter(m["n"] for m in delivered if m["n"] < 19_000)
    assert len(plain) == 19_000 and set(plain.values()) == {1}
    keyed = sorted(m["n"] for m in delivered if 19_000 <= m["n"] < 19_900)
    assert keyed == list(range(19_600, 19_900))  # per key, the last row in input order replaced the two before it
    ticks = Counter((m["key"], m["occurrence"]) for m in delivered if m["n"] >= 19_900)
    assert ticks == Counter({(f"sched-{i}", n): 1 for i in range(100) for n in (1, 2)})
    s = await queue_stats(cq.stores, queue_name)
    assert (s.waiting_due, s.scheduled, s.in_flight) == (0, 0, 0)


async def _consume(cq: Casque, q: str, expected: int, limit_s: float = 240.0) -> list[dict[str, Any]]:
    """Fetch and ack until ``expected`` deliveries (then a few empty rounds to catch extras)."""
    consumer, empty = cq.consumer(q), 0
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and (len(out) < expected or empty < 3):
        got = await consumer.fetch(500)
        if not got:
            empty += 1
            await asyncio.sleep(0.2)
            continue
        empty = 0
        await cq.stores.acker.ack(got)
        out += [{"n": m.payload["n"], "key": m.key, "occurrence": (m.trigger or {}).get("n")} for m in got]
    assert len(out) == expected, f"{len(out)} delivered, {expected} expected"
    return out


async def test_bad_rows_land_in_the_reject_output_with_reasons(
    spark: Any, settings: Settings, cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    await cq.create_queue(queue_name, shards=2, max_payload_bytes=100)
    held = await cq.send(queue_name, "t", "first", key="taken")
    cases = [
        ("", "{}", "", "", "", "", "task is empty"),
        (" padded", "{}", "", "", "", "", "invalid task name"),
        ("t", "{oops", "", "", "", "", "payload is not valid JSON"),
        ("t", json.dumps("x" * 200), "", "", "", "", "over the queue's limit"),
        ("t", "1", "5000", "", "", "", "invalid priority"),
        ("t", "1", "", "10s", "2030-01-01T00:00:00Z", "", "either a delay or an absolute time"),
        ("t", "1", "", "", "next tuesday", "", "invalid at"),
        ("t", "1", "", "", "", "taken", "already names message"),
        ("t", "1", "", "soon", "", "", "invalid delay"),
    ]
    good = [("t", json.dumps({"ok": i}), "1", "", "", "", None) for i in range(5)]
    path = tmp_path / "in.csv"
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["name", "body", "prio", "delay", "at", "k"])
        out.writerows(row[:6] for row in cases + good)
    maps = ["task=name", "payload=body", "priority=prio", "delay=delay", "at=at", "key=k"]
    summary = await asyncio.to_thread(
        load, spark, settings, spec(queue_name, str(path), tmp_path / "out", maps, on_conflict="error")
    )
    assert (summary["loaded"], summary["rejected"], summary["keys_conflicting"]) == (5, len(cases), 1)
    rejects = sorted(
        (r for r in read_results(spark, tmp_path / "out") if r["status"] == "rejected"), key=lambda r: r["row"]
    )
    for r, case in zip(rejects, cases):
        assert case[-1] in r["reason"], (r, case)
        assert json.loads(r["input"])["body"] == case[1] and r["error"] in ("UsageError", "PayloadError", "KeyConflict")
    peeked = await cq.peek(queue_name, 50)
    assert sorted(m.payload["ok"] for m in peeked if m.payload != "first") == list(range(5))
    entry = await cq.get_key(queue_name, "taken")
    assert entry is not None and str(entry.id) == held  # the conflicting row changed nothing
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["rejected"] == len(cases)


# ---- archive --------------------------------------------------------------------------------------
async def test_archive_round_trip_reads_back_equal_then_purges_only_what_it_archived(
    spark: Any, settings: Settings, cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    await cq.create_queue(queue_name, shards=1)  # one shard row: one fetch takes all eight
    await cq.send_many(queue_name, [Job("t", {"n": i}, headers={"i": str(i)}) for i in range(8)])
    for m in await cq.consumer(queue_name).fetch(8):
        await cq.stores.acker.poison(m, "test", "Boom", f"boom {m.payload['n']}")
    now = cq.clock.now_ms()
    cutoff = now + 1
    insert = cq.db.prepare(
        f"INSERT INTO {TEST_KEYSPACE}.message_history (queue, subject, day, at, id, event, "
        "task, attempt, duration_ms, error, key) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?) USING TTL 864000"
    )
    ages = [3 * 86_400_000, 2 * 86_400_000, 60_000, -60_000]  # the last one is after the cut-off
    for i, age in enumerate(ages):
        at = now - age
        await cq.db.run(
            insert,
            [
                queue_name,
                f"key:k{i}",
                time.strftime("%Y-%m-%d", time.gmtime(at / 1000)),
                at,
                uuid.uuid4(),
                "done",
                "t",
                1,
                1.5,
                None,
                f"k{i}",
            ],
        )
    poison_before = {str(p.id): p for p in await cq.stores.poison.list(queue_name)}
    assert len(poison_before) == 8
    spec_ = archive.ArchiveSpec(out=str(tmp_path / "arch"), cutoff_ms=cutoff, queues=[queue_name], purge=True)
    manifest = await asyncio.to_thread(archive.run, spark, settings, spec_)
    h, p = manifest["tables"]["history"], manifest["tables"]["poison"]
    assert (h["archived"], h["verified"], h["purged"]) == (3, True, 3)
    assert (p["archived"], p["verified"], p["purged"]) == (8, True, 8)
    back = {r.id: r for r in spark.read.parquet(p["path"]).collect()}
    for pid, rec in poison_before.items():
        r = back[pid]
        assert (r.task, bytes(r.payload), r.headers, r.error, r.reason, r.attempt) == (
            rec.task,
            rec.payload,
            rec.headers,
            rec.error,
            rec.reason,
            rec.attempt,
        )
        assert str(r.date) == time.strftime("%Y-%m-%d", time.gmtime(rec.poisoned_at / 1000))
    hist = sorted(spark.read.parquet(h["path"]).collect(), key=lambda r: r.at)
    assert [r.key for r in hist] == ["k0", "k1", "k2"] and [str(r.date) for r in hist] == [r.day for r in hist]
    assert await cq.stores.poison.count(queue_name) == 0
    left = []
    for i, age in enumerate(ages):
        day = time.strftime("%Y-%m-%d", time.gmtime((now - age) / 1000))
        left += await cq.db.run(
            f"SELECT key FROM {TEST_KEYSPACE}.message_history WHERE queue = %s AND subject = %s AND day = %s",
            [queue_name, f"key:k{i}", day],
        )
    assert sorted({r.key for r in left}) == ["k3"]  # after the cut-off: kept
    assert (
        json.loads((tmp_path / "arch" / f"archive-{manifest['run']}.json").read_text())["tables"]["poison"]["purged"]
        == 8
    )


# ---- create-queues: bulk-create queues from a dataset of names ------------------------------------
async def test_create_queues_job_creates_each_name_once_and_rejects_bad_ones(
    spark: Any, settings: Settings, cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    """300 names (50 listed twice) and 2 bad ones: 300 tiny queues created, duplicates counted as
    existing, the bad names rejected with the reason; a second run creates nothing."""
    from pipeline.queues import QueuesSpec
    from pipeline.queues import run as create_queues

    names = [f"{queue_name}_{i}" for i in range(300)]
    src = tmp_path / "names.txt"
    src.write_text("\n".join(names + names[:50] + ["bad name!", "also/bad", ""]) + "\n")
    spec = QueuesSpec.from_options(
        str(src), None, None, {"shards": 1, "buckets": 1, "expire_after": 86400.0}, 3, 8, str(tmp_path / "r")
    )
    first = await asyncio.to_thread(create_queues, spark, settings, spec)
    assert (first["names"], first["created"], first["existing"], first["rejected"]) == (352, 300, 50, 2)
    assert {r["name"] for r in first["rejects"]} <= {"bad name!", "also/bad"}
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["created"] == 300
    for name in (names[0], names[-1]):
        qs = await cq.stores.queues.get(name, fresh=True)
        assert (qs.shards, qs.buckets, qs.expire_after_s) == (1, 1, 86400)
    indexed, more = await cq.stores.queues.names.matching(f"{queue_name}_", None, 1000)
    assert set(indexed) == set(names) and not more, "bulk creation indexes every name for ListQueues' prefixes"
    again = await asyncio.to_thread(create_queues, spark, settings, spec)
    assert (again["created"], again["existing"]) == (0, 350)
    with pytest.raises(UsageError, match="shards must be between 1"):
        QueuesSpec.from_options(str(src), None, None, {"shards": 0}, None, 8, None)
    from daemon.engine.operations.queue_actions import delete_queue

    for name in names:  # the keyspace is shared: leave no 300 queues behind for other listings
        await delete_queue(cq.stores, name)


# ---- the cluster path: spark-submit with the entry script -----------------------------------------
async def test_spark_submit_runs_the_stats_job_through_the_entry_script_and_it_says_there_is_no_history_table(
    no_history: Settings, queue_name: str, tmp_path: Path
) -> None:
    """The stats job through spark-submit and the entry script (its own JVM, as on a cluster), on a keyspace whose
    schema predates the history table: the job runs, counts the queue and says why it has no task statistics.
    One Spark start for both properties; and that keyspace holds only this test's queues, where the suite's own
    (tables read whole by the job: queues, history) grows with every test file that ran before."""
    from pyspark import find_spark_home

    from daemon.devnode import find_java
    from pipeline.session import EXTENSIONS

    cq = await Casque.connect(no_history)
    try:
        await cq.create_queue(queue_name, shards=2)
        await cq.send_many(queue_name, [Job("t", i) for i in range(5)])
    finally:
        await cq.close()
    cfg = tmp_path / "casque.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{NO_HISTORY_KEYSPACE}"\n')
    entry, jar_list = [
        (
            await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "pipeline", verb],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
            )
        ).stdout.strip()
        for verb in ("entry", "jar")
    ]
    java = find_java()
    env = {**os.environ, "JAVA_HOME": str(java.java_home), "PYSPARK_PYTHON": sys.executable, "CASQUE_CONFIG": str(cfg)}
    cmd = [
        os.path.join(find_spark_home._find_spark_home(), "bin", "spark-submit"),
        "--master",
        "local[2]",
        "--jars",
        jar_list,
        "--conf",
        f"spark.sql.extensions={EXTENSIONS}",
        "--conf",
        f"spark.driver.extraJavaOptions={JAVA17_OPTIONS}",
        entry,
        "stats",
        "--queues",
        queue_name,
        "--out",
        str(tmp_path / "out"),
    ]
    done = await asyncio.to_thread(
        subprocess.run, cmd, capture_output=True, text=True, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert queue_name in done.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["queues"][queue_name]["waiting_due"] == 5
    assert summary["history"]["available"] is False and "no history table" in summary["history"]["note"]
    assert "No task statistics" in (tmp_path / "out" / "report.html").read_text()

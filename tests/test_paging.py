"""Listings and bulk actions past the driver's first page (5,000 rows), against the real node.

Before paging, ``poison list``, ``poison replay --all`` and ``schedules`` read only the first page
of a partition and silently missed the rest. Each test here uses more than 5,000 rows and counts
every one of them (a ledger of payloads), so a truncated read fails by the number it missed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cassandra.query import BatchStatement, SimpleStatement

from daemon.base.errors import StorageUnavailable
from daemon.engine.client import Casque
from daemon.engine.operations.queue_actions import replay
from daemon.engine.send.producer import Job, build_message
from daemon.engine.storage.db import Database
from daemon.engine.storage.paging import PAGE_SIZE
from daemon.engine.storage.placement import key_shard, row_of
from daemon.engine.storage.table import all_rows, message_from_row

from .conftest import TEST_KEYSPACE

ROOT = Path(__file__).resolve().parent.parent
FIRST_PAGE = 5000


def casque(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", "-c", str(cfg), *args], cwd=ROOT, capture_output=True, text=True
    )


def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{TEST_KEYSPACE}"\n')
    return cfg


async def bounded(jobs: list[Any], parallel: int = 64) -> list[Any]:
    sem = asyncio.Semaphore(parallel)

    async def one(job: Any) -> Any:
        async with sem:
            return await job

    return await asyncio.gather(*(one(j) for j in jobs))


def batches(db: Database, statements: list[Any], size: int = 200) -> list[BatchStatement]:
    """The database's own unlogged batches of ``size`` statements, for setup writes to one partition each
    (Cassandra applies a single-partition batch as one mutation): a few dozen requests instead of thousands."""
    out = []
    for start in range(0, len(statements), size):
        batch = db.batch()
        for stmt in statements[start : start + size]:
            batch.add(stmt)
        out.append(batch)
    return out


async def poison_many(cq: Casque, queue: str, count: int) -> None:
    """``count`` records in the queue's poison partition, written by the poison store's own statement."""
    qs = await cq.stores.queues.get(queue)
    now = cq.clock.now_ms()
    messages = [build_message(qs, Job("t", {"n": i}), now) for i in range(count)]
    adds = [cq.stores.poison.add_statement(m, "test", "Poison", "boom", "", now, 3600) for m in messages]
    await bounded([cq.db.run(b) for b in batches(cq.db, adds)])


async def keyed_many(cq: Casque, queue: str, count: int) -> None:
    """``count`` keyed messages, written in bulk: the messages by send_many, their key rows by plain
    inserts (what a keyed send leaves behind, minus the LWT that would make setup take minutes), batched per
    ``keys`` partition."""
    ids = await cq.send_many(queue, [Job("t", {"n": i}, delay="1h") for i in range(count)])
    qs = await cq.stores.queues.get(queue)
    insert = cq.db.prepare(
        f"INSERT INTO {TEST_KEYSPACE}.keys (queue, key_shard, key, id, bucket, shard, task, created_at) VALUES "
        "(?,?,?,?,?,?,?,?)"
    )
    per_partition: dict[int, list[Any]] = {}
    for i, sent in enumerate(ids):
        k, mid = f"k{i:05d}", uuid.UUID(sent)
        row = row_of(mid, qs.bucket_ms, qs.buckets, qs.shards)
        per_partition.setdefault(key_shard(k), []).append(insert.bind([queue, key_shard(k), k, mid, *row, "t", 0]))
    await bounded([cq.db.run(b) for stmts in per_partition.values() for b in batches(cq.db, stmts)])


async def queued_payloads(cq: Casque, queue: str) -> list[int]:
    """Every message in the queue's rows, read in full (run_all pages), as its payload number."""
    qs = await cq.stores.queues.get(queue, fresh=True)
    out: list[int] = []
    for bucket, shard in all_rows(qs):
        for rank in qs.ranks():
            rows = await cq.db.run_all(cq.stores.table.read_rank, [queue, bucket, shard, rank, 0, 1 << 30])
            out += [message_from_row(queue, bucket, shard, r).payload["n"] for r in rows]
    return out


async def test_poison_list_pages_past_the_first_page_in_the_cli(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    await cq.create_queue(queue_name, shards=2, buckets=2)
    await poison_many(cq, queue_name, 6_500)
    cfg = config(tmp_path)
    first = casque(cfg, "poison", "list", queue_name, "--limit", "5500", "--json")
    assert first.returncode == 0, first.stderr
    page1 = [r["id"] for r in json.loads(first.stdout)]
    assert len(page1) == 5500
    hint = first.stderr.strip().splitlines()[-1]
    assert f"--after {page1[-1]}" in hint
    second = casque(cfg, "poison", "list", queue_name, "--limit", "5500", "--after", page1[-1], "--json")
    assert second.returncode == 0, second.stderr
    page2 = [r["id"] for r in json.loads(second.stdout)]
    assert len(page2) == 1000 and "next page" not in second.stderr
    assert len(set(page1) | set(page2)) == 6500
    assert len(await cq.stores.poison.list(queue_name, limit=None)) == 6500


@pytest.mark.slow
async def test_poison_replay_all_sends_back_6000(cq: Casque, queue_name: str) -> None:
    """6,000 poisoned: a thousand past the driver's first page (the replay itself reads pages of
    paging.PAGE_SIZE, 1,000: six of them, deleting as it goes). Replay sends one by one, so each
    record costs a send and a delete: the size is what the property needs, no more."""
    count = 6_000
    assert count >= FIRST_PAGE + PAGE_SIZE  # a whole replay page past the driver's first page
    await cq.create_queue(queue_name, shards=4, buckets=2)
    await poison_many(cq, queue_name, count)
    new_ids, left = await replay(cq.stores, queue_name)
    assert left == [] and len(new_ids) == len(set(new_ids)) == count
    assert await cq.stores.poison.count(queue_name) == 0
    ledger = await queued_payloads(cq, queue_name)
    assert len(ledger) == count and set(ledger) == set(range(count))  # none lost, none twice


@pytest.mark.slow
async def test_schedules_lists_every_key_past_the_first_page(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    await cq.create_queue(queue_name, shards=32, buckets=2)  # a lookup by id filters its row: keep rows small
    count = 5_300
    await keyed_many(cq, queue_name, count)
    everything = await cq.schedules(queue_name)
    assert [e.key for e, _ in everything] == [f"k{i:05d}" for i in range(count)]
    assert all(m is not None and m.payload == {"n": int(e.key[1:])} for e, m in everything)
    # the listing's pages (limit, after) add up to every key, walked on the key store that cq.schedules and the CLI
    # page with (cq.schedules adds each key's message lookup, proven above for all 5,300; the CLI below pages
    # through cq.schedules past the 5,000th key)
    pages, after = [], ""
    while True:
        entries = await cq.stores.keys.list(queue_name, limit=2000, after=after)
        if not entries:
            break
        pages.append([e.key for e in entries])
        after = entries[-1].key
    assert [len(p) for p in pages] == [2000, 2000, 1300]
    assert [k for p in pages for k in p] == [e.key for e, _ in everything]
    cli = casque(config(tmp_path), "schedules", queue_name, "--limit", "3", "--after", "k05200", "--json")
    assert cli.returncode == 0, cli.stderr
    assert [d["key"] for d in json.loads(cli.stdout)] == ["k05201", "k05202", "k05203"]
    assert "--after k05203" in cli.stderr


def test_bad_limit_is_one_line(tmp_path: Path) -> None:
    done = casque(config(tmp_path), "schedules", "anything", "--limit", "0")
    assert done.returncode == 2
    assert "invalid --limit '0': give a whole number of at least 1" in done.stderr


async def test_history_by_key_reads_its_own_partition_past_the_first_page(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    from daemon.engine.observe.history import History

    qs = await cq.create_queue(queue_name, history=True)
    history = History(cq.db, TEST_KEYSPACE, cq.stores.queues)
    now = cq.clock.now_ms()
    runs = 2_600  # x 2 events: 5,200 rows in the key's partition
    for i in range(runs):
        m = build_message(qs, Job("t", None, key="busy"), now)
        history.record("started", m, 0.0, now + i, qs)
        history.record("acked", m, 0.001, now + i, qs)
        if i % 200 == 0:
            await history.flush()
    for _ in range(50):  # another key's runs share no partition with it
        history.record("acked", build_message(qs, Job("t", None, key="other"), now), 0.001, now, qs)
    await history.flush()
    assert history.dropped == 0
    done = casque(config(tmp_path), "history", queue_name, "--key", "busy", "--days", "1", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) == 2 * runs and {r["key"] for r in rows} == {"busy"}
    assert [r["event"] for r in rows[:2]] == ["running", "done"]
    assert len(await history.read(queue_name, now, 1, key="other")) == 50


async def one_row_of(cq: Casque, queue: str, count: int) -> str:
    """``count`` messages in one partition (a 1 x 1 queue), and a read of their ids a page per row."""
    await cq.create_queue(queue, shards=1, buckets=1)
    await cq.send_many(queue, [Job("t", {"n": i}) for i in range(count)])
    return f"SELECT id FROM {TEST_KEYSPACE}.messages WHERE queue = %s AND bucket = 0 AND shard = 0 AND kind = 1"


async def test_run_all_reads_every_page_as_one_request(cq: Casque, queue_name: str) -> None:
    """2,500 rows read 7 to a page: every row comes back, in clustering order, counted as one request."""
    cql = await one_row_of(cq, queue_name, 2500)
    first = await cq.db.run(SimpleStatement(cql, fetch_size=7), [queue_name])
    assert len(first) == 7  # the statement really pages
    stmt = SimpleStatement(cql, fetch_size=7)
    seen: list[object] = []
    with Database.observing(lambda db, st: seen.append(st) if st is stmt else None):
        rows = await cq.db.run_all(stmt, [queue_name])
    assert len(seen) == 1  # observers (bench/cqlcount.py) see one request for the whole read
    assert len(rows) == len({r.id for r in rows}) == 2500
    assert [r.id for r in rows] == [r.id for r in await cq.db.run(SimpleStatement(cql, fetch_size=5000), [queue_name])]


async def test_a_paged_read_cut_by_a_closing_session_ends_with_a_clear_error(cq: Casque, queue_name: str) -> None:
    """A daemon that stops closes its session, maybe while a listing pages. The read must end with
    StorageUnavailable within its request timeout. Before, run_all paged in a thread through the driver's
    blocking iterator, whose wait for the next page has no bound: that page never came, the thread hung,
    and the process could not exit (a daemon left running 60 s after SIGTERM, test_stats). With the thread,
    this test hung in 2 of 3 runs."""
    cql = await one_row_of(cq, queue_name, 2000)
    db = Database(replace(cq.settings.cassandra, request_timeout=2.0)).connect()
    read = asyncio.create_task(db.run_all(SimpleStatement(cql, fetch_size=1), [queue_name]))  # 2,000 round trips
    probe = f"SELECT id FROM {TEST_KEYSPACE}.messages WHERE queue = %s AND bucket = 0 AND shard = 0 LIMIT 1"
    for _ in range(100):  # round trips on the same connection, one after another: the paging is well under way
        await db.run(probe, [queue_name])
    assert not read.done()
    db.close()
    with pytest.raises(StorageUnavailable):
        await asyncio.wait_for(read, 2.0 + 10)

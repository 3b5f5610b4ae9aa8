"""Creating queues without an LWT (issue 28, engine/queues/bulk_create.py), against the real node.

The rule under test: a name already taken is never written over, and two creators racing for one
new name are never both told "created". The races are made to happen: separate processes (each
its own session) start together on the same names with different settings, many rounds, and the
count of names each process found claimed by a racer shows the contended path ran.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.base.config import Settings
from daemon.base.errors import UsageError
from daemon.base.model import QueueSettings
from daemon.engine.client import Casque
from daemon.engine.queues.names import partition_of

from .conftest import ROOT, TEST_KEYSPACE
from .test_many_queues import casque_cli

PROCESSES = 4
ROUNDS = 4
NAMES_PER_ROUND = 200

#: One racing creator: for each round, says it is ready, waits for that round's go file, then
#: creates the round's names with its own max_attempts (its index), in small chunks so the
#: processes' requests interleave; odd racers go through the names backwards, so any two racers
#: that overlap in time cross on some names whatever their start offsets. Prints what it was told
#: created per round and how many names it found claimed by a racer.
RACER = """
import asyncio, json, os, sys, time
from daemon.base.config import Settings
from daemon.engine.client import Casque

async def main(index, go, rounds):
    s = Settings()
    s.cassandra.keyspace = os.environ["KS"]
    s.cassandra.consistency = "LOCAL_QUORUM"
    cq = await Casque.connect(s)
    created = []
    for r, names in enumerate(rounds):
        open(f"{go}.ready{index}.{r}", "w").close()
        deadline = time.monotonic() + 120
        while not os.path.exists(f"{go}.{r}"):
            assert time.monotonic() < deadline, "no go signal"
            await asyncio.sleep(0.002)
        existing = []
        order = names if index % 2 else names[::-1]
        await cq.create_queues(order, shards=1, buckets=1, max_attempts=index, chunk=10, concurrency=4,
                               on_existing=lambda n, same: existing.append(n))
        created.append(sorted(set(names) - set(existing)))
    print(json.dumps({"created": created, "contended": cq.stores.queues.bulk.contended}))
    await cq.close()

asyncio.run(main(int(sys.argv[1]), sys.argv[2], json.loads(open(sys.argv[3]).read())))
"""


@pytest.fixture
async def made(cq: Casque) -> AsyncIterator[list[str]]:
    """Names a test creates, removed afterwards (they never hold messages: the rows and index
    entries are all there is), so the shared keyspace's listings do not grow each run."""
    names: list[str] = []
    yield names
    ks = cq.settings.cassandra.keyspace
    for i in range(0, len(names), 200):
        part = names[i : i + 200]
        await cq.db.run(cq.db.prepare(f"DELETE FROM {ks}.queues WHERE name IN ?"), [part])
        await cq.db.run(cq.db.prepare(f"DELETE FROM {ks}.queue_expiry WHERE name IN ?"), [part])
        for name in part:
            await cq.db.run(
                cq.db.prepare(f"DELETE FROM {ks}.queue_names WHERE prefix = ? AND name = ?"), [partition_of(name), name]
            )


async def max_attempts_of(cq: Casque, name: str) -> int:
    return (await cq.stores.queues.get(name, fresh=True)).max_attempts


async def test_racing_processes_never_both_create_a_name_and_the_row_is_the_winners(
    cq: Casque, queue_name: str, made: list[str], tmp_path: Path
) -> None:
    rounds = [[f"{queue_name}_r{r}_{i}" for i in range(NAMES_PER_ROUND)] for r in range(ROUNDS)]
    made += [n for names in rounds for n in names]
    go, plan = tmp_path / "go", tmp_path / "rounds.json"
    plan.write_text(json.dumps(rounds))
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(index), str(go), str(plan)],
            cwd=ROOT,
            env=dict(os.environ, KS=TEST_KEYSPACE, PYTHONPATH=str(ROOT)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in range(1, PROCESSES + 1)
    ]
    for r in range(ROUNDS):  # each round starts when every racer is ready for it, all at once
        deadline = time.monotonic() + 120
        while not all(Path(f"{go}.ready{i}.{r}").exists() for i in range(1, PROCESSES + 1)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in racers), f"round {r}: a racer is gone"
            await asyncio.sleep(0.01)
        Path(f"{go}.{r}").write_text("go")
    results = []
    for p in racers:
        out, err = await asyncio.to_thread(p.communicate, None, 300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    for r, names in enumerate(rounds):
        winners: dict[str, list[int]] = {n: [] for n in names}
        for index, result in enumerate(results, 1):
            for name in result["created"][r]:
                winners[name].append(index)
        twice = {n: w for n, w in winners.items() if len(w) != 1}
        assert not twice, f"round {r}: names not created exactly once: {dict(list(twice.items())[:5])}"
        for name in (names[0], names[len(names) // 2], names[-1]):
            assert await max_attempts_of(cq, name) == winners[name][0], "the row holds the winner's settings"
        stored = await cq.db.run(
            cq.db.prepare(f"SELECT name, max_attempts FROM {TEST_KEYSPACE}.queues WHERE name IN ?"), [names]
        )
        assert {row.name: row.max_attempts for row in stored} == {n: w[0] for n, w in winners.items()}
    contended = sum(r["contended"] for r in results)
    assert contended > 0, "the racers never met a claim: the race did not happen"
    print(f"{PROCESSES} processes x {ROUNDS} rounds x {NAMES_PER_ROUND} names: {contended} names met a racer's claim")


async def test_an_existing_queue_is_never_changed_by_a_bulk_create_with_other_settings(
    cq: Casque, queue_name: str, made: list[str]
) -> None:
    names = [f"{queue_name}_{i}" for i in range(40)]
    made += names
    await cq.create_queue(names[7], shards=1, buckets=1, max_attempts=7)
    seen: list[tuple[str, bool]] = []
    created = await cq.create_queues(
        names, shards=1, buckets=1, max_attempts=9, on_existing=lambda n, same: seen.append((n, same))
    )
    assert created == 39 and seen == [(names[7], False)]
    assert await max_attempts_of(cq, names[7]) == 7 and await max_attempts_of(cq, names[8]) == 9
    again: list[tuple[str, bool]] = []
    assert (
        await cq.create_queues(
            names, shards=1, buckets=1, max_attempts=9, on_existing=lambda n, s: again.append((n, s))
        )
        == 0
    )
    assert sorted(again) == sorted([(n, n != names[7]) for n in names])
    with pytest.raises(UsageError, match="already exists"):
        await cq.create_queue(names[7], shards=1, buckets=1, max_attempts=8)
    assert await max_attempts_of(cq, names[7]) == 7


async def test_a_queue_made_by_the_old_lwt_path_is_left_as_it_is(cq: Casque, queue_name: str, made: list[str]) -> None:
    """A row written by ``INSERT ... IF NOT EXISTS`` before this change (no claims column set)."""
    made.append(queue_name)
    old = cq.db.prepare(
        f"INSERT INTO {TEST_KEYSPACE}.queues (name, shards, buckets, bucket_seconds, lock_ttl_ms, timeout_ms, "
        "max_attempts, retention_s, max_payload_bytes, priorities, history) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?) IF NOT EXISTS"
    )
    rows = await cq.db.run(old, [queue_name, 1, 1, 60, 30000, 30000, 3, 86400, 262144, {0}, False])
    assert rows[0].applied
    assert await cq.create_queues([queue_name], shards=2, buckets=2, max_attempts=5) == 0
    row = await cq.stores.queues.read_row(queue_name)  # a copy-layout queue's row: read, not served (get refuses)
    assert row is not None
    assert (row.shards, row.buckets, row.max_attempts, row.in_flight) == (1, 1, 3, None)


async def test_single_creates_racing_a_bulk_create_give_each_name_one_creator(
    settings: Settings, cq: Casque, queue_name: str, made: list[str]
) -> None:
    """``create_queue`` (one name, as CLI and console create) and ``create_queues`` follow one
    protocol: racing on the same names through two sessions, each name has exactly one creator."""
    names = [f"{queue_name}_{i}" for i in range(60)]
    made += names
    other = await Casque.connect(settings)
    try:

        async def singles() -> set[str]:
            won = await asyncio.gather(
                *(other.stores.queues.create(_tiny(other, n, 1), if_missing=True) for n in names)
            )
            return {n for n, w in zip(names, won) if w}

        existing: list[str] = []
        bulk = cq.create_queues(  # backwards: the two sides cross on some names whichever starts first
            names[::-1], shards=1, buckets=1, max_attempts=2, chunk=10, on_existing=lambda n, s: existing.append(n)
        )
        before = cq.stores.queues.bulk.contended
        single_won, _ = await asyncio.gather(singles(), bulk)
        met = cq.stores.queues.bulk.contended - before + other.stores.queues.bulk.contended
    finally:
        await other.close()
    print(f"single creates vs a bulk create on {len(names)} names: {met} names met the other's claim")
    assert met > 0, "the two sides never met a claim: the race did not happen"
    bulk_won = set(names) - set(existing)
    assert single_won.isdisjoint(bulk_won) and single_won | bulk_won == set(names)
    for name in names:
        assert await max_attempts_of(cq, name) == (1 if name in single_won else 2)


def _tiny(cq: Casque, name: str, max_attempts: int) -> QueueSettings:
    from daemon.engine.queues.settings import settings_from_defaults

    return settings_from_defaults(name, cq.settings.queue_defaults, shards=1, buckets=1, max_attempts=max_attempts)


async def test_same_settings_twice_at_once_creates_each_name_once(
    settings: Settings, cq: Casque, queue_name: str, made: list[str]
) -> None:
    names = [f"{queue_name}_{i}" for i in range(300)]
    made += names
    other = await Casque.connect(settings)
    try:
        a, b = await asyncio.gather(
            cq.create_queues(names, shards=1, buckets=1, chunk=20),
            other.create_queues(names, shards=1, buckets=1, chunk=20),
        )
    finally:
        await other.close()
    assert a + b == len(names), "identical settings: every name created once, the other creator told it exists"


async def test_a_crashed_creators_claim_delays_the_name_until_it_expires_never_loses_it(
    cq: Casque, queue_name: str, made: list[str]
) -> None:
    """A claim left by a creator that died between its claim and its write: the name is contended
    until that claim's TTL ends, then created."""
    made.append(queue_name)
    await cq.db.run(
        cq.db.prepare(f"UPDATE {TEST_KEYSPACE}.queues USING TTL 2 SET claims = claims + ? WHERE name = ?"),
        [{uuid.uuid4()}, queue_name],
    )
    before = cq.stores.queues.bulk.contended
    started = time.monotonic()
    assert await cq.create_queues([queue_name], shards=1, buckets=1) == 1
    assert cq.stores.queues.bulk.contended > before and time.monotonic() - started >= 0.9
    assert (await cq.stores.queues.get(queue_name, fresh=True)).shards == 1


async def test_a_deleted_queue_can_be_created_again_at_once(cq: Casque, queue_name: str) -> None:
    """A creator removes its claim in the write that creates the row, so nothing lingers to delay a re-create."""
    from daemon.engine.operations.queue_actions import delete_queue

    await cq.create_queue(queue_name, shards=1, buckets=1, max_attempts=4)
    await delete_queue(cq.stores, queue_name)
    before = cq.stores.queues.bulk.contended
    assert await cq.create_queues([queue_name], shards=1, buckets=1, max_attempts=6) == 1
    assert cq.stores.queues.bulk.contended == before and await max_attempts_of(cq, queue_name) == 6
    [row] = await cq.db.run(cq.db.prepare(f"SELECT claims FROM {TEST_KEYSPACE}.queues WHERE name = ?"), [queue_name])
    assert not row.claims, "the creator's claim went with its write"
    await delete_queue(cq.stores, queue_name)


# ---- the CLI ----------------------------------------------------------------------------------------
async def test_cli_create_many_says_what_it_created_and_what_existed(
    cq: Casque, queue_name: str, made: list[str], tmp_path: Path
) -> None:
    names = [f"{queue_name}_{i}" for i in range(25)]
    made += names
    await cq.create_queue(names[3], shards=1, buckets=1, max_attempts=11)
    src = tmp_path / "names.txt"
    src.write_text("# users\n" + "\n".join(names) + "\n")
    done = await asyncio.to_thread(casque_cli, "queues", "create-many", str(src), "--shards", "1", "--buckets", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "24 queues created"
    assert "1 queues existed already and were left as they are" in done.stderr
    assert f"1 of them with other settings than these (see 'casque queue show NAME'): {names[3]}" in done.stderr
    assert await max_attempts_of(cq, names[3]) == 11


async def test_cli_create_many_stops_at_a_bad_name_creating_those_before_it_only(
    cq: Casque, queue_name: str, made: list[str], tmp_path: Path
) -> None:
    before = [f"{queue_name}_a{i}" for i in range(5)]
    after = [f"{queue_name}_b{i}" for i in range(5)]
    made += before + after
    src = tmp_path / "names.txt"
    src.write_text("\n".join(before + ["bad name!"] + after) + "\n")
    done = await asyncio.to_thread(casque_cli, "queues", "create-many", str(src))
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "line 6: invalid queue name 'bad name!'" in lines[0], done.stderr
    assert "5 queues created before it, none after" in lines[0]
    found = await cq.db.run(
        cq.db.prepare(f"SELECT name, shards FROM {TEST_KEYSPACE}.queues WHERE name IN ?"), [before + after]
    )
    assert {r.name for r in found if r.shards is not None} == set(before)

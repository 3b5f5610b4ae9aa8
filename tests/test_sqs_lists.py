"""ListQueues by prefix and ListDeadLetterSourceQueues, answered from their indexes
(engine/queues/names.py, engine/queues/dead_letter_sources.py) by a real ``casque serve`` through boto3:
every match, paged with MaxResults/NextToken, up to 1,000 without MaxResults, and a bounded number
of reads per request (counted from the server code's own requests, in process)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from daemon.base.config import Settings
from daemon.engine.client import Casque
from daemon.engine.operations.queue_actions import delete_queue
from daemon.engine.queues.index_backfill import backfill
from daemon.engine.storage.db import Database
from daemon.http.sqs.actions import Call, SqsService
from tests.conftest import TEST_KEYSPACE


def walk(sqs: Any, page: int | None, **kw: Any) -> tuple[list[str], list[int]]:
    """Every name ListQueues gives, following NextToken; and the size of each page."""
    names: list[str] = []
    sizes: list[int] = []
    args = dict(kw, **({"MaxResults": page} if page else {}))
    while True:
        out = sqs.list_queues(**args)
        urls = out.get("QueueUrls", [])
        names += [u.rsplit("/", 1)[-1] for u in urls]
        sizes.append(len(urls))
        if "NextToken" not in out:
            return names, sizes
        args["NextToken"] = out["NextToken"]


async def test_a_prefix_lists_all_its_queues_paged_and_1000_without_max_results(
    sqs: Any, cq: Casque, settings: Settings
) -> None:
    prefix = f"lq{uuid.uuid4().hex[:6]}-"
    mine = {f"{prefix}{i:05d}" for i in range(1500)}
    near = {f"{prefix[:-1]}x{i}" for i in range(50)}  # same index partition, not the prefix
    assert await cq.create_queues(sorted(mine | near), shards=1, buckets=1) == 1550
    names, sizes = await asyncio.to_thread(walk, sqs, 400, QueueNamePrefix=prefix)
    assert sizes == [400, 400, 400, 300] and len(names) == len(set(names)) and set(names) == mine
    unpaged, sizes = await asyncio.to_thread(walk, sqs, None, QueueNamePrefix=prefix)
    assert sizes == [1000] and set(unpaged) <= mine, "without MaxResults: 1,000 URLs and no NextToken, as SQS"

    local = await Casque.connect(settings)
    try:
        service = SqsService(local, settings.sqs)
        await service.run(
            "ListQueues", Call({"QueueNamePrefix": prefix, "MaxResults": 10}, "http://x")
        )  # statements prepared
        before = local.db.reads
        out = await service.run("ListQueues", Call({"QueueNamePrefix": prefix, "MaxResults": 1000}, "http://x"))
        assert local.db.reads - before == 1 and len(out["QueueUrls"]) == 1000, (
            "one bounded read of the index, however many queues exist"
        )
    finally:
        await local.close()

    gone = sorted(mine)[7]
    await delete_queue(cq.stores, gone)
    names, _ = await asyncio.to_thread(walk, sqs, 1000, QueueNamePrefix=prefix)
    assert set(names) == mine - {gone}
    gate = asyncio.Semaphore(16)  # 1,549 deletes, a few at a time: each is its own reads and writes

    async def delete(name: str) -> None:
        async with gate:
            await delete_queue(cq.stores, name)

    await asyncio.gather(*(delete(name) for name in mine | near if name != gone))
    assert "QueueUrls" not in await asyncio.to_thread(sqs.list_queues, QueueNamePrefix=prefix)


async def test_a_one_character_prefix_walks_its_partitions_in_name_order(sqs: Any, cq: Casque) -> None:
    tag = uuid.uuid4().hex[:6]
    mine = {f"Z{c}{tag}" for c in "0aB_-z"} | {f"Z{tag}"[:1]}
    await cq.create_queues(sorted(mine), shards=1, buckets=1)
    try:
        names, sizes = await asyncio.to_thread(walk, sqs, 2, QueueNamePrefix="Z")
        assert mine <= set(names) and all(n.startswith("Z") for n in names) and len(names) == len(set(names))
        assert names == sorted(names), "name (byte) order across the partitions"
    finally:
        for name in mine:
            await delete_queue(cq.stores, name)


async def test_schema_apply_backfills_queues_created_before_the_index(sqs: Any, cq: Casque, settings: Settings) -> None:
    name = f"bf{uuid.uuid4().hex[:8]}"
    await cq.create_queue(name, shards=1, buckets=1)
    await cq.stores.queues.names.remove(name)  # as if created before the index existed
    assert "QueueUrls" not in await asyncio.to_thread(sqs.list_queues, QueueNamePrefix=name)

    def run_backfill() -> int:
        db = Database(settings.cassandra).connect(TEST_KEYSPACE)
        try:
            return backfill(db, TEST_KEYSPACE, ["queue_names"])
        finally:
            db.close()

    assert await asyncio.to_thread(run_backfill) >= 1
    assert [
        u.rsplit("/", 1)[-1] for u in (await asyncio.to_thread(sqs.list_queues, QueueNamePrefix=name))["QueueUrls"]
    ] == [name]
    await delete_queue(cq.stores, name)


def test_dead_letter_sources_follow_policies_set_changed_removed_and_deleted(sqs: Any) -> None:
    base = f"dl{uuid.uuid4().hex[:8]}"
    dlq, dlq2 = (sqs.create_queue(QueueName=f"{base}-dlq{i}")["QueueUrl"] for i in (1, 2))
    arn, arn2 = (
        sqs.get_queue_attributes(QueueUrl=u, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"] for u in (dlq, dlq2)
    )

    def policy(target: str) -> dict[str, str]:
        return {"RedrivePolicy": json.dumps({"deadLetterTargetArn": target, "maxReceiveCount": 5})}

    def sources(url: str) -> list[str]:
        return [u.rsplit("/", 1)[-1] for u in sqs.list_dead_letter_source_queues(QueueUrl=url)["queueUrls"]]

    srcs = [sqs.create_queue(QueueName=f"{base}-src{i}", Attributes=policy(arn))["QueueUrl"] for i in range(5)]
    names = [u.rsplit("/", 1)[-1] for u in srcs]
    assert sources(dlq) == names and sources(dlq2) == []
    pages, token = [], None
    while True:
        out = sqs.list_dead_letter_source_queues(QueueUrl=dlq, MaxResults=2, **({"NextToken": token} if token else {}))
        pages.append([u.rsplit("/", 1)[-1] for u in out["queueUrls"]])
        token = out.get("NextToken")
        if not token:
            break
    assert pages == [names[:2], names[2:4], names[4:]]
    sqs.set_queue_attributes(QueueUrl=srcs[1], Attributes=policy(arn2))  # changed
    assert sources(dlq) == [names[0]] + names[2:] and sources(dlq2) == [names[1]]
    sqs.set_queue_attributes(QueueUrl=srcs[2], Attributes={"RedrivePolicy": ""})  # removed
    assert sources(dlq) == [names[0], names[3], names[4]]
    sqs.delete_queue(QueueUrl=srcs[3])  # deleted
    assert sources(dlq) == [names[0], names[4]]
    sqs.set_queue_attributes(QueueUrl=srcs[2], Attributes=policy(arn))  # set again
    assert sources(dlq) == [names[0], names[2], names[4]]
    for url in srcs[:3] + srcs[4:] + [dlq, dlq2]:
        sqs.delete_queue(QueueUrl=url)


MIGRATION_KEYSPACE = (
    "casque_test_ops_migration"  # a scratch keyspace of its own: its index tables are dropped and re-created
)


async def test_schema_apply_creates_the_new_tables_on_an_existing_keyspace_and_fills_the_indexes(
    settings: Settings,
) -> None:
    """A keyspace from before these tables (queues, one with a RedrivePolicy): `schema apply`
    creates move_tasks, move_tasks_active, queue_names and dead_letter_sources, and indexes the
    queues already there."""
    from dataclasses import replace

    from daemon.engine.storage.schema import apply_schema

    cassandra = replace(settings.cassandra, keyspace=MIGRATION_KEYSPACE)
    new_tables = ("queue_names", "dead_letter_sources", "move_tasks", "move_tasks_active")

    def old_keyspace() -> None:
        db = Database(cassandra).connect()
        try:
            apply_schema(db, MIGRATION_KEYSPACE, settings.schema, backfill=backfill)
            for table in new_tables:
                db.execute(f"DROP TABLE IF EXISTS {MIGRATION_KEYSPACE}.{table}")
            db.execute(f"TRUNCATE {MIGRATION_KEYSPACE}.queues")
            db.execute(
                f"INSERT INTO {MIGRATION_KEYSPACE}.queues (name, shards, buckets, attributes) VALUES ('src1', 1, 1, "
                '{\'RedrivePolicy\': \'{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq1",'
                '"maxReceiveCount":3}\', '
                "'casque.dead_letter': 'dlq1'})"
            )
            db.execute(f"INSERT INTO {MIGRATION_KEYSPACE}.queues (name, shards, buckets) VALUES ('dlq1', 1, 1)")
        finally:
            db.close()

    def migrate() -> tuple[set[str], list[Any], list[Any]]:
        db = Database(cassandra).connect()
        try:
            apply_schema(db, MIGRATION_KEYSPACE, settings.schema, backfill=backfill)
            tables = {
                r.table_name
                for r in db.execute(
                    "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", [MIGRATION_KEYSPACE]
                )
            }
            names = sorted(r.name for r in db.execute(f"SELECT name FROM {MIGRATION_KEYSPACE}.queue_names"))
            links = [
                (r.target, r.source)
                for r in db.execute(f"SELECT target, source FROM {MIGRATION_KEYSPACE}.dead_letter_sources")
            ]
            return tables, names, links
        finally:
            db.close()

    await asyncio.to_thread(old_keyspace)
    tables, names, links = await asyncio.to_thread(migrate)
    assert set(new_tables) <= tables
    assert names == ["dlq1", "src1"] and links == [("dlq1", "src1")]

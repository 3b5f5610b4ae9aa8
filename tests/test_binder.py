"""The hot-path Binder (engine/storage/table.py) sends exactly what the driver's own bind would.

It replaces the driver's ``bind`` for a take's and an ack's per-message statements (issue 27: the
driver's bind was the largest single cost in the daemon's profile), so a message it writes or
deletes must be byte for byte the one the driver would have sent, and must round-trip through the
node: written through the Binder, read back whole; deleted through it, gone.
"""

from __future__ import annotations

import uuid
from typing import Any

from cassandra.query import BoundStatement

from daemon.base.model import Message
from daemon.engine.client import Casque
from daemon.engine.storage.table import MessageTable, message_from_row


def _message(queue: str, **extra: Any) -> Message:
    return Message(
        queue=queue,
        id=uuid.uuid4(),
        task="t.binder",
        payload={"n": 1},
        bucket=0,
        shard=3,
        priority=2,
        due_ms=1_700_000_000_000,
        attempt=1,
        max_attempts=5,
        timeout_ms=30_000,
        raw_payload=b'{"n":1}',
        enqueued_at=1_700_000_000_000,
        **extra,
    )


def _same_as_driver(table: MessageTable, bound: Any) -> None:
    driver = bound.prepared_statement.bind(bound.raw_values)
    assert bound.values == driver.values
    assert bound.routing_key == driver.routing_key
    assert isinstance(bound, BoundStatement)
    # every attribute the driver's statement has, read the same way (the Binder's come from its class)
    names = [k for k in driver.__dict__ if k != "_routing_key"]
    assert {k: getattr(bound, k) for k in names} == {k: getattr(driver, k) for k in names}
    batch, theirs = table.db.batch(), table.db.batch()
    batch.add(bound)
    theirs.add(driver)
    assert batch._statements_and_parameters == theirs._statements_and_parameters
    assert (batch.routing_key, batch.keyspace) == (theirs.routing_key, theirs.keyspace)


async def test_binder_binds_what_the_driver_binds(cq: Casque, queue_name: str) -> None:
    table = cq.stores.table
    plain = _message(queue_name)
    full = _message(
        queue_name,
        key="k1",
        headers={"h": "v"},
        trigger={"kind": "every", "every_ms": 1000, "n": 2},
        last_error="boom",
        visible_at=1_700_000_005_000,
    )
    for m in (plain, full):
        _same_as_driver(table, table.insert_message(m, 1_700_000_000_000, 3600))
        _same_as_driver(table, table.delete_message(m, m.due_ms))


async def test_binder_writes_and_deletes_through_the_node(cq: Casque, queue_name: str) -> None:
    table = cq.stores.table
    m = _message(queue_name, headers={"h": "v"}, key="k2", last_error="e")
    now = cq.clock.now_ms()
    m.due_ms = now
    batch = cq.db.batch()
    batch.add(table.insert_message(m, now, 3600))
    await cq.db.run(batch)
    rows = await cq.db.run(table.read_id, [m.queue, m.bucket, m.shard, m.id])
    assert len(rows) == 1
    back = message_from_row(m.queue, m.bucket, m.shard, rows[0])
    assert (back.id, back.task, back.payload, back.headers, back.key, back.last_error, back.priority, back.due_ms) == (
        m.id,
        m.task,
        {"n": 1},
        {"h": "v"},
        "k2",
        "e",
        2,
        now,
    )
    batch = cq.db.batch()
    batch.add(table.delete_message(m, now))
    await cq.db.run(batch)
    assert await cq.db.run(table.read_id, [m.queue, m.bucket, m.shard, m.id]) == []

"""A queue's settings and its SQS attributes live in one ``queues`` row and are cached side by side
(engine/queues/store.py, attributes.py): one read of the row fills both caches, whichever is asked first.

Each SQS request needs both (the settings to take or send, the attributes for its policy, delay or redrive),
and both caches last 5 s, so a long poll every 20 s missed both: two reads of the same row, about 1.3 of the
4.5 reads of every poll in the full many-queues run (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from daemon.base.errors import QueueNotFound
from daemon.engine.client import Casque
from daemon.engine.storage.db import Database


def queue_row_reads(queue: str) -> tuple[list[str], Any]:
    """The reads of the ``queues`` table sent while observing (and the observer to install)."""
    seen: list[str] = []

    def observe(db: Database, stmt: Any) -> None:
        text = getattr(stmt, "query_string", "") or getattr(
            getattr(stmt, "prepared_statement", None), "query_string", ""
        )
        if text.startswith("SELECT") and ".queues WHERE name" in text:
            seen.append(text)

    return seen, observe


@pytest.mark.parametrize("first", ["settings", "attributes"])
async def test_one_read_of_a_queue_s_row_fills_both_caches(cq: Casque, queue_name: str, first: str) -> None:
    await cq.create_queue(queue_name, shards=1, buckets=1)
    await cq.extras.set(queue_name, {"DelaySeconds": "3"}, set(), cq.clock.now_ms())
    st = cq.stores
    st.queues._cache.pop(queue_name)
    st.attributes._cache.pop(queue_name)
    seen, observe = queue_row_reads(queue_name)
    with Database.observing(observe):
        if first == "settings":
            qs = await st.queues.get(queue_name)
            extras = await st.attributes.get(queue_name)
        else:
            extras = await st.attributes.get(queue_name)
            qs = await st.queues.get(queue_name)
    assert qs.name == queue_name and qs.shards == 1
    assert extras.attributes.get("DelaySeconds") == "3"
    assert len(seen) == 1, seen


async def test_a_deleted_queue_s_row_read_fresh_is_not_found_by_either(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name, shards=1, buckets=1)
    st = cq.stores
    await st.queues.get(queue_name)
    await cq.admin.delete(queue_name)
    seen, observe = queue_row_reads(queue_name)
    with Database.observing(observe):
        with pytest.raises(QueueNotFound):
            await st.queues.get(queue_name, fresh=True)
        assert (await st.attributes.get(queue_name)).attributes == {}  # filled by the read above: no row
    assert len(seen) == 1
    with pytest.raises(QueueNotFound):  # and the settings' cache kept nothing of the deleted queue
        await st.queues.get(queue_name)

"""``Database.observe``: the supported way to count or trace the engine's requests (bench/cqlcount.py,
bench/taketrace.py, tests/support/counted_serve.py), against the real node."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.base.errors import StorageUnavailable
from daemon.engine.client import Casque
from daemon.engine.storage import db as db_mod


async def test_an_observer_sees_each_request_and_its_end_then_stops(cq: Casque) -> None:
    seen: list[str] = []
    ended: list[str] = []

    def observer(db: Any, stmt: Any) -> Any:
        assert db is cq.db
        seen.append(str(stmt))
        return lambda: ended.append(str(stmt))

    before = db_mod._OBSERVERS
    with db_mod.Database.observing(observer):
        await cq.db.run("SELECT release_version FROM system.local")
        await cq.db.run_all("SELECT cluster_name FROM system.local")
        assert len(ended) == 2, "each request's end is reported once its answer came"
    await cq.db.run("SELECT release_version FROM system.local")
    assert seen == ["SELECT release_version FROM system.local", "SELECT cluster_name FROM system.local"]
    assert ended == seen
    assert before == db_mod._OBSERVERS, "leaving the block removes the observer: no cost afterwards"


async def test_a_failed_request_still_ends_and_a_batch_names_its_prepared_members(cq: Casque) -> None:
    ended: list[bool] = []
    observer = db_mod.Database.observing(lambda db, stmt: lambda: ended.append(True))
    with observer, pytest.raises(StorageUnavailable):  # the node refuses a query of a table it has not got
        await cq.db.run("SELECT * FROM system.no_such_table_here")
    assert ended == [True], "the observer hears of the failed request's end too"
    cql = "SELECT release_version FROM system.local WHERE key = ?"
    stmt = cq.db.prepare(cql)
    assert cq.db.statement_text(stmt.query_id) == cql

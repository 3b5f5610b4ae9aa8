"""Filling the name and dead-letter indexes from the queues table, once, when ``casque schema
apply`` creates them on a keyspace that already has queues (queues created afterwards are indexed
as they are created). One paged scan of ``queues`` (1,000 rows a page) and one plain write per
queue (two for a queue with a RedrivePolicy), 64 writes in flight."""

from __future__ import annotations

import json
import re
from typing import Any

from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import SimpleStatement

from daemon.base.logs import get_logger
from daemon.engine.queues.attributes import DEAD_LETTER
from daemon.engine.queues.names import partition_of
from daemon.engine.storage.db import Database

log = get_logger("casque.schema")
_ARN_QUEUE = re.compile(r":([A-Za-z0-9_-]{1,80})$")


def backfill(db: Database, ks: str, tables: list[str]) -> int:
    """Index every live queue in ``tables`` (``queue_names``, ``dead_letter_sources``); returns how many queues
    were read."""
    assert db.session is not None
    names = db.session.prepare(f"INSERT INTO {ks}.queue_names (prefix, name) VALUES (?, ?)")
    sources = db.session.prepare(f"INSERT INTO {ks}.dead_letter_sources (target, source) VALUES (?, ?)")
    scan = SimpleStatement(f"SELECT name, shards, attributes FROM {ks}.queues", fetch_size=1000)
    name_rows: list[tuple[str, str]] = []
    link_rows: list[tuple[str, str]] = []
    seen = 0
    for r in db.session.execute(scan):
        if r.shards is None:  # cells written after a delete: no queue
            continue
        seen += 1
        if "queue_names" in tables:
            name_rows.append((partition_of(r.name), r.name))
        target = _target(r.attributes or {})
        if target and "dead_letter_sources" in tables:
            link_rows.append((target, r.name))
        if len(name_rows) >= 10_000:
            _write(db, names, name_rows)
    _write(db, names, name_rows)
    _write(db, sources, link_rows)
    log.info("indexes_backfilled", tables=tables, queues=seen)
    return seen


def _target(attributes: dict[str, str]) -> str | None:
    if attributes.get(DEAD_LETTER):
        return attributes[DEAD_LETTER]
    policy = attributes.get("RedrivePolicy")
    if not policy:
        return None
    try:
        m = _ARN_QUEUE.search(str(json.loads(policy).get("deadLetterTargetArn", "")))
    except (ValueError, AttributeError):
        return None
    return m.group(1) if m else None


def _write(db: Database, stmt: Any, rows: list[tuple[str, str]]) -> None:
    if rows:
        assert db.session is not None
        execute_concurrent_with_args(db.session, stmt, list(rows), concurrency=64, raise_on_first_error=True)
        rows.clear()

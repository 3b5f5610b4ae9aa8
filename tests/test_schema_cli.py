"""Schema management and the CLI's first verbs, against the real node."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from daemon.base.config import SchemaSettings, Settings
from daemon.engine.storage.db import Database
from daemon.engine.storage.schema import GC_GRACE_S, ONE_REPLICA_GC_GRACE_S, apply_schema

from .conftest import TEST_KEYSPACE

ROOT = Path(__file__).resolve().parent.parent


def casque(*args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    env_args = ["-c", str(config)] if config else []
    return subprocess.run(  # a bound: a daemon or server waiting on an error it should exit on fails, not hangs
        [sys.executable, "-m", "daemon.cli", *env_args, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_schema_applies_twice_without_error(settings: Settings) -> None:
    db = Database(settings.cassandra).connect()
    try:
        first = apply_schema(db, TEST_KEYSPACE, settings.schema)
        second = apply_schema(db, TEST_KEYSPACE, settings.schema)
        tables = {
            r.table_name
            for r in db.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", [TEST_KEYSPACE])
        }
    finally:
        db.close()
    assert first == second
    assert {"queues", "messages", "keys", "poison"} <= tables


def _gc_grace(db: Database, ks: str, table: str) -> int:
    row = db.execute(
        "SELECT gc_grace_seconds FROM system_schema.tables WHERE keyspace_name = %s AND table_name = %s", [ks, table]
    ).one()
    return int(row.gc_grace_seconds)


def test_deletes_outlive_the_hint_window_where_a_replica_can_miss_one(settings: Settings) -> None:
    """A delete's hints live as long as its table's gc_grace: shorter than the node's hint window, a replica down
    between the two never gets the delete, and the acked message comes back once the tombstone is purged. A keyspace
    with replicas keeps tombstones for the window (a table made by an older casque is brought to it); one with a
    single replica, which no replica can miss a delete of, for 5 minutes."""
    ks = f"casque_gc_rf3_{uuid.uuid4().hex[:8]}"
    db = Database(settings.cassandra).connect()
    try:
        window = db.execute("SELECT value FROM system_views.settings WHERE name = 'max_hint_window'").one().value
        number, unit = re.fullmatch(r"(\d+)(ms|s|m|h)", window).groups()  # type: ignore[union-attr]
        window_s = int(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
        assert _gc_grace(db, TEST_KEYSPACE, "messages") == ONE_REPLICA_GC_GRACE_S  # the suite's node: one replica
        three = SchemaSettings(replication_factor=3)  # a keyspace may name more replicas than the ring has nodes
        apply_schema(db, ks, three)
        assert _gc_grace(db, ks, "messages") == GC_GRACE_S >= window_s
        assert _gc_grace(db, ks, "keys") == GC_GRACE_S
        db.execute(f"ALTER TABLE {ks}.messages WITH gc_grace_seconds = 300")  # as an older casque made it
        apply_schema(db, ks, three)
        assert _gc_grace(db, ks, "messages") == GC_GRACE_S
    finally:
        db.execute(f"DROP KEYSPACE IF EXISTS {ks}")
        db.close()


def test_cli_schema_apply_is_idempotent(tmp_path: Path, settings: Settings) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{TEST_KEYSPACE}"\n')
    for _ in range(2):
        done = casque("schema", "apply", config=cfg)
        assert done.returncode == 0, done.stderr
        assert f"{TEST_KEYSPACE}.messages" in done.stdout


def test_cli_create_send_get_cancel(tmp_path: Path, settings: Settings, queue_name: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{TEST_KEYSPACE}"\n')
    made = casque("queue", "create", queue_name, "--shards", "3", "--timeout", "45s", "--max-attempts", "4", config=cfg)
    assert made.returncode == 0, made.stderr
    again = casque("queue", "create", queue_name, config=cfg)
    assert again.returncode == 2 and "already exists" in again.stderr
    sent = casque(
        "send",
        queue_name,
        "demo.greet",
        "--payload",
        '{"name": "Ada"}',
        "--delay",
        "1h",
        "--key",
        "ada",
        "--priority",
        "3",
        config=cfg,
    )
    assert sent.returncode == 0, sent.stderr
    mid = sent.stdout.strip()
    got = casque("get", queue_name, "--key", "ada", "--json", config=cfg)
    data = json.loads(got.stdout)
    assert (
        data["id"] == mid
        and data["payload"] == {"name": "Ada"}
        and data["priority"] == 3
        and data["state"] == "waiting"
    )
    listed: list[dict[str, Any]] = []
    after: list[str] = []
    while True:  # `casque queues` shows a page; stderr names the next one
        page = casque("queues", "--json", "--limit", "1000", *after, config=cfg)
        listed += json.loads(page.stdout)
        if "next page" not in page.stderr:
            break
        after = ["--after", page.stderr.rsplit("--after ", 1)[1].strip()]
    mine = next(q for q in listed if q["name"] == queue_name)
    assert (
        mine["shards"] == 3
        and mine["timeout_ms"] == 45000
        and mine["max_attempts"] == 4
        and mine["priorities"] == [0, 3]
    )
    conflict = casque("send", queue_name, "demo.greet", "--key", "ada", "--on-conflict", "error", config=cfg)
    assert conflict.returncode == 3 and "already names message" in conflict.stderr
    cancelled = casque("cancel", queue_name, "--key", "ada", config=cfg)
    assert cancelled.returncode == 0 and mid in cancelled.stdout
    missing = casque("get", queue_name, "--key", "ada", config=cfg)
    assert missing.returncode == 4 and missing.stderr.startswith("casque: no message with key 'ada'")


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, settings: Settings, queue_name: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{TEST_KEYSPACE}"\n')
    assert casque("queue", "create", queue_name, config=cfg).returncode == 0
    cases = [
        (["send", queue_name, "t", "--payload", "{not json"], "--payload is not valid JSON"),
        (["send", queue_name, "t", "--delay", "soon"], "invalid delay 'soon'"),
        (["send", queue_name, "t", "--at", "tomorrow"], "invalid time 'tomorrow'"),
        (["send", queue_name, "t", "--priority", "5000"], "invalid priority 5000"),
        (["send", "no_such_queue", "t"], "queue 'no_such_queue' does not exist"),
        (["get", queue_name, "--id", "xyz"], "invalid message id 'xyz'"),
        (["queue", "create", "bad-name!"], "invalid queue name 'bad-name!'"),
    ]
    for args, needle in cases:
        done = casque(*args, config=cfg)
        assert done.returncode == 2, (args, done.stderr)
        assert needle in done.stderr and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)


def test_cli_reports_cassandra_down_in_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "down.toml"
    cfg.write_text("[cassandra]\nport = 1\nconnect_timeout = 1\n")
    done = casque("queues", config=cfg)
    assert done.returncode == 5
    assert done.stderr.strip().splitlines() == [
        "casque: Cassandra is not reachable at 127.0.0.1:1: start it ('casque cassandra start') or fix "
        "cassandra.contact_points/port"
    ]


@pytest.mark.parametrize("command", [["stats"], ["run", "--queues", "q"], ["serve", "--port", "0"]])
def test_cli_names_a_missing_keyspace_in_one_line(tmp_path: Path, settings: Settings, command: list[str]) -> None:
    """The driver reports a keyspace it can't USE as NoHostAvailable with a list of hosts (not its
    usual dict of host errors): that crashed the error's description with an AttributeError. The daemon and the
    server, which wait for a Cassandra that does not answer, exit on it at once: waiting can't create it."""
    cfg = tmp_path / "nokeyspace.toml"
    cfg.write_text('[cassandra]\nkeyspace = "casque_no_such_keyspace"\n')
    done = casque(*command, config=cfg)
    assert done.returncode == 5
    assert done.stderr.strip().splitlines() == [
        "casque: keyspace 'casque_no_such_keyspace' does not exist: run 'casque schema apply' first"
    ]


def test_a_keyspace_older_than_casque_gets_one_line_naming_schema_apply_and_then_works(
    tmp_path: Path, settings: Settings
) -> None:
    """A keyspace made by an older casque lacks columns this one reads (here the two a lock timeout change
    writes, dropped again): every command that reads a queue says so in one line naming the fix, exits non-zero,
    and works once ``casque schema apply`` has run (its migrations add what is missing)."""
    keyspace = "casque_test_older"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{keyspace}"\n')
    assert casque("schema", "apply", config=cfg).returncode == 0
    name = f"older_{uuid.uuid4().hex[:8]}"  # the keyspace outlives a run: a queue of an older release may be there
    assert casque("queue", "create", name, config=cfg).returncode == 0
    db = Database(settings.cassandra).connect()
    try:
        for column in ("lock_ttl_before_ms", "lock_ttl_changed_at"):
            db.execute(f"ALTER TABLE {keyspace}.queues DROP {column}")
    finally:
        db.close()
    old = casque("queue", "show", name, config=cfg)
    assert old.returncode != 0
    assert old.stderr.strip().count("\n") == 0, old.stderr
    assert "lock_ttl_before_ms" in old.stderr and "run 'casque schema apply'" in old.stderr, old.stderr
    assert casque("schema", "apply", config=cfg).returncode == 0
    shown = casque("queue", "show", name, config=cfg)
    assert shown.returncode == 0, shown.stderr

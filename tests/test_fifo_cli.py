"""FIFO queues from the command line: create, update, show, send with a group and a dedup id, and
the one-line errors (exit 2) of a FIFO send or option given wrong. Real CLI subprocesses, real node."""

from __future__ import annotations

import json
import re
from pathlib import Path

from daemon.base.config import Settings
from daemon.engine.client import Casque

from .conftest import TEST_KEYSPACE
from .test_schema_cli import casque


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{TEST_KEYSPACE}"\n')
    return cfg


def _one_line_error(done: object, code: int, needle: str) -> None:
    assert done.returncode == code, done.stderr  # type: ignore[attr-defined]
    lines = done.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and needle in lines[0], lines


async def test_cli_creates_updates_and_shows_a_fifo_queue(
    tmp_path: Path, settings: Settings, queue_name: str, cq: Casque
) -> None:
    cfg, name = _config(tmp_path), queue_name + ".fifo"
    made = casque(
        "queue",
        "create",
        name,
        "--fifo",
        "--content-dedup",
        "--dedup-scope",
        "messageGroup",
        "--fifo-throughput",
        "perMessageGroupId",
        config=cfg,
    )
    assert made.returncode == 0, made.stderr
    assert "fifo, dedup by content per messageGroup, throughput perMessageGroupId" in made.stdout
    qs = await cq.stores.queues.get(name, fresh=True)
    assert (qs.fifo, qs.content_dedup, qs.dedup_scope, qs.fifo_throughput, qs.buckets, qs.shards) == (
        True,
        True,
        "messageGroup",
        "perMessageGroupId",
        1,
        16,
    )  # high-throughput mode: 16 shards, one bucket
    changed = casque(
        "queue",
        "update",
        name,
        "--no-content-dedup",
        "--dedup-scope",
        "queue",
        "--fifo-throughput",
        "perQueue",
        config=cfg,
    )
    assert changed.returncode == 0, changed.stderr
    qs = await cq.stores.queues.get(name, fresh=True)
    assert (qs.fifo, qs.content_dedup, qs.dedup_scope, qs.fifo_throughput) == (True, False, "queue", "perQueue")
    shown = casque("queue", "show", name, config=cfg)
    assert shown.returncode == 0, shown.stderr
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in shown.stdout.splitlines()[1:])
    assert {k: rows[k] for k in ("type", "content dedup", "dedup scope", "fifo throughput")} == {
        "type": "FIFO",
        "content dedup": "off",
        "dedup scope": "queue",
        "fifo throughput": "perQueue",
    }
    as_json = json.loads(casque("queue", "show", name, "--json", config=cfg).stdout)
    assert (as_json["fifo"], as_json["content_dedup"], as_json["dedup_scope"]) == (True, False, "queue")


async def test_cli_fifo_send_prints_the_sequence_and_says_duplicate(
    tmp_path: Path, settings: Settings, queue_name: str, cq: Casque
) -> None:
    cfg, name = _config(tmp_path), queue_name + ".fifo"
    assert casque("queue", "create", name, "--fifo", config=cfg).returncode == 0
    first = casque("send", name, "t", "--payload", '"one"', "--group", "g1", "--dedup-id", "d1", config=cfg)
    second = casque("send", name, "t", "--payload", '"two"', "--group", "g1", "--dedup-id", "d2", config=cfg)
    again = casque("send", name, "t", "--payload", '"one again"', "--group", "g1", "--dedup-id", "d1", config=cfg)
    for done in (first, second, again):
        assert done.returncode == 0, done.stderr
    seq = [d.stderr.split("sequence number ", 1)[1].split()[0] for d in (first, second, again)]
    assert all(len(s) == 20 and s.isdigit() for s in seq) and seq[0] < seq[1] and seq[2] == seq[0], seq
    assert (
        again.stdout.strip() == first.stdout.strip() and "duplicate" in again.stderr
    )  # the first send's id: nothing new written
    assert "duplicate" not in first.stderr + second.stderr
    peeked = await cq.peek(name, 10)
    assert [(m.payload, m.group, m.dedup_id) for m in peeked] == [("one", "g1", "d1"), ("two", "g1", "d2")]


async def test_cli_fifo_mistakes_are_one_line_errors_and_write_nothing(
    tmp_path: Path, settings: Settings, queue_name: str, cq: Casque
) -> None:
    cfg, name, std = _config(tmp_path), queue_name + ".fifo", queue_name
    assert casque("queue", "create", name, "--fifo", config=cfg).returncode == 0
    assert casque("queue", "create", std, config=cfg).returncode == 0
    _one_line_error(casque("send", name, "t", "--dedup-id", "d", config=cfg), 2, "give every message a group")
    _one_line_error(casque("send", name, "t", "--group", "g", config=cfg), 2, "give a dedup_id")
    _one_line_error(casque("send", name, "t", "--group", "g", "--dedup-id", "d", "--delay", "5s", config=cfg), 2, name)
    _one_line_error(casque("send", std, "t", "--dedup-id", "d", config=cfg), 2, "applies to FIFO queues only")
    _one_line_error(casque("queue", "create", queue_name + "x.fifo", config=cfg), 2, "--fifo")
    _one_line_error(casque("queue", "create", queue_name + "y", "--fifo", config=cfg), 2, "add the suffix")
    _one_line_error(
        casque("queue", "create", queue_name + "z", "--content-dedup", config=cfg), 2, "apply to FIFO queues only"
    )
    _one_line_error(
        casque("queue", "update", std, "--dedup-scope", "messageGroup", config=cfg), 2, "apply to FIFO queues only"
    )
    assert await cq.peek(name, 10) == [] and await cq.peek(std, 10) == []  # nothing was sent
    assert (
        not (await cq.stores.queues.get(std, fresh=True)).fifo
        and (await cq.stores.queues.get(std, fresh=True)).dedup_scope == "queue"
    )
    for missing in (queue_name + "x.fifo", queue_name + "y", queue_name + "z"):
        _one_line_error(
            casque("queue", "show", missing, config=cfg), 2, f"queue '{missing}' does not exist"
        )  # nothing was created

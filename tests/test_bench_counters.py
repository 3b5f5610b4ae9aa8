"""The bench's measuring instruments (bench/taketrace.py, bench/cqlcount.py, bench/targets.py)
against the real engine and Cassandra: a figure in docs/benchmarks.md is only as good as its counter.

The instruments observe the engine's Database and patch the engine's and the driver's classes, so each test
installs them through ``monkeypatch`` first: every observer and patched attribute is put back when the test ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import cqlcount, node, report, taketrace
from daemon.base.clock import ManualClock
from daemon.engine.client import Casque
from daemon.engine.consume import consumer as consumer_mod
from daemon.engine.send.producer import Job
from daemon.engine.storage import db as db_mod


@pytest.fixture
def instruments(monkeypatch: pytest.MonkeyPatch) -> None:
    """Install the CQL counters and the take tracer for one test only."""
    from cassandra.connection import Connection

    monkeypatch.setattr(db_mod, "_OBSERVERS", db_mod._OBSERVERS)  # the observers installed below go at the end
    monkeypatch.setattr(cqlcount, "_INSTALLED", [])
    monkeypatch.setattr(consumer_mod.Consumer, "_visit_row", consumer_mod.Consumer._visit_row)
    monkeypatch.setattr(consumer_mod.Consumer, "fetch", consumer_mod.Consumer.fetch)
    monkeypatch.setattr(Connection, "send_msg", Connection.send_msg)
    monkeypatch.setattr(taketrace, "TAKES", {level: [] for level in taketrace.UNITS})
    cqlcount.install()
    cqlcount.install_wire()
    taketrace.install()


async def test_take_trace_counts_every_request_of_the_take(
    instruments: None, manual: tuple[Casque, ManualClock], queue_name: str
) -> None:
    cq, _clock = manual
    await cq.create_queue(queue_name, shards=1)
    consumer = cq.consumer(queue_name)
    assert await consumer.fetch(10) == []  # every row visited once: cursors loaded, next checks set
    await cq.send(queue_name, "t", {"n": 0})  # a first send does its once-a-while work in the background
    assert len(await consumer.fetch(10)) == 1  # (the wake-hint listeners read, the activity mark)
    taketrace.TAKES["fetch"].clear()
    taketrace.TAKES["visit"].clear()
    await cq.send(queue_name, "t", {"n": 1})
    await cq.stores.hints.settled()  # a directory read the send began (every few seconds) is not the fetch's
    before = cqlcount.COUNTS.requests
    taken = await consumer.fetch(10)  # the clock has not moved: only the current row is due for a look
    requests = cqlcount.COUNTS.requests - before
    assert len(taken) == 1
    assert len(taketrace.TAKES["fetch"]) == 1, "one fetch returned messages: one take"
    take = taketrace.TAKES["fetch"][0]
    assert take["requests"] == requests, "the fetch's take holds every request the fetch made, and only those"
    assert 2 <= take["waves"] <= take["requests"]
    seq = taketrace.sequence(take["steps"], taketrace._names())
    assert seq.count(" → ") + 1 == take["waves"]
    assert seq.endswith("batch"), "a take ends with the batch that takes the messages"
    assert "prepared statement" not in seq, "every step is named after the engine attribute that holds it"
    for visit in taketrace.TAKES["visit"]:  # the row's visit, if the take went through one, is part of the fetch
        assert visit["requests"] <= take["requests"] and visit["waves"] <= take["waves"]


async def test_row_writes_and_payloads_of_one_message_are_counted_send_to_ack(
    instruments: None, manual: tuple[Casque, ManualClock], queue_name: str
) -> None:
    """The "row writes per message" line of docs/benchmarks.md: one message sent, taken and acked, with a payload
    of a known size. The counter sees the statements inside the batches, which of them bind the payload, and the
    bytes bound (the payload among them). The take's write is narrow (engine/take/flights.py): the payload is bound
    once, by the send."""
    cq, _clock = manual
    await cq.create_queue(queue_name, shards=1)
    consumer = cq.consumer(queue_name)
    assert await consumer.fetch(10) == []  # cursors loaded, so the counted take is the usual one
    body = "x" * 5000
    before = cqlcount.snapshot()
    await cq.send(queue_name, "t", {"b": body})
    [m] = await consumer.fetch(10)
    await cq.stores.acker.ack([m])
    after = cqlcount.snapshot()
    payload_writes = after.payload_writes - before.payload_writes
    written = after.bytes_written - before.bytes_written
    print(f"payload_writes={payload_writes} bytes_written={written}")
    assert payload_writes == 1, "the send writes the payload; the take marks the message in flight, narrow"
    assert len(body) < written < len(body) + 1000, "bytes bound: the payload once, plus keys and columns"


async def test_a_message_costs_three_row_writes_on_the_default_queue(
    instruments: None, manual: tuple[Casque, ManualClock], queue_name: str
) -> None:
    """Issue 44's measure: on a queue with the default settings, a message sent, taken and acked costs 3 row writes
    (the send's, the take's narrow update, the ack's delete), one with the payload; a take's own writes (its lock,
    the cursor, the check entry) are shared by the messages it takes."""
    cq, _clock = manual
    await cq.create_queue(queue_name)
    consumer = cq.consumer(queue_name)
    assert await consumer.fetch(1000) == []  # cursors loaded, so the counted takes are the usual ones
    n = 400
    before = cqlcount.snapshot()
    await cq.send_many(queue_name, [Job("t", {"n": i}) for i in range(n)])
    got: list[Any] = []
    for _ in range(20):
        got += await consumer.fetch(1000)
        if len(got) >= n:
            break
    await cq.stores.acker.ack(got)
    after = cqlcount.snapshot()
    assert len(got) == n and len({m.id for m in got}) == n, "every message once"
    writes, payload_writes = after.writes - before.writes, after.payload_writes - before.payload_writes
    print(f"writes={writes} payload_writes={payload_writes} per message={writes / n:.3f}")
    assert payload_writes == n, "one write with the payload a message: the send's"
    assert writes / n <= 3.3, "3 row writes a message, and the takes' own few shared by their messages"


async def test_wire_counter_sees_each_request_frame(instruments: None, cq: Casque) -> None:
    before = cqlcount.totals()
    for _ in range(3):
        await cq.db.run("SELECT release_version FROM system.local")
    after = cqlcount.totals()
    assert after["wire"].get("QueryMessage", 0) - before["wire"].get("QueryMessage", 0) >= 3
    assert after["requests"] - before["requests"] >= 3
    r = cqlcount.rates(before, after)
    assert r["wire_per_s"] > 0 and r["engine_per_s"] > 0


def test_rates_are_per_second_of_the_window() -> None:
    before = {
        "t": 100.0,
        "requests": 10,
        "by_statement": {"SELECT a FROM t": 4},
        "by_caller": {"x.f": 4},
        "wire": {"ExecuteMessage": 10},
    }
    after = {
        "t": 110.0,
        "requests": 60,
        "by_statement": {"SELECT a FROM t": 44},
        "by_caller": {"x.f": 24},
        "wire": {"ExecuteMessage": 60, "OptionsMessage": 1},
    }
    r = cqlcount.rates(before, after, names={"SELECT a FROM t": "Table.a"})
    assert r["wire_per_s"] == pytest.approx(5.1)
    assert r["wire_by_type_per_s"] == {"ExecuteMessage": pytest.approx(5.0), "OptionsMessage": pytest.approx(0.1)}
    assert r["engine_per_s"] == pytest.approx(5.0)
    assert r["engine_by_statement_per_s"] == {"Table.a": pytest.approx(4.0)}
    assert r["engine_by_caller_per_s"] == {"x.f": pytest.approx(2.0)}


def _sched(p99: float) -> dict[str, Any]:
    lat = {"count": 10, "p50": p99 / 2, "p95": p99, "p99": p99, "max": p99}
    return {"delay": {"latency": lat}, "cron": {"latency": lat}}


def test_summary_has_a_before_column_only_with_an_earlier_results_file() -> None:
    R = {"sched": _sched(80.0)}  # both lateness targets (≤ 50 ms) missed
    text = report.summary(R)
    assert "before" not in text.splitlines()[0], "without --compare, no before column"
    assert "p99 80.0 ms" in text and text.count("**missed**") == 2
    assert "Missed, with what the run shows:" in text
    earlier = {"sched": _sched(400.0), "meta": {"mode": "quick", "machine": {"date": "2026-11-23 12:02 UTC"}}}
    text = report.summary(R, {**earlier, "_path": "old.json"})
    assert "before: quick run of 2026-11-23 12:02 UTC" in text.splitlines()[0]
    assert "p99 400 ms" in text and "p99 80.0 ms" in text, "the before and the measured value, side by side"
    assert "old.json" in text


def test_the_node_section_says_fresh_or_with_history_and_what_each_part_cost_it(tmp_path: Path) -> None:
    assert "not recorded" in report.node_line(None)
    fresh = {"fresh": True, "tables": 60, "keyspaces": 7, "uptime_s": 120, "heap_max": "768M", "gc": "G1GC"}
    assert "**fresh**" in report.node_line(fresh) and "-Xmx768M" in report.node_line(fresh)
    old = {**fresh, "fresh": False, "other_keyspaces": {"casque_test": 21}, "uptime_s": 7200}
    assert "**with history**" in report.node_line(old) and "casque_test (21 tables)" in report.node_line(old)
    log = tmp_path / "gc.log"
    log.write_text(
        "[2026-11-29T03:56:04.132+0000][38.173s][info] GC(8) Pause Young (Normal) (G1 Evacuation Pause) "
        "243M->67M(768M) 28.963ms\n"
        "[2026-11-29T03:56:05.000+0000][39.0s][info] GC(9) Concurrent Mark Cycle 45.000ms\n"
        "[2026-11-29T03:57:00.000+0000][95.0s][info] GC(10) Pause Remark 100M->90M(768M) 3.5ms\n"
    )
    start = 1795924564.0  # 2026-11-29T03:56:04Z
    assert node.gc_pauses(str(tmp_path), start, start + 60) == {"count": 2, "total_ms": 32.5, "max_ms": 29.0}
    assert node.gc_pauses(str(tmp_path), start + 1, start + 2) == {"count": 0, "total_ms": 0, "max_ms": 0.0}
    table = report.node_parts(
        {
            "e2e": {
                "seconds": 10.0,
                "reads": 5,
                "read_mean_ms": 0.5,
                "writes": 9,
                "write_mean_ms": None,
                "gc": {"count": 2, "total_ms": 32.5, "max_ms": 29.0},
            }
        }
    )
    assert "| e2e | 10 | 5 (0.500 ms) | 9 | 2: 32 ms in all, longest 29 ms |" in table

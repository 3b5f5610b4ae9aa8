"""The bench's measuring instruments (bench/taketrace.py, bench/cqlcount.py, bench/targets.py)
against the real engine and Cassandra: a figure in docs/benchmarks.md is only as good as its counter.

The instruments observe the engine's Database and patch the engine's and the driver's classes, so each test
installs them through ``monkeypatch`` first: every observer and patched attribute is put back when the test ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import baseline, cqlcount, report, taketrace, targets
from daemon.base.clock import ManualClock
from daemon.engine.client import Casque
from daemon.engine.consume import consumer as consumer_mod
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


@pytest.mark.parametrize("in_flight", ["copy", "in_place"])
async def test_row_writes_and_payloads_of_one_message_are_counted_send_to_ack(
    instruments: None, manual: tuple[Casque, ManualClock], queue_name: str, in_flight: str
) -> None:
    """The "row writes per message" line of docs/benchmarks.md: one message sent, taken and acked, with a payload
    of a known size. The counter sees the statements inside the batches, which of them bind the payload, and the
    bytes bound (the payload among them). In place (engine/take/flights.py), the take's write is narrow: the payload
    is bound once, by the send."""
    cq, _clock = manual
    await cq.create_queue(queue_name, shards=1, in_flight=in_flight)
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
    if in_flight == "in_place":
        assert payload_writes == 1, "the send writes the payload; the take marks the message in flight, narrow"
        assert len(body) < written < len(body) + 1000, "bytes bound: the payload once, plus keys and columns"
    else:
        assert payload_writes == 2, "the send writes the payload, and the take writes it again as the timeout column"
        assert 2 * len(body) < written < 2 * len(body) + 1000, "bytes bound: twice the payload, plus keys and columns"


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


def test_summary_gives_every_miss_its_reason_or_a_placeholder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baseline, "PATH", tmp_path / "baseline.json")
    monkeypatch.setattr(targets, "WHY", tmp_path / "why.toml")
    baseline.save({"sched": _sched(400.0)})
    R = {"sched": _sched(80.0)}  # both lateness targets (≤ 50 ms) missed; better than the baseline's 400 ms
    text = report.summary(R)
    assert "p99 400 ms" in text and "p99 80.0 ms" in text, "the before and the measured value, side by side"
    assert text.count("**missed**") == 2
    assert "under `delay_p99`" in text and "under `cron_p99`" in text, "a placeholder names where the reason goes"
    (tmp_path / "why.toml").write_text('delay_p99 = "the timer fires after a full take"\n')
    text = report.summary(R)
    assert "the timer fires after a full take" in text
    assert "under `delay_p99`" not in text and "under `cron_p99`" in text

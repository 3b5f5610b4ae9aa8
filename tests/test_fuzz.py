"""Bad input, fuzzed (hypothesis): every input gets a clear error or is handled, nothing else.

The pure checks run hundreds of generated cases; the storage round trips and the daemon run a
handful against the real node. A daemon fed corrupt rows written straight into the table poisons
each with a reason and keeps serving the good messages."""

from __future__ import annotations

import json
import signal
import string
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.base.config import load_settings
from daemon.base.durations import parse_duration
from daemon.base.errors import ConfigError, PayloadError, UsageError
from daemon.base.model import QueueSettings, check_key, check_task_name, decode_payload
from daemon.engine.client import Casque
from daemon.engine.schedules.triggers import cron_next, make_trigger, zone
from daemon.engine.send.producer import Job, build_message
from daemon.engine.storage.placement import row_of
from daemon.engine.storage.schema import validate_queue_name
from daemon.service.registry import Registry
from daemon.testing.daemonproc import records, start_daemon, until, write_config

from .conftest import TEST_KEYSPACE

pytestmark = pytest.mark.reliability
QS = QueueSettings("fuzz", 16, 24, 300, 5000, 30000, 5, 86400, 4096)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)
anything = (
    json_values
    | st.floats()
    | st.binary()
    | st.sets(st.integers(), max_size=3)
    | st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1)
)


@given(anything)
@settings(max_examples=300, deadline=None)
def test_any_payload_round_trips_or_gets_a_payload_error(value: object) -> None:
    try:
        m = build_message(QS, Job("t", value), 1_700_000_000_000)
    except PayloadError as exc:
        assert "\n" not in str(exc)
        return
    assert len(m.raw_payload or b"") <= QS.max_payload_bytes
    assert decode_payload(m.raw_payload) == json.loads(json.dumps(value))


def test_deeply_nested_payload_is_a_payload_error() -> None:
    deep: object = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(PayloadError, match="nested too deeply"):
        build_message(QS, Job("t", deep), 1_700_000_000_000)


@given(st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_cron_expressions_are_accepted_or_rejected_clearly(expr: str) -> None:
    try:
        t = make_trigger(cron=expr)
    except UsageError as exc:
        assert f"cron expression {expr!r}" in str(exc)  # invalid, or a 6-field reading that is not certain
        return
    assert cron_next(t.cron, t.tz, 1_700_000_000_000) > 1_700_000_000_000


@given(
    st.text(max_size=40)
    | st.sampled_from(["Europe/Berlin", "UTC", "America/New_York", "../../etc/passwd", "Etc/GMT+5", ""])
)
@settings(max_examples=300, deadline=None)
def test_time_zones_are_accepted_or_rejected_clearly(name: str) -> None:
    try:
        zone(name)
    except UsageError as exc:
        assert "invalid time zone" in str(exc)


@given(st.text(alphabet=string.digits + "smhdw. -+e" + string.ascii_letters, max_size=12))
@settings(max_examples=400, deadline=None)
def test_durations_parse_or_fail_clearly(text: str) -> None:
    try:
        value = parse_duration(text, "delay")
    except UsageError as exc:
        assert "invalid delay" in str(exc)
        return
    assert value >= 0


@given(st.text(max_size=600))
@settings(max_examples=300, deadline=None)
def test_keys_task_names_and_queue_names_are_validated(text: str) -> None:
    for check in (check_key, check_task_name, validate_queue_name):
        try:
            check(text)
        except (UsageError, ConfigError) as exc:
            assert "\n" not in str(exc)


@given(st.text(max_size=80))
@settings(max_examples=300, deadline=None)
def test_no_task_name_resolves_to_anything_but_a_registered_class(name: str) -> None:
    reg = Registry()
    assert reg.get(name) is None
    for hostile in ("os:system", "builtins.eval", "subprocess.run", "daemon.cli:main", "__import__"):
        assert reg.get(hostile) is None


toml_like = st.text(
    alphabet=st.sampled_from(list("[]=.\"'#\n _-0123456789abcdefghijklmnopqrstuvwxyz{},")), max_size=200
)


@given(
    st.binary(max_size=200)
    | st.text(max_size=200).map(str.encode)
    | toml_like.map(str.encode)
    | st.sampled_from(
        [
            b"[worker]\nconsumers = 1e400\n",
            b"[cassandra]\nport = 99999999999999999999\n",
            b"[worker]\nqueues = [1, 2]\n",
        ]
    )
)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_config_files_load_or_raise_a_config_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.toml"
    path.write_bytes(data)
    try:
        load_settings(path, env={})
    except ConfigError as exc:
        assert "\n" not in str(exc) or "TOML" in str(exc)


@given(
    st.lists(json_values, min_size=1, max_size=3), st.text(min_size=1, max_size=20).filter(lambda k: k.isprintable())
)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
async def test_stored_payloads_and_keys_read_back_equal(cq: Casque, payloads: list, key: str) -> None:
    await cq.create_queue("fuzzq", if_missing=True)
    for p in payloads:
        mid = await cq.send("fuzzq", "t", p, key=key, delay="1h")
        m = await cq.get("fuzzq", key=key)
        assert m is not None and str(m.id) == mid and m.payload == json.loads(json.dumps(p)) and m.key == key
    await cq.cancel("fuzzq", key=key)


CORRUPTIONS = {
    "invalid utf-8 payload": ("payload", "0xfffe00"),
    "invalid json payload": ("payload", "0x7b7b7b"),
    "invalid json trigger": ("trigger", "'{not json'"),
    "trigger of the wrong shape": ("trigger", '\'{"kind": "cron", "cron": "never"}\''),
    "empty task name": ("task", "''"),
}


async def test_daemon_poisons_corrupt_rows_and_keeps_serving(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    qs = await cq.create_queue(queue_name, shards=2)
    good = [await cq.send(queue_name, "test.record", i) for i in range(5)]
    bad: dict[str, str] = {}
    for what, (column, value) in CORRUPTIONS.items():
        mid = await cq.send(queue_name, "test.record", what)
        m = await cq.get(queue_name, id=mid)
        assert m is not None
        bucket, shard = row_of(uuid.UUID(mid), qs.bucket_ms, qs.buckets, qs.shards)
        await cq.db.run(
            f"UPDATE {TEST_KEYSPACE}.messages SET {column} = {value} WHERE queue=%s AND bucket=%s AND shard=%s AND "
            "kind=1 AND rank=0 AND due=%s AND id=%s",
            [queue_name, bucket, shard, m.due_ms, m.id],
            timestamp=m.write_ts + 1,
        )
        bad[mid] = what
    more_good = [await cq.send(queue_name, "test.record", i) for i in range(5)]
    record = tmp_path / "record.txt"
    d = start_daemon(write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name]), record, tmp_path / "log")
    try:

        async def settled() -> bool:
            return await cq.stores.poison.count(queue_name) == len(bad) and len(records(record)) == 10

        await until(settled, 60, "corrupt rows poisoned and good ones processed", d)
    finally:
        d.signal(signal.SIGTERM)
        assert d.wait() == 0, d.output()[-2000:]
    poison = {str(p.id): p.reason for p in await cq.stores.poison.list(queue_name)}
    assert set(poison) == set(bad)
    assert all(reason for reason in poison.values())
    assert sorted(r[1] for r in records(record)) == sorted(good + more_good)
    assert "dispatch_error" not in d.output()

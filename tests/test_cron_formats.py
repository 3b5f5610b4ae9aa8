"""Cron dialects: Quartz (seconds first) is translated when marked and never silently taken for
croniter (seconds last); ambiguous six-field expressions are refused with both readings; ``send``
shows the next three fire times (API and CLI)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from daemon.base.errors import UsageError
from daemon.engine.client import Casque
from daemon.engine.schedules.cronspec import normalize
from daemon.engine.schedules.triggers import make_trigger, upcoming

from .conftest import TEST_KEYSPACE

ROOT = Path(__file__).resolve().parent.parent
T0 = int(datetime(2026, 6, 1, 8, 0, 0, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    "quartz, croniter_form",
    [
        ("*/5 * * * * ?", "* * * * * */5"),  # every 5 seconds
        ("0 0 9 ? * MON-FRI", "0 9 * * MON-FRI"),  # 09:00 on weekdays
        ("0 15 10 ? * 2-6", "15 10 * * 1-5"),  # Quartz weekdays 2-6 (Mon-Fri) are croniter's 1-5
        ("0 0 12 ? * 6#3", "0 12 * * 5#3"),  # the third Friday
        ("0 0 12 ? * 6L", "0 12 * * L5"),  # the last Friday
        ("0 30 9 * * ? *", "30 9 * * *"),  # a 7th (year) field of '*'
    ],
)
def test_quartz_is_translated_when_marked(quartz: str, croniter_form: str) -> None:
    assert normalize(quartz, "quartz") == croniter_form


def test_quartz_every_five_seconds_fires_every_five_seconds() -> None:
    t = make_trigger(cron="*/5 * * * * *", cron_format="quartz")
    first = T0 + 5000
    assert [b - a for a, b in zip(upcoming(t, first, 4), upcoming(t, first, 4)[1:])] == [5000, 5000, 5000]
    croniter_reading = make_trigger(cron="*/5 * * * * *", cron_format="croniter")
    assert upcoming(croniter_reading, T0, 3) == [T0, T0 + 1000, T0 + 2000]  # every second of every fifth minute


@pytest.mark.parametrize(
    "expr, words",
    [
        (
            "*/5 * * * * *",
            ["is ambiguous", "seconds last ('*/5 * * * * *')", "Quartz reads seconds first (croniter '* * * * * */5')"],
        ),
        ("0 0 9 ? * MON-FRI", ["is Quartz syntax", "croniter's '0 9 * * MON-FRI'"]),
        ("0 30 9 * * *", ["is Quartz syntax", "croniter's '30 9 * * *'"]),  # hour 30 only makes sense as Quartz
        ("0 0 12 * * ? 2027", ["is Quartz syntax"]),
    ],
)
def test_unmarked_quartz_or_ambiguous_expressions_are_refused(expr: str, words: list[str]) -> None:
    with pytest.raises(UsageError) as err:
        make_trigger(cron=expr)
    for w in words:
        assert w in str(err.value)


def test_unambiguous_six_fields_and_five_fields_are_taken() -> None:
    assert normalize("30 9 * * * 15") == "30 9 * * * 15"  # Quartz weekday 15 is impossible: only croniter reads it
    assert normalize("* * * * * *") == "* * * * * *"  # every second either way
    assert normalize("0 9 * * *") == "0 9 * * *"


def test_quartz_year_and_bad_weekday_are_refused() -> None:
    with pytest.raises(UsageError, match="names a year"):
        normalize("0 0 12 * * ? 2027", "quartz")
    with pytest.raises(UsageError, match="weekday 0 is out of range"):
        normalize("0 0 12 ? * 0", "quartz")
    with pytest.raises(UsageError, match="invalid cron format 'java'"):
        normalize("0 9 * * *", "java")


async def test_send_returns_the_next_three_fire_times(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    sent = await cq.send(queue_name, "t", None, cron="0 0 9 ? * MON-FRI", cron_format="quartz", key="weekday")
    assert len(sent.next_fires) == 3 and isinstance(sent, str)
    assert all(t.hour == 9 and t.minute == 0 and t.weekday() < 5 for t in sent.next_fires)
    m = await cq.get(queue_name, key="weekday")
    assert m is not None and str(m.id) == sent and m.trigger is not None and m.trigger["cron"] == "0 9 * * MON-FRI"
    assert int(sent.next_fires[0].timestamp() * 1000) == m.due_ms
    capped = await cq.send(queue_name, "t", None, every="1h", times=2)
    assert [b - a for a, b in zip(capped.next_fires, capped.next_fires[1:])] == [
        capped.next_fires[1] - capped.next_fires[0]
    ]
    assert len(capped.next_fires) == 2
    plain = await cq.send(queue_name, "t", None)
    assert plain.next_fires == []


def test_cli_prints_fire_times_and_refuses_ambiguous(tmp_path: Path, cq: Casque, queue_name: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{TEST_KEYSPACE}"\n')

    def casque(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "daemon.cli", "-c", str(cfg), *args], cwd=ROOT, capture_output=True, text=True
        )

    assert casque("queue", "create", queue_name).returncode == 0
    ok = casque("send", queue_name, "t", "--cron", "*/5 * * * * *", "--cron-format", "quartz", "--key", "five")
    assert ok.returncode == 0, ok.stderr
    assert len(ok.stdout.split()) == 1  # stdout is the id alone
    times = ok.stderr.strip().splitlines()[-1].removeprefix("next fire times: ").split(", ")
    stamps = [datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() for t in times]
    assert len(stamps) == 3 and [b - a for a, b in zip(stamps, stamps[1:])] == [5.0, 5.0]
    bad = casque("send", queue_name, "t", "--cron", "*/5 * * * * *")
    assert bad.returncode == 2 and "is ambiguous" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1

"""Trigger math, without a database: fixed-rate intervals, cron in local zones across both DST
transitions, repeat counts, end times and misfire policies."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from daemon.base.errors import UsageError
from daemon.engine.schedules.triggers import (
    Trigger,
    cron_next,
    first,
    following,
    make_trigger,
    occurrence_id,
    should_run,
    start,
)

BERLIN = "Europe/Berlin"


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def run(t: Trigger, count: int, now_of=lambda fire: fire) -> list[int]:
    """Fire times of the next ``count`` occurrences, each taken at ``now_of(fire)``."""
    out = [t.fire_ms]
    while len(out) < count:
        nxt = following(t, now_of(t.fire_ms))
        if nxt is None:
            break
        t = nxt
        out.append(t.fire_ms)
    return out


def scheduled(trigger: Trigger, first_ms: int) -> Trigger:
    return start(trigger, first_ms)[0]


def test_every_is_fixed_rate_without_drift_even_when_taken_late() -> None:
    t = scheduled(make_trigger(every="10s"), 1_000_000)
    fires = run(t, 5, now_of=lambda fire: fire + 3_000)  # each taken 3 s late (within grace)
    assert fires == [1_000_000, 1_010_000, 1_020_000, 1_030_000, 1_040_000]


def test_repeat_count_is_honoured() -> None:
    t = scheduled(make_trigger(every="1s", times=5), 0 + 10_000)
    assert len(run(t, 100)) == 5


def test_end_time_is_honoured() -> None:
    t = scheduled(make_trigger(every="10s", until_ms=1_035_000), 1_000_000)
    assert run(t, 100) == [1_000_000, 1_010_000, 1_020_000, 1_030_000]


def test_cron_with_seconds_every_second() -> None:
    start_ms = ms("2026-01-01T00:00:00+00:00")
    t = scheduled(make_trigger(cron="* * * * * *"), first(make_trigger(cron="* * * * * *"), start_ms, start_ms))
    fires = run(t, 5)
    assert [f - fires[0] for f in fires] == [0, 1000, 2000, 3000, 4000]


def test_daily_job_across_spring_forward_fires_once_after_the_gap() -> None:
    # 2026-03-29 02:00 CET -> 03:00 CEST: 02:30 does not exist that night.
    t = scheduled(make_trigger(cron="30 2 * * *", tz=BERLIN), ms("2026-03-28T02:30:00+01:00"))
    assert run(t, 4) == [
        ms("2026-03-28T02:30:00+01:00"),
        ms("2026-03-29T03:30:00+02:00"),
        ms("2026-03-30T02:30:00+02:00"),
        ms("2026-03-31T02:30:00+02:00"),
    ]


def test_daily_job_across_fall_back_fires_once_not_twice() -> None:
    # 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens twice that night.
    t = scheduled(make_trigger(cron="30 2 * * *", tz=BERLIN), ms("2026-10-24T02:30:00+02:00"))
    assert run(t, 3) == [
        ms("2026-10-24T02:30:00+02:00"),
        ms("2026-10-25T02:30:00+02:00"),
        ms("2026-10-26T02:30:00+01:00"),
    ]


def test_every_hour_cron_across_both_transitions_never_doubles_or_skips_a_wall_time() -> None:
    spring = run(scheduled(make_trigger(cron="0 * * * *", tz=BERLIN), ms("2026-03-29T00:00:00+01:00")), 4)
    assert spring == [
        ms("2026-03-29T00:00:00+01:00"),
        ms("2026-03-29T01:00:00+01:00"),
        ms("2026-03-29T03:00:00+02:00"),
        ms("2026-03-29T04:00:00+02:00"),
    ]
    fall = run(scheduled(make_trigger(cron="0 * * * *", tz=BERLIN), ms("2026-10-25T01:00:00+02:00")), 4)
    assert fall == [
        ms("2026-10-25T01:00:00+02:00"),
        ms("2026-10-25T02:00:00+02:00"),
        ms("2026-10-25T03:00:00+01:00"),
        ms("2026-10-25T04:00:00+01:00"),
    ]
    assert len(set(spring)) == len(spring) and len(set(fall)) == len(fall)


def test_misfire_coalesce_runs_once_and_continues_after_now() -> None:
    t = scheduled(make_trigger(every="10s"), 1_000_000)
    nxt = following(t, now_ms=1_000_000 + 95_000)  # daemons were down for 9 fire times
    assert nxt is not None and nxt.fire_ms == 1_100_000 and nxt.n == 11


def test_misfire_all_runs_each_missed_occurrence_up_to_the_limit() -> None:
    t = scheduled(make_trigger(every="10s", misfire="all", catchup=20), 1_000_000)
    now = 1_000_000 + 95_000
    fires = []
    while t.fire_ms <= now:
        fires.append(t.fire_ms)
        nxt = following(t, now)
        assert nxt is not None
        t = nxt
    assert fires == [1_000_000 + 10_000 * i for i in range(10)]
    capped = scheduled(make_trigger(every="10s", misfire="all", catchup=3), 1_000_000)
    after = following(capped, now)
    assert after is not None and after.fire_ms == 1_100_000  # more missed than the limit: coalesce


def test_misfire_skip_does_not_run_the_late_occurrence() -> None:
    t = scheduled(make_trigger(every="10s", misfire="skip", grace="5s"), 1_000_000)
    assert should_run(t, 1_004_000) is True
    assert should_run(t, 1_006_000) is False
    after = following(t, 1_006_000)
    assert after is not None and after.fire_ms == 1_010_000


def test_occurrence_ids_are_deterministic_distinct_and_in_the_origin_row() -> None:
    from daemon.engine.storage.placement import row_of

    t = scheduled(make_trigger(every="1s"), 1_700_000_000_000)
    ids = [occurrence_id(t, n) for n in range(2, 50)]
    assert ids == [occurrence_id(replace(t, n=99), n) for n in range(2, 50)]
    assert len(set(ids)) == len(ids)
    origin_row = row_of(__import__("uuid").UUID(t.origin), 60_000, 24, 16)
    assert all(row_of(i, 60_000, 24, 16) == origin_row for i in ids)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"cron": "61 * * * *"}, "invalid cron expression '61 * * * *'"),
        ({"cron": "* * *"}, "invalid cron expression"),
        ({"cron": "0 9 * * *", "tz": "Europe/Nowhere"}, "invalid time zone 'Europe/Nowhere'"),
        ({"every": "0.5s"}, "repeat at most once a second"),
        ({"every": "soon"}, "invalid interval 'soon'"),
        ({"every": "1m", "times": 0}, "invalid repeat count 0"),
        ({"every": "1m", "misfire": "maybe"}, "invalid misfire policy 'maybe'"),
        ({}, "exactly one of every"),
        ({"every": "1m", "tz": "UTC"}, "time zone only applies to cron"),
    ],
)
def test_bad_schedules_name_the_bad_value(kwargs: dict, needle: str) -> None:
    with pytest.raises(UsageError, match=needle.replace("*", r"\*").replace("(", r"\(")):
        make_trigger(**kwargs)


def test_cron_next_is_strictly_after() -> None:
    t0 = ms("2026-06-01T09:00:00+00:00")
    assert cron_next("0 9 * * *", "UTC", t0) == ms("2026-06-02T09:00:00+00:00")
    assert cron_next("0 9 * * *", "UTC", t0 - 1) == t0

"""Triggers: when a scheduled message fires again. Pure functions, unit-tested without a database.

A trigger is stored as JSON on each occurrence of a schedule (its fields, and the check a stored one
passes: engine/storage/stored_trigger.py, beside the messages table that reads it). Kinds:

* ``every``: a fixed rate from the first fire time (``first + n * interval``: no drift), with an
  optional repeat count (``times``, total occurrences) and end time (``until``); both honoured.
* ``cron``: a croniter expression (5 fields, or 6 with seconds last; Quartz's seconds-first form is
  translated when marked, never guessed: cronspec.py) in a time zone. Each matching
  *local wall-clock time* fires once: a time skipped by a DST gap fires at the same offset after the
  gap (02:30 on a spring-forward night fires at 03:30), and a time repeated by a DST fold fires only
  at its first occurrence. So a daily job never fires twice or not at all; an every-15-minutes job
  in a local zone pauses for the repeated hour (use UTC or ``every`` for pure intervals).

Misfires (the occurrence was taken more than ``grace`` after its fire time, e.g. every daemon was
down): ``coalesce`` (default) runs it once and continues with the first fire time after now;
``all`` runs every missed occurrence, at most ``catchup`` of them, then coalesces; ``skip`` does not
run the late occurrence at all and continues after now.

Every occurrence of a schedule lives in the row of its first occurrence, and occurrence ``n`` has a
deterministic id (the schedule's origin id + n), so the next occurrence is written in the very batch
that takes the current one (under the row lock): each occurrence fires once, whatever the number of
daemons, and a duplicate write of it would only overwrite the same cell. A take later than the next
fire time writes it at the take's time instead (nothing may be written behind a cursor): after a
take batch in doubt that was applied once the occurrence had been taken again, two copies of the
next occurrence run, and each writes its own successor, until a take comes before the next fire
time and both write the same cell again. At least once, as every delivery under a fault.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime

from croniter import croniter

from daemon.base.durations import parse_duration
from daemon.base.errors import UsageError
from daemon.engine.schedules import cronspec
from daemon.engine.storage.placement import new_id, sibling_id
from daemon.engine.storage.stored_trigger import DEFAULT_CATCHUP, DEFAULT_GRACE_MS, MISFIRE, Trigger, zone


def check_cron(expr: str, cron_format: str | None = None) -> str:
    """The croniter expression to store: 5 fields as is; 6 or 7 only when their reading is
    certain (cronspec.py: Quartz, seconds first, is never taken for croniter's seconds last)."""
    return cronspec.normalize(expr, cron_format)


def make_trigger(
    *,
    every: float | str | None = None,
    cron: str | None = None,
    tz: str | None = None,
    times: int | None = None,
    until_ms: int | None = None,
    misfire: str = "coalesce",
    grace: float | str | None = None,
    catchup: int = DEFAULT_CATCHUP,
    cron_format: str | None = None,
) -> Trigger:
    """Validate user input into a Trigger (origin/n/fire times are filled in by ``first``)."""
    if (every is None) == (cron is None):
        raise UsageError("a schedule needs exactly one of every=... or cron=...")
    if misfire not in MISFIRE:
        raise UsageError(f"invalid misfire policy {misfire!r}: use coalesce, all or skip")
    if times is not None and (isinstance(times, bool) or not isinstance(times, int) or times < 1):
        raise UsageError(f"invalid repeat count {times!r}: use a whole number of at least 1")
    if not isinstance(catchup, int) or catchup < 1:
        raise UsageError(f"invalid catch-up limit {catchup!r}: use a whole number of at least 1")
    grace_ms = int(parse_duration(grace, "grace") * 1000) if grace is not None else DEFAULT_GRACE_MS
    if tz is not None and cron is None:
        raise UsageError("a time zone only applies to cron schedules")
    if every is not None:
        every_ms = int(parse_duration(every, "interval") * 1000)
        if every_ms < 1000:
            raise UsageError(f"invalid interval {every!r}: repeat at most once a second (at least '1s')")
        return Trigger(
            "every",
            every_ms=every_ms,
            times=times,
            until_ms=until_ms,
            misfire=misfire,
            grace_ms=grace_ms,
            catchup=catchup,
        )
    zone(tz or "UTC")
    return Trigger(
        "cron",
        cron=check_cron(cron or "", cron_format),
        tz=tz or "UTC",
        times=times,
        until_ms=until_ms,
        misfire=misfire,
        grace_ms=grace_ms,
        catchup=catchup,
    )


def cron_next(expr: str, tz: str, after_ms: int) -> int:
    """The first fire time strictly after ``after_ms``, with each local wall time firing once."""
    z = zone(tz)
    after = datetime.fromtimestamp(after_ms / 1000, tz=UTC).astimezone(z)
    it = croniter(expr, after.replace(tzinfo=None))
    for _ in range(10_000):
        wall: datetime = it.get_next(datetime)
        instant = int(wall.replace(tzinfo=z, fold=0).timestamp() * 1000)
        if instant > after_ms:
            return instant
    raise UsageError(f"cron expression {expr!r} never fires")  # pragma: no cover - croniter rejects these


def _nth_every(t: Trigger, n: int) -> int:
    return t.first_ms + (n - 1) * t.every_ms


def first(t: Trigger, start_ms: int, now_ms: int) -> int:
    """The first fire time: ``start_ms`` for ``every`` when the caller gave one, else one interval
    from now; for cron, the first matching time at or after the start."""
    if t.kind == "every":
        return start_ms if start_ms > now_ms else now_ms + t.every_ms
    return cron_next(t.cron, t.tz, max(start_ms, now_ms) - 1)


def start(t: Trigger, origin_due_ms: int, seed: bytes | None = None) -> tuple[Trigger, uuid.UUID]:
    """The first occurrence: its trigger state and its id (the schedule's origin)."""
    origin = new_id(origin_due_ms, seed)
    return replace(t, origin=str(origin), n=1, fire_ms=origin_due_ms, first_ms=origin_due_ms), origin


def occurrence_id(t: Trigger, n: int) -> uuid.UUID:
    """Occurrence n's id: deterministic, and in the same row as the origin (same due field)."""
    return sibling_id(uuid.UUID(t.origin), n)


def following(t: Trigger, now_ms: int) -> Trigger | None:
    """The occurrence after ``t`` (taken at ``now_ms``), after the misfire policy and the end
    conditions; None when the schedule is over."""
    late = now_ms - t.fire_ms > t.grace_ms
    n, fire = t.n + 1, _after(t, t.fire_ms)
    if late and fire <= now_ms:
        if t.misfire == "all" and _missed(t, now_ms) <= t.catchup:
            pass  # run the next missed one right away
        else:
            n, fire = _skip_to_now(t, n, fire, now_ms)
    if t.times is not None and n > t.times:
        return None
    if t.until_ms is not None and fire > t.until_ms:
        return None
    return replace(t, n=n, fire_ms=fire)


def should_run(t: Trigger, now_ms: int) -> bool:
    """False only for a late occurrence under the ``skip`` policy."""
    return not (t.misfire == "skip" and now_ms - t.fire_ms > t.grace_ms)


def upcoming(t: Trigger, first_ms: int, count: int = 3) -> list[int]:
    """The first ``count`` fire times from ``first_ms`` (fewer when ``times`` or ``until`` ends the
    schedule sooner): what ``send`` shows, so a misread expression is seen before it fires."""
    fires = [first_ms]
    while len(fires) < count and (t.times is None or len(fires) < t.times):
        nxt = _after(t, fires[-1])
        if t.until_ms is not None and nxt > t.until_ms:
            break
        fires.append(nxt)
    return fires


def _after(t: Trigger, fire_ms: int) -> int:
    if t.kind == "every":
        return fire_ms + t.every_ms
    return cron_next(t.cron, t.tz, fire_ms)


def _missed(t: Trigger, now_ms: int) -> int:
    count, fire = 0, _after(t, t.fire_ms)
    while fire <= now_ms and count <= t.catchup:
        count += 1
        fire = _after(t, fire)
    return count


def _skip_to_now(t: Trigger, n: int, fire: int, now_ms: int) -> tuple[int, int]:
    """Advance to the first fire time after now, counting the occurrences skipped (so ``times``
    still bounds the schedule by its calendar, not by how often it ran)."""
    if t.kind == "every":
        k = (now_ms - t.first_ms) // t.every_ms + 2
        return k, _nth_every(t, k)
    while fire <= now_ms:
        n, fire = n + 1, cron_next(t.cron, t.tz, fire)
    return n, fire

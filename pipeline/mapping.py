"""The load job's column mapping: which input column (or Spark SQL expression) feeds which field of
a send, and how one input row becomes a ``daemon.producer.Job``.

The Spark side (``to_fields``) only selects and normalises columns, so every value reaches Python
as text, a number or None. The Python side (``to_job``) is pure: it turns those values into the very
``Job`` that ``Casque.send`` would build from the same arguments, so validation, placement and
schedules then run through the producer's own ``build_message`` (see ``pipeline.sender``).

Fields (``--map FIELD=EXPR`` or ``--const FIELD=VALUE``):

  task (required), payload (JSON text, or a struct/map/array column), at (epoch seconds, ISO 8601
  text, or a timestamp column), delay (seconds or '10s'), priority, key, on_conflict
  (replace|keep|error), every, cron, tz, times, until (like at), misfire, grace, timeout,
  max_attempts, headers (JSON object or a map column), seed (makes the id deterministic).
"""

from __future__ import annotations

import json
import math
from typing import Any

from daemon.base.errors import UsageError
from daemon.base.terminal import parse_time
from daemon.engine.schedules.triggers import make_trigger
from daemon.engine.send.producer import Job, OnConflict

from .errors import MappingError

JSON_FIELDS = ("payload", "headers")
TIME_FIELDS = ("at", "until")
NUMBER_FIELDS = ("delay", "every", "grace", "timeout", "priority", "times", "max_attempts")
TEXT_FIELDS = ("task", "key", "on_conflict", "cron", "tz", "misfire", "seed")
FIELDS = (
    "task",
    "payload",
    "at",
    "delay",
    "priority",
    "key",
    "on_conflict",
    "every",
    "cron",
    "tz",
    "times",
    "until",
    "misfire",
    "grace",
    "timeout",
    "max_attempts",
    "headers",
    "seed",
)
POLICIES: tuple[OnConflict, ...] = ("replace", "keep", "error")


def parse_pairs(items: list[str], what: str) -> dict[str, str]:
    """``["task=kind", "key=user_id"]`` to a dict, with one-line errors naming the bad item."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not value.strip():
            raise MappingError(f"invalid {what} {item!r}: use FIELD=VALUE, e.g. task=kind")
        if name not in FIELDS:
            raise MappingError(f"unknown field {name!r} in {what} {item!r}: fields are {', '.join(FIELDS)}")
        if name in out:
            raise MappingError(f"field {name!r} is given twice in {what}")
        out[name] = value.strip()
    return out


def check_mapping(mapping: dict[str, str], consts: dict[str, str]) -> None:
    both = sorted(set(mapping) & set(consts))
    if both:
        raise MappingError(f"field {both[0]!r} is both mapped and constant: give one of --map or --const")
    if "task" not in mapping and "task" not in consts:
        raise MappingError("no task: map a column with --map task=COLUMN or give every row one with --const task=NAME")
    if consts.get("on_conflict", "replace") not in POLICIES:
        raise MappingError(f"invalid --const on_conflict={consts['on_conflict']!r}: use replace, keep or error")


def to_fields(df: Any, mapping: dict[str, str], consts: dict[str, str]) -> Any:
    """Select the mapped fields from ``df`` (Spark), normalised to text or numbers, as columns
    ``f_<field>``; unmapped fields are absent. Raises MappingError for a bad expression."""
    from pyspark.sql import functions as F

    cols = []
    for field, source in mapping.items():
        try:
            col = F.expr(source)
            kind = df.select(col.alias("x")).schema["x"].dataType.typeName()
        except Exception as exc:  # AnalysisException, ParseException: the first line says what
            available = ", ".join(df.columns)
            raise MappingError(
                f"--map {field}={source}: {str(exc).splitlines()[0][:200]} (input columns: {available})"
            ) from None
        cols.append(_normalise(F, col, field, kind).alias(f"f_{field}"))
    for field, value in consts.items():
        cols.append(F.lit(value).alias(f"f_{field}"))
    return cols


def _normalise(F: Any, col: Any, field: str, kind: str) -> Any:
    """Spark types to what ``to_job`` reads: JSON text, epoch seconds, numbers or text."""
    if field in JSON_FIELDS:
        return col if kind == "string" else F.to_json(col) if kind in ("struct", "map", "array") else col.cast("string")
    if field in TIME_FIELDS and kind in ("timestamp", "timestamp_ntz", "date"):
        return F.unix_micros(col.cast("timestamp")) / 1e6
    if field in NUMBER_FIELDS or field in TIME_FIELDS:
        return (
            col.cast("double")
            if kind.startswith("decimal")
            else col
            if kind in ("string", "integer", "long", "short", "byte", "double", "float")
            else col.cast("string")
        )
    return col.cast("string")


def to_job(values: dict[str, Any], default_policy: OnConflict = "replace") -> Job:
    """One input row (``{field: value}``) to the Job ``Casque.send`` would build. Raises UsageError
    (the row is then rejected with that message)."""
    task = values.get("task")
    if task is None:
        raise UsageError("task is empty: every row needs a task name")
    policy = policy_of(values.get("on_conflict") or default_policy)
    seed = values.get("seed")
    return Job(
        task=str(task),
        payload=_json(values.get("payload"), "payload"),
        delay=values.get("delay"),
        at=_time(values.get("at"), "at"),
        priority=_int(values.get("priority"), "priority", 0) or 0,
        timeout=values.get("timeout"),
        max_attempts=_int(values.get("max_attempts"), "max_attempts", None),
        headers=_headers(values.get("headers")),
        key=values.get("key"),
        on_conflict=policy,
        schedule=_schedule(values),
        seed=seed.encode("utf-8") if seed is not None else None,
    )


def policy_of(value: Any) -> OnConflict:
    """A conflict policy from text, or UsageError."""
    for policy in POLICIES:
        if value == policy:
            return policy
    raise UsageError(f"invalid on_conflict {value!r}: use replace, keep or error")


def _schedule(values: dict[str, Any]) -> Any:
    every, cron = values.get("every"), values.get("cron")
    tz, times, until = values.get("tz"), _int(values.get("times"), "times", None), _time(values.get("until"), "until")
    if every is None and cron is None:
        if tz is not None or times is not None or until is not None:
            raise UsageError("tz, times and until only apply to schedules: give every or cron too")
        return None
    until_ms = int(until * 1000) if until is not None else None
    return make_trigger(
        every=every,
        cron=cron,
        tz=tz,
        times=times,
        until_ms=until_ms,
        misfire=values.get("misfire") or "coalesce",
        grace=values.get("grace"),
    )


def _json(text: Any, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise UsageError(f'{what} is not valid JSON ({exc}): give JSON text, e.g. {{"user": 42}}') from None


def _headers(text: Any) -> dict[str, str]:
    value = _json(text, "headers")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"headers must be a JSON object of strings, got {text!r}")
    return value


def _time(value: Any, what: str) -> float | None:
    """Epoch seconds from a number, a numeric string or ISO 8601 text (naive means UTC)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise UsageError(f"invalid {what} {value!r}: use epoch seconds or ISO 8601, e.g. 2026-11-21T09:00:00Z")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        try:
            return parse_time(str(value))
        except UsageError:
            raise UsageError(
                f"invalid {what} {value!r}: use epoch seconds or ISO 8601, e.g. 2026-11-21T09:00:00Z"
            ) from None
    if not math.isfinite(seconds):
        raise UsageError(f"invalid {what} {value!r}: use epoch seconds or ISO 8601, e.g. 2026-11-21T09:00:00Z")
    return seconds


def _int(value: Any, what: str, default: int | None) -> int | None:
    """A whole number from an int, an integral float or numeric text; else UsageError."""
    if value is None:
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number != int(number):
        raise UsageError(f"invalid {what} {value!r}: use a whole number")
    return int(number)

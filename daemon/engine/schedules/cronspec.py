"""What a cron expression means, decided before it is stored: croniter's or Quartz's reading.

Two dialects write six fields in a different order:

* croniter (what casque runs): ``min hour day month weekday [sec]``, seconds *last*, weekday 0-6
  from Sunday (7 is Sunday too);
* Quartz (Java schedulers, the Astyanax recipe): ``sec min hour day month weekday [year]``,
  seconds *first*, ``?`` for "no specific value", weekday 1-7 from Sunday.

So ``*/5 * * * * *`` is "every 5 seconds" to Quartz and "every second of every fifth minute" to
croniter. casque never guesses between them:

* 5 fields: standard cron, taken as is.
* ``cron_format="quartz"``: translated to croniter's form (seconds moved last, ``?`` to ``*``,
  weekdays shifted down by one, ``#`` and ``L`` kept); a year other than ``*`` is refused.
* ``cron_format="croniter"``: 5 or 6 fields, seconds last.
* Unmarked 6 or 7 fields: taken only when just one reading is possible (or both mean the same,
  ``* * * * * *``). Quartz-only syntax (``?``, a 7th field) or a Quartz-only reading is refused with
  the croniter equivalent in the message; an expression valid both ways is refused with both
  readings spelled out. Schedules already stored are croniter expressions and are not re-read.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from croniter import croniter

from daemon.base.errors import UsageError

FORMATS = ("croniter", "quartz")
_NUMBER = re.compile(r"\d+")


def normalize(expr: str, cron_format: str | None = None) -> str:
    """The croniter expression that ``expr`` means, or a UsageError naming the fix."""
    if not isinstance(expr, str) or not expr.strip():
        raise UsageError(
            f"invalid cron expression {expr!r}: use 5 fields 'min hour day month weekday', e.g. '0 9 * * *'"
        )
    if cron_format is not None and cron_format not in FORMATS:
        raise UsageError(f"invalid cron format {cron_format!r}: use croniter (seconds last) or quartz (seconds first)")
    fields = expr.split()
    if cron_format == "quartz":
        return _checked(from_quartz(fields, expr), expr, "quartz")
    if len(fields) == 5 or cron_format == "croniter":
        return _checked(" ".join(fields) if len(fields) in (5, 6) else "", expr, "croniter")
    if len(fields) not in (6, 7):
        raise UsageError(
            f"invalid cron expression {expr!r}: use 5 fields 'min hour day month weekday' (or 6 with cron_format), "
            "e.g. '0 9 * * *'"
        )
    return _unmarked(fields, expr)


def _unmarked(fields: list[str], expr: str) -> str:
    """Six or seven unmarked fields: accept only what cannot be misread."""
    as_quartz = _try(lambda: from_quartz(fields, expr))
    quartz_only = len(fields) == 7 or "?" in expr
    as_croniter = None if quartz_only else _valid(" ".join(fields))
    if quartz_only and not as_quartz:
        try:
            from_quartz(fields, expr)
        except UsageError as exc:
            raise UsageError(
                f"cron expression {expr!r} is Quartz syntax (seconds first) that croniter cannot run: {exc}"
            ) from None
    if all(f == "*" for f in fields) and as_croniter:
        return as_croniter
    if as_croniter and not as_quartz:
        return as_croniter
    if as_quartz and not as_croniter:
        raise UsageError(
            f"cron expression {expr!r} is Quartz syntax (seconds first): mark it with "
            "cron_format='quartz' (--cron-format quartz) "
            f"or write croniter's '{as_quartz}'"
        )
    if as_quartz and as_croniter:
        raise UsageError(
            f"cron expression {expr!r} is ambiguous: croniter reads seconds last ('{as_croniter}'), "
            "Quartz reads seconds first "
            f"(croniter '{as_quartz}'): say which with cron_format='croniter' or 'quartz' (--cron-format)"
        )
    raise UsageError(f"invalid cron expression {expr!r}: use 5 fields 'min hour day month weekday', e.g. '0 9 * * *'")


def from_quartz(fields: list[str], expr: str) -> str:
    """Quartz ``sec min hour day month weekday [year]`` as croniter's ``min hour day month weekday [sec]``."""
    if len(fields) not in (6, 7):
        raise UsageError(
            f"invalid Quartz expression {expr!r}: Quartz needs 6 or 7 fields 'sec min hour day month weekday [year]'"
        )
    if len(fields) == 7 and fields[6] not in ("*", "?"):
        raise UsageError(
            f"Quartz expression {expr!r} names a year ({fields[6]}): croniter has no year field; drop it or use '*'"
        )
    sec, minute, hour, day, month, weekday = (f.replace("?", "*") for f in fields[:6])
    out = [minute, hour, day, month, _weekday(weekday, expr)]
    if sec != "0":
        out.append(sec)
    return " ".join(out)


def _weekday(field: str, expr: str) -> str:
    """Quartz weekdays 1-7 (Sunday first) as croniter's 0-6; names stay names."""

    def shift(m: re.Match[str]) -> str:
        n = int(m.group())
        if not 1 <= n <= 7:
            raise UsageError(
                f"Quartz expression {expr!r}: weekday {n} is out of range (Quartz weekdays are 1-7, 1 = Sunday)"
            )
        return str(n - 1)

    out = []
    for part in field.split(","):
        head, slash, step = part.partition("/")
        nth = head.partition("#")
        head = _NUMBER.sub(shift, nth[0]) + nth[1] + nth[2]
        if head.endswith("L") and head[:-1].isdigit():  # Quartz "6L" (last Friday) is croniter "L5"
            head = "L" + head[:-1]
        if slash and head.isdigit():  # Quartz "2/2" runs to the end of the week
            head = f"{head}-6"
        out.append(head + slash + step)
    return ",".join(out)


def _checked(candidate: str, expr: str, fmt: str) -> str:
    if not _valid(candidate):
        raise UsageError(
            f"invalid cron expression {expr!r} for {fmt}: "
            + (
                "use 'min hour day month weekday [sec]', e.g. '0 9 * * *'"
                if fmt == "croniter"
                else "use 'sec min hour day month weekday', e.g. '0 0 9 ? * MON-FRI'"
            )
        )
    return candidate


def _valid(candidate: str) -> str | None:
    return candidate if len(candidate.split()) in (5, 6) and croniter.is_valid(candidate) else None


def _try(make: Callable[[], str]) -> str | None:
    try:
        return _valid(make())
    except UsageError:
        return None

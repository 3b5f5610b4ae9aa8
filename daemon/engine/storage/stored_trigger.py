"""A trigger as each occurrence of a schedule stores it (JSON in its message's ``trigger`` column), and the check a
stored one must pass before it is used: a message whose trigger fails it is corrupt (``message_from_row`` in
engine/storage/table.py) and is poisoned, never looped on.

What a trigger means and when it fires next are engine/schedules/triggers.py's; this is only its stored form, here
beside the messages table that reads it.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from daemon.base.errors import UsageError

MISFIRE = ("coalesce", "all", "skip")
DEFAULT_GRACE_MS = 60_000
DEFAULT_CATCHUP = 100


@dataclass(frozen=True)
class Trigger:
    kind: str  # "every" | "cron"
    every_ms: int = 0
    cron: str = ""
    tz: str = "UTC"
    times: int | None = None
    until_ms: int | None = None
    misfire: str = "coalesce"
    grace_ms: int = DEFAULT_GRACE_MS
    catchup: int = DEFAULT_CATCHUP
    origin: str = ""  # id of the first occurrence: fixes the row and seeds every occurrence id
    n: int = 1  # this occurrence's number (1-based)
    fire_ms: int = 0  # when this occurrence is scheduled to fire
    first_ms: int = 0  # the first occurrence's fire time (the base of ``every``)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trigger:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def parse_stored(data: Any) -> Trigger:
    """A stored trigger, checked enough that computing its next occurrence can't fail later.
    Raises ValueError (the message is then poisoned as corrupt, never looped on)."""
    try:
        t = Trigger.from_json(data)
        ok = (t.kind == "every" and isinstance(t.every_ms, int) and t.every_ms >= 1000) or (
            t.kind == "cron" and croniter.is_valid(t.cron)
        )
        ints = all(
            isinstance(v, int) and not isinstance(v, bool) for v in (t.n, t.fire_ms, t.first_ms, t.grace_ms, t.catchup)
        )
        if not (ok and ints and t.misfire in MISFIRE and t.origin):
            raise ValueError("fields out of range")
        uuid.UUID(t.origin)
        zone(t.tz)
        return t
    except (TypeError, ValueError, AttributeError, UsageError) as exc:
        raise ValueError(f"stored trigger is invalid ({exc})") from None


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise UsageError(
            f"invalid time zone {name!r}: use an IANA name such as 'Europe/Berlin', 'America/New_York' or 'UTC'"
        ) from None

"""How values look on the console's pages: Jinja filters for times, ages, rates and payloads."""

from __future__ import annotations

import json
from typing import Any

from daemon.base.durations import format_duration
from daemon.base.terminal import describe_trigger, iso


def age(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(round(seconds, 1))


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}/s"


def pretty(value: Any) -> str:
    """A payload or headers as indented JSON; bytes that are not JSON are shown as text."""
    if isinstance(value, bytes):
        try:
            value = json.loads(value)
        except ValueError:
            return value.decode("utf-8", "replace")
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def state(m: Any, now_ms: int) -> str:
    """What an operator calls a stored message: taken (in flight), due (waiting) or not yet due."""
    if m.state:
        return "in flight"
    return "scheduled" if m.due_ms > now_ms else "waiting"


def error_line(r: Any) -> str:
    """A poisoned message's error as one line, its type named once (the stored text may start with it)."""
    return r.error if r.error.startswith(r.error_type) else f"{r.error_type}: {r.error}"


FILTERS = {
    "error_line": error_line,
    "iso": iso,
    "age": age,
    "rate": rate,
    "pretty": pretty,
    "trigger": describe_trigger,
    "duration": format_duration,
    "state": state,
}

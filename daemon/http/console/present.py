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


def state(value: int) -> str:
    return "in flight" if value else "waiting"


FILTERS = {"iso": iso, "age": age, "rate": rate, "pretty": pretty, "trigger": describe_trigger, "duration": format_duration, "state": state}

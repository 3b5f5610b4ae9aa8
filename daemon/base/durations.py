"""Human durations ("250ms", "10s", "5m", "1h30m", "2d") to seconds.

One parser for the CLI, the config file and the Python API, so "10s" means the same everywhere.
"""

from __future__ import annotations

import re

from daemon.base.errors import UsageError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(value: str | int | float, what: str = "duration") -> float:
    """Return seconds. A bare number is seconds. Raises UsageError naming the bad value."""
    if isinstance(value, bool):
        raise UsageError(f"invalid {what} {value!r}: use a number of seconds or a string like '10s', '5m', '1h30m'")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = value.strip().lower()
        seconds = _parse_text(text, value, what)
    if seconds < 0 or seconds != seconds:
        raise UsageError(f"invalid {what} {value!r}: it must not be negative")
    return seconds


def _parse_text(text: str, original: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise UsageError(f"invalid {what} {original!r}: use a number of seconds or a string like '10s', '5m', '1h30m'")
    return total


def format_duration(seconds: float) -> str:
    """The short form people read in tables: 0.25s, 12s, 5m3s, 2h, 3d4h."""
    if seconds < 60:
        return f"{seconds:.3g}s"
    out, rest = [], int(round(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out.append(f"{rest // size}{unit}")
            rest %= size
        if len(out) == 2:
            break
    return "".join(out)

"""What both command lines (``casque`` and ``casque pipeline``) share: settings for a command,
tables, and times as people write and read them.

It sits in the base layer so that the pipeline's CLI and the daemon's CLI import it from below
instead of from each other.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from daemon.base.config import Settings, load_settings
from daemon.base.durations import format_duration
from daemon.base.errors import CasqueError, UsageError
from daemon.base.logs import configure_logging


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings a command runs with (``-c``, ``$CASQUE_CONFIG``, ...), logging configured."""
    settings = load_settings(args.config)
    configure_logging(settings.log.level, settings.log.format)
    return settings


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)] if rows else [len(h) for h in headers]
    for line in [headers] + rows:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)).rstrip())


def iso(ms: int | None) -> str:
    """Epoch milliseconds as ISO 8601 UTC with milliseconds; ``-`` for none."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def describe_trigger(trigger: dict[str, Any] | None) -> str:
    """A schedule as people read it: 'every 30s, 5 times', "cron '0 9 * * *' Europe/Berlin"."""
    if not trigger:
        return "once"
    what = (
        f"every {format_duration(trigger['every_ms'] / 1000)}"
        if trigger.get("kind") == "every"
        else f"cron '{trigger.get('cron')}' {trigger.get('tz', 'UTC')}"
    )
    if trigger.get("times"):
        what += f", {trigger['times']} times"
    if trigger.get("until_ms"):
        what += f", until {iso(trigger['until_ms'])}"
    return what


def parse_time(text: str) -> float:
    """An ISO 8601 time (naive means UTC) to epoch seconds, with a one-line error."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"invalid time {text!r}: use ISO 8601, e.g. 2026-11-21T09:00:00+01:00") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parse and run one command; a CasqueError becomes ``casque: <one line>`` and its exit code."""
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except CasqueError as exc:
        print(f"casque: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130

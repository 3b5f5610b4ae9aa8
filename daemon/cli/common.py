"""Helpers every command group uses: a connected client per command, output as a table or JSON,
confirmation of destructive commands, messages as dicts."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from daemon.base.errors import UsageError
from daemon.base.model import Message
from daemon.base.terminal import describe_trigger, iso, print_table, settings_of
from daemon.engine.client import Casque


def with_client(
    fn: Callable[[Casque, argparse.Namespace], Awaitable[int | None]],
) -> Callable[[argparse.Namespace], int]:
    """Run an async command against a connected client, closing it afterwards."""

    def run(args: argparse.Namespace) -> int:
        settings = settings_of(args)

        async def go() -> int:
            cq = await Casque.connect(settings)
            try:
                return int(await fn(cq, args) or 0)
            finally:
                await cq.close()

        return asyncio.run(go())

    return run


def emit(
    args: argparse.Namespace, data: Any, table: list[list[str]] | None = None, headers: list[str] | None = None
) -> None:
    if getattr(args, "json", False) or table is None:
        print(json.dumps(data, indent=2, default=str))
        return
    print_table(headers or [], table)


def message_dict(m: Message) -> dict[str, Any]:
    return {
        "id": str(m.id),
        "queue": m.queue,
        "task": m.task,
        "payload": m.payload,
        "priority": m.priority,
        "due": iso(m.due_ms),
        "state": "in_flight" if m.state else "waiting",
        "attempt": m.attempt,
        "max_attempts": m.max_attempts,
        "timeout_s": m.timeout_ms / 1000,
        "key": m.key,
        "headers": m.headers,
        "trigger": m.trigger,
        "schedule": describe_trigger(m.trigger),
        "enqueued_at": iso(m.enqueued_at),
        "last_error": m.last_error,
    }


def confirm(args: argparse.Namespace, question: str) -> None:
    """Destructive commands ask first; --yes (or no terminal to ask on) must be explicit."""
    if getattr(args, "yes", False):
        return
    if not sys.stdin.isatty():
        raise UsageError(f"{question} needs confirmation: add --yes")
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise UsageError("cancelled: nothing was changed")


def add_paging(parser: argparse.ArgumentParser, default_limit: int | None, after: str) -> None:
    """``--limit``/``--after`` for a listing: without ``--limit`` (and no default) every row is
    read, page by page; with it, the last line on stderr names the ``--after`` of the next page."""
    parser.add_argument(
        "--limit",
        "-n",
        type=_at_least_one,
        default=default_limit,
        help=f"show at most this many (default: {default_limit or 'all'})",
    )
    parser.add_argument(
        "--after",
        default=None,
        metavar=after,
        help=f"start after this {after.lower()} (the last one of the previous page)",
    )


def next_page_hint(args: argparse.Namespace, shown: int, last: str | None, command: str) -> None:
    if args.limit is not None and shown >= args.limit and last is not None:
        print(f"casque: {shown} shown; next page: {command} --limit {args.limit} --after {last}", file=sys.stderr)


def page_token(text: str | None) -> int | None:
    """The ``--after`` of a listing paged by partition token (queues): the number it printed."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(
            f"invalid --after {text!r}: use the token printed after the previous page ('next page: ... --after N')"
        ) from None


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid --limit {text!r}: give a whole number of at least 1")
    return value

"""Helpers every command group uses: a connected client per command, output as a table or JSON,
confirmation of destructive commands, messages as dicts."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, Awaitable, Callable

from daemon.base.errors import UsageError
from daemon.base.model import Message
from daemon.base.terminal import describe_trigger, iso, print_table, settings_of
from daemon.engine.client import Casque

def with_client(fn: Callable[[Casque, argparse.Namespace], Awaitable[int | None]]) -> Callable[[argparse.Namespace], int]:
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


def emit(args: argparse.Namespace, data: Any, table: list[list[str]] | None = None, headers: list[str] | None = None) -> None:
    if getattr(args, "json", False) or table is None:
        print(json.dumps(data, indent=2, default=str))
        return
    print_table(headers or [], table)


def message_dict(m: Message) -> dict[str, Any]:
    return {
        "id": str(m.id), "queue": m.queue, "task": m.task, "payload": m.payload, "priority": m.priority,
        "due": iso(m.due_ms), "state": "in_flight" if m.state else "waiting", "attempt": m.attempt,
        "max_attempts": m.max_attempts, "timeout_s": m.timeout_ms / 1000, "key": m.key, "headers": m.headers,
        "trigger": m.trigger, "schedule": describe_trigger(m.trigger), "enqueued_at": iso(m.enqueued_at), "last_error": m.last_error,
    }


def confirm(args: argparse.Namespace, question: str) -> None:
    """Destructive commands ask first; --yes (or no terminal to ask on) must be explicit."""
    if getattr(args, "yes", False):
        return
    if not sys.stdin.isatty():
        raise UsageError(f"{question} needs confirmation: add --yes")
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise UsageError("cancelled: nothing was changed")

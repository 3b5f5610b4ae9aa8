"""``casque send``, ``schedules``, ``get``, ``cancel`` and ``peek``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from daemon.base.errors import UsageError
from daemon.base.terminal import iso, parse_time, print_table
from daemon.cli.common import add_paging, describe_trigger, emit, message_dict, next_page_hint, with_client
from daemon.engine.client import Casque


def add_cli(sub: Any) -> None:
    s = sub.add_parser("send", help="send a message; prints its id")
    s.add_argument("queue")
    s.add_argument("task")
    s.add_argument("--payload", default="null", help="JSON payload (default null)")
    when = s.add_mutually_exclusive_group()
    when.add_argument("--delay", help="run after this long, e.g. 10s, 5m")
    when.add_argument("--at", help="run at this ISO 8601 time")
    s.add_argument("--priority", type=int, default=0, help="higher runs first (default 0)")
    s.add_argument("--timeout", help="message timeout, e.g. 30s (default: the queue's)")
    s.add_argument(
        "--max-attempts",
        type=int,
        help="deliveries before it is poisoned (default: the queue's at send; 0: the queue's at each delivery)",
    )
    s.add_argument("--header", action="append", default=[], metavar="NAME=VALUE")
    s.add_argument("--key", help="lookup key, to get/replace/cancel the message later")
    s.add_argument("--on-conflict", choices=["replace", "keep", "error"], default="replace")
    s.add_argument(
        "--group",
        help="message group: required on a FIFO queue (a group's messages run one at a time, in order); "
        "on a standard queue a fair-queue tenant",
    )
    s.add_argument(
        "--dedup-id",
        help="FIFO: deduplication id (a send with the same id within 5 min is a duplicate: nothing new is written); "
        "required unless the queue has --content-dedup",
    )
    rep = s.add_mutually_exclusive_group()
    rep.add_argument(
        "--every", help="repeat at this interval, e.g. 30s (first run: --delay/--at, else one interval from now)"
    )
    rep.add_argument("--cron", help="repeat on a cron schedule, e.g. '0 9 * * *' (6 or 7 fields: say --cron-format)")
    s.add_argument(
        "--cron-format",
        choices=["croniter", "quartz"],
        help="how to read a 6- or 7-field --cron: croniter (seconds last) or quartz (seconds first, '?', 1 = Sunday)",
    )
    s.add_argument("--tz", help="time zone of --cron, e.g. Europe/Berlin (default UTC)")
    s.add_argument("--times", type=int, help="stop after this many occurrences")
    s.add_argument("--until", help="stop after this ISO 8601 time")
    s.add_argument(
        "--misfire",
        choices=["coalesce", "all", "skip"],
        default="coalesce",
        help="occurrences missed while no daemon ran: run once (default), run all, or skip",
    )
    s.add_argument("--grace", help="how late an occurrence may be before it counts as missed (default 60s)")
    s.set_defaults(func=with_client(cmd_send))

    sc = sub.add_parser("schedules", help="list a queue's keyed messages and schedules with their next run")
    sc.add_argument("queue")
    add_paging(sc, None, "KEY")
    sc.add_argument("--json", action="store_true")
    sc.set_defaults(func=with_client(cmd_schedules))

    for name, helptext, func in (
        ("get", "show a message by id or key", cmd_get),
        ("cancel", "cancel a message by id or key", cmd_cancel),
    ):
        g = sub.add_parser(name, help=helptext)
        g.add_argument("queue")
        which = g.add_mutually_exclusive_group(required=True)
        which.add_argument("--id")
        which.add_argument("--key")
        g.add_argument("--json", action="store_true")
        g.set_defaults(func=with_client(func))

    pk = sub.add_parser("peek", help="show the next messages without consuming them")
    pk.add_argument("queue")
    pk.add_argument("-n", type=int, default=10)
    pk.add_argument("--json", action="store_true")
    pk.set_defaults(func=with_client(cmd_peek))


def _payload(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f'--payload is not valid JSON ({exc.msg} at column {exc.colno}): quote it, e.g. --payload \'{{"user": '
            f"42}}'"
        ) from None


def _headers(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"invalid --header {item!r}: use NAME=VALUE")
        out[name] = value
    return out


async def cmd_send(cq: Casque, args: argparse.Namespace) -> int:
    mid = await cq.send(
        args.queue,
        args.task,
        _payload(args.payload),
        delay=args.delay,
        at=parse_time(args.at) if args.at else None,
        priority=args.priority,
        timeout=args.timeout,
        max_attempts=args.max_attempts,
        headers=_headers(args.header),
        key=args.key,
        on_conflict=args.on_conflict,
        every=args.every,
        cron=args.cron,
        tz=args.tz,
        times=args.times,
        until=parse_time(args.until) if args.until else None,
        misfire=args.misfire,
        grace=args.grace,
        cron_format=args.cron_format,
        group=args.group,
        dedup_id=args.dedup_id,
    )
    print(mid)
    if mid.sequence is not None:  # FIFO: on stderr, as the fire times below
        print(
            f"sequence number {mid.sequence}"
            + (
                " (duplicate: sent within 5 min with this dedup id; the first send's id and sequence, "
                "nothing new written)"
                if mid.duplicate
                else ""
            ),
            file=sys.stderr,
        )
    if mid.next_fires:  # on stderr: stdout stays the id alone, for scripts
        print(f"next fire times: {', '.join(iso(int(t.timestamp() * 1000)) for t in mid.next_fires)}", file=sys.stderr)
    return 0


async def cmd_schedules(cq: Casque, args: argparse.Namespace) -> int:
    found = await cq.schedules(args.queue, limit=args.limit, after=args.after or "")
    data, rows = [], []
    for entry, m in found:
        trigger = (m.trigger if m else None) or entry.trigger
        next_run = m.due_ms if m and m.state == 0 else None
        data.append(
            {
                "key": entry.key,
                "id": str(m.id) if m else None,
                "task": entry.task,
                "trigger": trigger,
                "next_run": iso(next_run),
                "occurrence": (trigger or {}).get("n"),
                "last_run": iso(entry.last_run),
                "state": ("in_flight" if m.state else "waiting") if m else "finished",
            }
        )
        rows.append(
            [
                entry.key,
                entry.task,
                describe_trigger(trigger),
                iso(next_run),
                iso(entry.last_run),
                str((trigger or {}).get("n", "-")),
            ]
        )
    emit(args, data, rows, ["KEY", "TASK", "TRIGGER", "NEXT RUN", "LAST RUN", "N"])
    next_page_hint(args, len(found), found[-1][0].key if found else None, f"casque schedules {args.queue}")
    return 0


async def cmd_get(cq: Casque, args: argparse.Namespace) -> int:
    m = await cq.get(args.queue, id=args.id, key=args.key)
    if m is None:
        from daemon.base.errors import MessageNotFound

        raise MessageNotFound(
            f"no message {args.id or args.key!r} in queue '{args.queue}': it may have finished or been cancelled"
        )
    data = message_dict(m)
    if args.json:
        emit(args, data)
    else:
        print_table(
            ["FIELD", "VALUE"], [[k, json.dumps(v) if isinstance(v, (dict, list)) else str(v)] for k, v in data.items()]
        )
    return 0


async def cmd_cancel(cq: Casque, args: argparse.Namespace) -> int:
    m = await cq.cancel(args.queue, id=args.id, key=args.key)
    data = {"cancelled": str(m.id) if m else None, "key": args.key}
    if args.json:
        emit(args, data)
    else:
        print(f"cancelled {m.id}" if m else f"key '{args.key}' released (its message had already finished)")
    return 0


async def cmd_peek(cq: Casque, args: argparse.Namespace) -> int:
    msgs = await cq.peek(args.queue, args.n)
    rows = [
        [
            str(m.id),
            m.task,
            str(m.priority),
            iso(m.due_ms),
            "in_flight" if m.state else "waiting",
            str(m.attempt),
            m.key or "",
        ]
        for m in msgs
    ]
    emit(args, [message_dict(m) for m in msgs], rows, ["ID", "TASK", "PRIO", "DUE", "STATE", "ATTEMPT", "KEY"])
    return 0

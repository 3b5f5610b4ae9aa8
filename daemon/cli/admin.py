"""``casque stats``, ``purge``, ``history`` and ``poison ...``: what operators look at and fix."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from daemon.base.durations import format_duration
from daemon.base.terminal import iso, print_table
from daemon.cli.common import add_paging, confirm, emit, next_page_hint, page_token, with_client
from daemon.engine.client import Casque


def add_cli(sub: Any) -> None:
    st = sub.add_parser(
        "stats", help="per-queue statistics read from Cassandra (waiting, in flight, poisoned, age, skew, throughput)"
    )
    st.add_argument("queue", nargs="?", help="one queue (default: a page of queues, see --limit/--after)")
    add_paging(st, 100, "TOKEN")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=with_client(cmd_stats))
    pu = sub.add_parser("purge", help="delete every message of a queue")
    pu.add_argument("queue")
    pu.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    pu.set_defaults(func=with_client(cmd_purge))
    hi = sub.add_parser("history", help="a message's history (queues created with --history)")
    hi.add_argument("queue")
    which = hi.add_mutually_exclusive_group(required=True)
    which.add_argument("--key")
    which.add_argument("--id")
    hi.add_argument("--days", type=int, default=7)
    hi.add_argument("--json", action="store_true")
    hi.set_defaults(func=with_client(cmd_history))
    po = sub.add_parser("poison", help="inspect, replay or purge a queue's poison queue")
    ps = po.add_subparsers(metavar="ACTION")
    pl = ps.add_parser("list", help="poisoned messages with their reasons")
    pl.add_argument("queue")
    add_paging(pl, 100, "ID")
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=with_client(cmd_poison_list))
    sh = ps.add_parser("show", help="one poisoned message, with its traceback")
    sh.add_argument("queue")
    sh.add_argument("id")
    sh.add_argument("--json", action="store_true")
    sh.set_defaults(func=with_client(cmd_poison_show))
    rp = ps.add_parser("replay", help="send poisoned messages again (by --id, by --task, or --all)")
    rp.add_argument("queue")
    sel = rp.add_mutually_exclusive_group(required=True)
    sel.add_argument("--id", action="append")
    sel.add_argument("--task")
    sel.add_argument("--all", action="store_true")
    rp.set_defaults(func=with_client(cmd_poison_replay))
    pp = ps.add_parser("purge", help="empty the poison queue")
    pp.add_argument("queue")
    pp.add_argument("--yes", action="store_true")
    pp.set_defaults(func=with_client(cmd_poison_purge))


async def cmd_stats(cq: Casque, args: argparse.Namespace) -> int:
    token = None
    if args.queue:
        names = [args.queue]
    else:  # a page of queues: never every queue of a cluster in one command
        page, token = await cq.admin.page(page_token(args.after), args.limit)
        names = [q.name for q in page]
    found = [await cq.observe.stats(name) for name in names]
    rows = [
        [
            s.queue,
            str(s.waiting_due),
            str(s.scheduled),
            str(s.in_flight),
            str(s.poisoned),
            "-" if s.oldest_due_age_s is None else format_duration(s.oldest_due_age_s),
            "-" if s.skew is None else f"{s.skew:.2f}",
            "-" if s.acked_per_s is None else f"{s.acked_per_s:.1f}/s",
            str(s.daemons),
        ]
        for s in found
    ]
    if args.json:
        emit(args, [s.to_json() for s in found])
    else:
        print_table(
            ["QUEUE", "DUE", "SCHEDULED", "IN FLIGHT", "POISONED", "OLDEST DUE", "SKEW", "ACKED (est.)", "DAEMONS"],
            rows,
        )
        print(
            "exact: due, scheduled, in flight, poisoned, oldest due, skew (max/mean per shard); estimated: acked/s "
            "from daemon stats rows (10 s)"
        )
    if token is not None:
        print(
            f"casque: {len(names)} shown; next page: casque stats --limit {args.limit} --after {token}", file=sys.stderr
        )
    return 0


async def cmd_purge(cq: Casque, args: argparse.Namespace) -> int:
    await cq.queue_settings(args.queue)
    confirm(args, f"delete every message of queue '{args.queue}'")
    print(f"purged {await cq.admin.purge(args.queue)} messages from {args.queue}")
    return 0


async def cmd_history(cq: Casque, args: argparse.Namespace) -> int:
    mid = None
    if args.id:
        from daemon.engine.client import _uuid

        mid = _uuid(args.id)
    found = await cq.observe.history(args.queue, args.days, key=args.key, message_id=mid)
    if not found:
        qs = await cq.queue_settings(args.queue)
        hint = (
            ""
            if qs.history
            else f": queue '{args.queue}' does not keep history (casque queue update {args.queue} --history)"
        )
        from daemon.base.errors import MessageNotFound

        raise MessageNotFound(f"no history for {args.key or args.id!r} in the last {args.days} days{hint}")
    data: list[dict[str, Any]] = [
        {
            "at": iso(h.at),
            "id": str(h.id),
            "event": h.event,
            "task": h.task,
            "attempt": h.attempt,
            "duration_ms": h.duration_ms,
            "lateness_ms": h.lateness_ms,
            "error": h.error,
            "key": h.key,
        }
        for h in found
    ]
    rows = [
        [
            d["at"],
            d["id"],
            d["event"],
            str(d["attempt"]),
            "-" if d["duration_ms"] is None else f"{d['duration_ms']:.1f}",
            d["error"] or "",
        ]
        for d in data
    ]
    emit(args, data, rows, ["AT", "ID", "EVENT", "ATTEMPT", "MS", "ERROR"])
    return 0


async def cmd_poison_list(cq: Casque, args: argparse.Namespace) -> int:
    from daemon.engine.client import _uuid

    records = await cq.admin.poisoned(args.queue, args.limit, after=_uuid(args.after) if args.after else None)
    data: list[dict[str, Any]] = [
        {
            "id": str(r.id),
            "task": r.task,
            "attempt": r.attempt,
            "poisoned_at": iso(r.poisoned_at),
            "reason": r.reason,
            "error_type": r.error_type,
            "error": r.error,
        }
        for r in records
    ]
    rows = [[d["id"], d["task"], str(d["attempt"]), d["poisoned_at"], d["reason"][:80]] for d in data]
    emit(args, data, rows, ["ID", "TASK", "ATTEMPT", "POISONED AT", "REASON"])
    next_page_hint(args, len(records), str(records[-1].id) if records else None, f"casque poison list {args.queue}")
    return 0


async def cmd_poison_show(cq: Casque, args: argparse.Namespace) -> int:
    from daemon.base.errors import MessageNotFound
    from daemon.engine.client import _uuid

    r = await cq.admin.poisoned_one(args.queue, _uuid(args.id))
    if r is None:
        raise MessageNotFound(
            f"no poisoned message {args.id} in queue '{args.queue}': list them with 'casque poison list {args.queue}'"
        )
    data = {
        "id": str(r.id),
        "task": r.task,
        "attempt": r.attempt,
        "poisoned_at": iso(r.poisoned_at),
        "reason": r.reason,
        "error_type": r.error_type,
        "error": r.error,
        "key": r.key,
        "headers": r.headers,
        "payload": (r.payload or b"").decode("utf-8", "replace"),
        "traceback": r.traceback,
    }
    if args.json:
        emit(args, data)
    else:
        for k, v in data.items():
            if k != "traceback":
                print(f"{k:<12} {v}")
        if r.traceback:
            print(r.traceback.rstrip())
    return 0


async def cmd_poison_replay(cq: Casque, args: argparse.Namespace) -> int:
    from daemon.engine.client import _uuid

    ids = [_uuid(i) for i in args.id] if args.id else None
    new_ids, left = await cq.admin.replay(args.queue, ids=ids, task=args.task)
    for line in left:
        print(f"casque: {line}", file=sys.stderr)
    print(f"replayed {len(new_ids)} messages into {args.queue}")
    return 0 if not left else 1


async def cmd_poison_purge(cq: Casque, args: argparse.Namespace) -> int:
    count = await cq.admin.poison_count(args.queue)
    confirm(args, f"delete {count} poisoned messages of queue '{args.queue}'")
    await cq.admin.purge_poison(args.queue)
    print(f"purged {count} poisoned messages from {args.queue}")
    return 0

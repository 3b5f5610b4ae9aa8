"""The ``casque`` command line.

Every command prints a one-line ``casque: ...`` error and exits non-zero on bad input or an
unreachable Cassandra (2: usage or config, 3: key conflict, 4: not found, 5: storage). Read commands
take ``--json`` for scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from . import __version__
from .client import Casque
from .config import Settings, load_settings
from .db import Database
from .durations import format_duration, parse_duration
from .errors import CasqueError, UsageError
from .logs import configure_logging
from .model import Message
from .schema import apply_schema


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Parse and run one command; a CasqueError becomes ``casque: <one line>`` and its exit code."""
    parser = parser or build_parser()
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="casque", description="A durable task queue and scheduler on Apache Cassandra.")
    p.add_argument("-c", "--config", help="TOML config file (default: $CASQUE_CONFIG, ./config/casque.toml, /etc/casque/casque.toml)")
    p.add_argument("--version", action="version", version=f"casque {__version__}")
    sub = p.add_subparsers(metavar="COMMAND")
    from .devnode import add_cli as add_cassandra_cli

    add_cassandra_cli(sub)
    _add_schema(sub)
    _add_queue(sub)
    _add_messages(sub)
    _add_run(sub)
    _add_admin(sub)
    from pipeline.cli import add_cli as add_pipeline_cli

    add_pipeline_cli(sub)
    return p


# ---- helpers --------------------------------------------------------------------------------
def settings_of(args: argparse.Namespace) -> Settings:
    settings = load_settings(args.config)
    configure_logging(settings.log.level, settings.log.format)
    return settings


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


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)] if rows else [len(h) for h in headers]
    for line in [headers] + rows:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)).rstrip())


def iso(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str) -> float:
    """An ISO 8601 time (naive means UTC) to epoch seconds, with a one-line error."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"invalid time {text!r}: use ISO 8601, e.g. 2026-11-21T09:00:00+01:00") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def message_dict(m: Message) -> dict[str, Any]:
    return {
        "id": str(m.id), "queue": m.queue, "task": m.task, "payload": m.payload, "priority": m.priority,
        "due": iso(m.due_ms), "state": "in_flight" if m.state else "waiting", "attempt": m.attempt,
        "max_attempts": m.max_attempts, "timeout_s": m.timeout_ms / 1000, "key": m.key, "headers": m.headers,
        "trigger": m.trigger, "schedule": describe_trigger(m.trigger), "enqueued_at": iso(m.enqueued_at), "last_error": m.last_error,
    }


# ---- the daemon -----------------------------------------------------------------------------
def _add_run(sub: Any) -> None:
    r = sub.add_parser("run", help="run the worker daemon (foreground; systemd Type=notify)")
    r.add_argument("-c", "--config", default=argparse.SUPPRESS, help="TOML config file (also accepted before 'run')")
    r.add_argument("--queues", help="comma-separated queues to serve (default: worker.queues)")
    r.add_argument("--concurrency", type=int, help="consumer coroutines per queue (default: worker.consumers)")
    r.add_argument("--burst", action="store_true", help="process everything that is due, then exit 0")
    r.add_argument("--check", action="store_true", help="check config, handlers and the connection, then exit 0/1")
    r.set_defaults(func=cmd_run)
    d = sub.add_parser("demo", help="start a local node, run the daemon with example handlers, send jobs, show them processed")
    d.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main as demo_main

    return demo_main(settings_of(args))


def cmd_run(args: argparse.Namespace) -> int:
    import uvloop

    from .worker import Worker, check

    settings = settings_of(args)
    queues = [q.strip() for q in args.queues.split(",") if q.strip()] if args.queues else None
    if args.concurrency is not None and args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if args.check:
        try:
            checked = uvloop.run(check(settings))
        except CasqueError as exc:
            print(f"casque: check failed: {exc}", file=sys.stderr)
            return 1
        for line in checked:
            print(f"ok: {line}")
        return 0
    from .clock import Clock

    # Fault-injection tests run daemons with a skewed clock (and so skewed write timestamps);
    # never set this in production.
    offset = int(os.environ.get("CASQUE_CLOCK_OFFSET_MS", "0") or 0)
    worker = Worker(settings, queues=queues, concurrency=args.concurrency, clock=Clock(offset))
    return uvloop.run(worker.run(burst=args.burst))


# ---- statistics and administration ---------------------------------------------------------
def _add_admin(sub: Any) -> None:
    st = sub.add_parser("stats", help="per-queue statistics read from Cassandra (waiting, in flight, poisoned, age, skew, throughput)")
    st.add_argument("queue", nargs="?", help="one queue (default: all)")
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
    pl.add_argument("-n", type=int, default=100)
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
    from .stats import queue_stats

    names = [args.queue] if args.queue else [q.name for q in await cq.queues.list()]
    found = [await queue_stats(cq, name) for name in names]
    rows = [[s.queue, str(s.waiting_due), str(s.scheduled), str(s.in_flight), str(s.poisoned),
             "-" if s.oldest_due_age_s is None else format_duration(s.oldest_due_age_s), "-" if s.skew is None else f"{s.skew:.2f}",
             "-" if s.acked_per_s is None else f"{s.acked_per_s:.1f}/s", str(s.daemons)] for s in found]
    if args.json:
        emit(args, [s.to_json() for s in found])
    else:
        print_table(["QUEUE", "DUE", "SCHEDULED", "IN FLIGHT", "POISONED", "OLDEST DUE", "SKEW", "ACKED (est.)", "DAEMONS"], rows)
        print("exact: due, scheduled, in flight, poisoned, oldest due, skew (max/mean per shard); estimated: acked/s from daemon stats rows (10 s)")
    return 0


async def cmd_purge(cq: Casque, args: argparse.Namespace) -> int:
    from .admin import purge

    await cq.queues.get(args.queue)
    confirm(args, f"delete every message of queue '{args.queue}'")
    print(f"purged {await purge(cq, args.queue)} messages from {args.queue}")
    return 0


async def cmd_history(cq: Casque, args: argparse.Namespace) -> int:
    from .history import History

    history = History(cq.db, cq.settings.cassandra.keyspace, cq.queues)
    mid = None
    if args.id:
        from .client import _uuid

        mid = _uuid(args.id)
    found = await history.read(args.queue, cq.clock.now_ms(), args.days, key=args.key, message_id=mid)
    if not found:
        qs = await cq.queues.get(args.queue)
        hint = "" if qs.history else f": queue '{args.queue}' does not keep history (casque queue update {args.queue} --history)"
        from .errors import MessageNotFound

        raise MessageNotFound(f"no history for {args.key or args.id!r} in the last {args.days} days{hint}")
    data = [{"at": iso(h.at), "id": str(h.id), "event": h.event, "task": h.task, "attempt": h.attempt, "duration_ms": h.duration_ms,
             "lateness_ms": h.lateness_ms, "error": h.error, "key": h.key} for h in found]
    rows = [[d["at"], d["id"], d["event"], str(d["attempt"]), "-" if d["duration_ms"] is None else f"{d['duration_ms']:.1f}", d["error"] or ""]
            for d in data]
    emit(args, data, rows, ["AT", "ID", "EVENT", "ATTEMPT", "MS", "ERROR"])
    return 0


async def cmd_poison_list(cq: Casque, args: argparse.Namespace) -> int:
    records = await cq.poison.list(args.queue, args.n)
    data = [{"id": str(r.id), "task": r.task, "attempt": r.attempt, "poisoned_at": iso(r.poisoned_at), "reason": r.reason,
             "error_type": r.error_type, "error": r.error} for r in records]
    rows = [[d["id"], d["task"], str(d["attempt"]), d["poisoned_at"], d["reason"][:80]] for d in data]
    emit(args, data, rows, ["ID", "TASK", "ATTEMPT", "POISONED AT", "REASON"])
    return 0


async def cmd_poison_show(cq: Casque, args: argparse.Namespace) -> int:
    from .client import _uuid
    from .errors import MessageNotFound

    r = await cq.poison.get(args.queue, _uuid(args.id))
    if r is None:
        raise MessageNotFound(f"no poisoned message {args.id} in queue '{args.queue}': list them with 'casque poison list {args.queue}'")
    data = {"id": str(r.id), "task": r.task, "attempt": r.attempt, "poisoned_at": iso(r.poisoned_at), "reason": r.reason,
            "error_type": r.error_type, "error": r.error, "key": r.key, "headers": r.headers, "payload": (r.payload or b"").decode("utf-8", "replace"),
            "traceback": r.traceback}
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
    from .admin import replay
    from .client import _uuid

    ids = [_uuid(i) for i in args.id] if args.id else None
    new_ids, left = await replay(cq, args.queue, ids=ids, task=args.task)
    for line in left:
        print(f"casque: {line}", file=sys.stderr)
    print(f"replayed {len(new_ids)} messages into {args.queue}")
    return 0 if not left else 1


async def cmd_poison_purge(cq: Casque, args: argparse.Namespace) -> int:
    count = await cq.poison.count(args.queue)
    confirm(args, f"delete {count} poisoned messages of queue '{args.queue}'")
    await cq.poison.purge(args.queue)
    print(f"purged {count} poisoned messages from {args.queue}")
    return 0


# ---- schema ---------------------------------------------------------------------------------
def _add_schema(sub: Any) -> None:
    p = sub.add_parser("schema", help="create the keyspace and tables")
    s = p.add_subparsers(metavar="ACTION")
    a = s.add_parser("apply", help="create the keyspace and tables if missing (idempotent)")
    a.set_defaults(func=cmd_schema_apply)


def cmd_schema_apply(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    db = Database(settings.cassandra).connect()
    try:
        tables = apply_schema(db, settings.cassandra.keyspace, settings.schema)
    finally:
        db.close()
    print(f"schema applied: {', '.join(tables)}")
    return 0


# ---- queues ---------------------------------------------------------------------------------
def _queue_options(p: argparse.ArgumentParser, create: bool) -> None:
    if create:
        p.add_argument("--shards", type=int, help="concurrency shards (rows per time bucket)")
        p.add_argument("--buckets", type=int, help="rolling time buckets")
        p.add_argument("--bucket-seconds", type=int, help="length of one time bucket in seconds")
    p.add_argument("--timeout", help="default message timeout, e.g. 30s")
    p.add_argument("--lock-timeout", dest="lock_ttl", help="shard lock timeout, e.g. 5s")
    p.add_argument("--max-attempts", type=int, help="deliveries before a message is poisoned")
    p.add_argument("--retention", help="how long finished data is kept, e.g. 7d")
    p.add_argument("--max-payload-bytes", type=int, help="largest payload accepted by send")
    p.add_argument("--history", action=argparse.BooleanOptionalAction, default=None, help="keep message history (casque history)")


def _add_queue(sub: Any) -> None:
    q = sub.add_parser("queue", help="create, update or delete a queue")
    s = q.add_subparsers(metavar="ACTION")
    c = s.add_parser("create", help="create a queue")
    c.add_argument("name")
    c.add_argument("--if-missing", action="store_true", help="succeed if the queue already exists")
    _queue_options(c, create=True)
    c.set_defaults(func=with_client(cmd_queue_create))
    u = s.add_parser("update", help="change a queue's timeouts, attempts, retention or payload limit")
    u.add_argument("name")
    _queue_options(u, create=False)
    u.set_defaults(func=with_client(cmd_queue_update))
    d = s.add_parser("delete", help="delete a queue: its messages, keys, poison queue and settings")
    d.add_argument("name")
    d.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    d.set_defaults(func=with_client(cmd_queue_delete))
    ls = sub.add_parser("queues", help="list queues and their settings")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=with_client(cmd_queues))


def _durations(args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for name in ("timeout", "lock_ttl", "retention"):
        value = getattr(args, name, None)
        out[name] = parse_duration(value, name.replace("_ttl", " timeout")) if value is not None else None
    return out


async def cmd_queue_create(cq: Casque, args: argparse.Namespace) -> int:
    qs = await cq.create_queue(
        args.name, if_missing=args.if_missing, shards=args.shards, buckets=args.buckets, bucket_seconds=args.bucket_seconds,
        max_attempts=args.max_attempts, max_payload_bytes=args.max_payload_bytes, history=args.history, **_durations(args),
    )
    print(f"queue {qs.name}: {qs.shards} shards x {qs.buckets} buckets of {qs.bucket_seconds}s, timeout {format_duration(qs.timeout_ms / 1000)}, "
          f"max attempts {qs.max_attempts}")
    return 0


async def cmd_queue_update(cq: Casque, args: argparse.Namespace) -> int:
    qs = await cq.queues.update(args.name, max_attempts=args.max_attempts, max_payload_bytes=args.max_payload_bytes, history=args.history,
                                **_durations(args))
    print(f"queue {qs.name} updated: timeout {format_duration(qs.timeout_ms / 1000)}, max attempts {qs.max_attempts}")
    return 0


async def cmd_queues(cq: Casque, args: argparse.Namespace) -> int:
    queues = await cq.queues.list()
    data = [q.__dict__ | {"priorities": sorted(q.priorities)} for q in queues]
    rows = [[q.name, str(q.shards), str(q.buckets), f"{q.bucket_seconds}s", format_duration(q.timeout_ms / 1000), str(q.max_attempts),
             format_duration(q.retention_s)] for q in queues]
    emit(args, data, rows, ["QUEUE", "SHARDS", "BUCKETS", "BUCKET", "TIMEOUT", "ATTEMPTS", "RETENTION"])
    return 0


def confirm(args: argparse.Namespace, question: str) -> None:
    """Destructive commands ask first; --yes (or no terminal to ask on) must be explicit."""
    if getattr(args, "yes", False):
        return
    if not sys.stdin.isatty():
        raise UsageError(f"{question} needs confirmation: add --yes")
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise UsageError("cancelled: nothing was changed")


async def cmd_queue_delete(cq: Casque, args: argparse.Namespace) -> int:
    from .admin import delete_queue

    await cq.queues.get(args.name)
    confirm(args, f"delete queue '{args.name}' with all its messages")
    count = await delete_queue(cq, args.name)
    print(f"queue {args.name} deleted ({count} messages removed)")
    return 0


# ---- messages -------------------------------------------------------------------------------
def _add_messages(sub: Any) -> None:
    s = sub.add_parser("send", help="send a message; prints its id")
    s.add_argument("queue")
    s.add_argument("task")
    s.add_argument("--payload", default="null", help="JSON payload (default null)")
    when = s.add_mutually_exclusive_group()
    when.add_argument("--delay", help="run after this long, e.g. 10s, 5m")
    when.add_argument("--at", help="run at this ISO 8601 time")
    s.add_argument("--priority", type=int, default=0, help="higher runs first (default 0)")
    s.add_argument("--timeout", help="message timeout, e.g. 30s (default: the queue's)")
    s.add_argument("--max-attempts", type=int)
    s.add_argument("--header", action="append", default=[], metavar="NAME=VALUE")
    s.add_argument("--key", help="lookup key, to get/replace/cancel the message later")
    s.add_argument("--on-conflict", choices=["replace", "keep", "error"], default="replace")
    rep = s.add_mutually_exclusive_group()
    rep.add_argument("--every", help="repeat at this interval, e.g. 30s (first run: --delay/--at, else one interval from now)")
    rep.add_argument("--cron", help="repeat on a cron schedule, e.g. '0 9 * * *' (6 fields: seconds last)")
    s.add_argument("--tz", help="time zone of --cron, e.g. Europe/Berlin (default UTC)")
    s.add_argument("--times", type=int, help="stop after this many occurrences")
    s.add_argument("--until", help="stop after this ISO 8601 time")
    s.add_argument("--misfire", choices=["coalesce", "all", "skip"], default="coalesce",
                   help="occurrences missed while no daemon ran: run once (default), run all, or skip")
    s.add_argument("--grace", help="how late an occurrence may be before it counts as missed (default 60s)")
    s.set_defaults(func=with_client(cmd_send))

    sc = sub.add_parser("schedules", help="list a queue's keyed messages and schedules with their next run")
    sc.add_argument("queue")
    sc.add_argument("--json", action="store_true")
    sc.set_defaults(func=with_client(cmd_schedules))

    for name, helptext, func in (("get", "show a message by id or key", cmd_get), ("cancel", "cancel a message by id or key", cmd_cancel)):
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
        raise UsageError(f"--payload is not valid JSON ({exc.msg} at column {exc.colno}): quote it, e.g. --payload '{{\"user\": 42}}'") from None


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
        args.queue, args.task, _payload(args.payload), delay=args.delay, at=parse_time(args.at) if args.at else None,
        priority=args.priority, timeout=args.timeout, max_attempts=args.max_attempts, headers=_headers(args.header),
        key=args.key, on_conflict=args.on_conflict, every=args.every, cron=args.cron, tz=args.tz, times=args.times,
        until=parse_time(args.until) if args.until else None, misfire=args.misfire, grace=args.grace,
    )
    print(mid)
    return 0


def describe_trigger(trigger: dict[str, Any] | None) -> str:
    if not trigger:
        return "once"
    what = f"every {format_duration(trigger['every_ms'] / 1000)}" if trigger.get("kind") == "every" else f"cron '{trigger.get('cron')}' {trigger.get('tz', 'UTC')}"
    if trigger.get("times"):
        what += f", {trigger['times']} times"
    if trigger.get("until_ms"):
        what += f", until {iso(trigger['until_ms'])}"
    return what


async def cmd_schedules(cq: Casque, args: argparse.Namespace) -> int:
    found = await cq.schedules(args.queue)
    data, rows = [], []
    for entry, m in found:
        trigger = (m.trigger if m else None) or entry.trigger
        next_run = m.due_ms if m and m.state == 0 else None
        data.append({"key": entry.key, "id": str(m.id) if m else None, "task": entry.task, "trigger": trigger, "next_run": iso(next_run),
                     "occurrence": (trigger or {}).get("n"), "last_run": iso(entry.last_run), "state": ("in_flight" if m.state else "waiting") if m else "finished"})
        rows.append([entry.key, entry.task, describe_trigger(trigger), iso(next_run), iso(entry.last_run), str((trigger or {}).get("n", "-"))])
    emit(args, data, rows, ["KEY", "TASK", "TRIGGER", "NEXT RUN", "LAST RUN", "N"])
    return 0


async def cmd_get(cq: Casque, args: argparse.Namespace) -> int:
    m = await cq.get(args.queue, id=args.id, key=args.key)
    if m is None:
        from .errors import MessageNotFound

        raise MessageNotFound(f"no message {args.id or args.key!r} in queue '{args.queue}': it may have finished or been cancelled")
    data = message_dict(m)
    if args.json:
        emit(args, data)
    else:
        print_table(["FIELD", "VALUE"], [[k, json.dumps(v) if isinstance(v, (dict, list)) else str(v)] for k, v in data.items()])
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
    rows = [[str(m.id), m.task, str(m.priority), iso(m.due_ms), "in_flight" if m.state else "waiting", str(m.attempt), m.key or ""] for m in msgs]
    emit(args, [message_dict(m) for m in msgs], rows, ["ID", "TASK", "PRIO", "DUE", "STATE", "ATTEMPT", "KEY"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``casque queue create|update|delete`` and ``casque queues``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from daemon.base.durations import format_duration, parse_duration
from daemon.base.errors import UsageError
from daemon.cli.common import add_paging, confirm, emit, page_token, with_client
from daemon.engine.client import Casque
from daemon.engine.queues.bulk_create import CHUNK, CONCURRENCY
from daemon.engine.storage.schema import validate_queue_name


def _queue_options(p: argparse.ArgumentParser, create: bool) -> None:
    if create:
        p.add_argument("--shards", type=int, help="concurrency shards (rows per time bucket)")
        p.add_argument("--buckets", type=int, help="rolling time buckets")
        p.add_argument("--bucket-seconds", type=int, help="length of one time bucket in seconds")
        p.add_argument(
            "--expire-after",
            help="delete the queue after this long without a send or receive, e.g. 30d (default: never)",
        )
    p.add_argument(
        "--consumers",
        choices=["push", "pull", "both"],
        help="who consumes it: push (daemons: a task without a handler is poisoned), pull (receivers) or both "
        "(daemons take only the tasks they handle); default push until a client receives or sends over SQS",
    )
    p.add_argument("--timeout", help="default message timeout, e.g. 30s")
    p.add_argument("--lock-timeout", dest="lock_ttl", help="shard lock timeout, e.g. 5s")
    p.add_argument(
        "--max-attempts",
        type=int,
        help="deliveries before a message is poisoned (0: no limit, redelivered until retention)",
    )
    p.add_argument("--retention", help="how long finished data is kept, e.g. 7d")
    p.add_argument("--max-payload-bytes", type=int, help="largest payload accepted by send")
    p.add_argument(
        "--history", action=argparse.BooleanOptionalAction, default=None, help="keep message history (casque history)"
    )
    _fifo_options(p, create)


def _fifo_options(p: argparse.ArgumentParser, create: bool) -> None:
    """SQS's FIFO queue attributes (docs/design.md, "FIFO queues"); FifoQueue itself is fixed at creation."""
    if create:
        p.add_argument(
            "--fifo",
            action="store_true",
            default=None,
            help="a FIFO queue (name ends in .fifo): each --group's messages delivered one at a time, in order, "
            "deduplicated for 5 min",
        )
    p.add_argument(
        "--content-dedup",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="FIFO: a send without --dedup-id is deduplicated by the SHA-256 of its payload",
    )
    p.add_argument(
        "--dedup-scope",
        choices=["queue", "messageGroup"],
        help="FIFO: dedup ids are unique per queue (default) or per group; the creation's scope stays in force "
        "(a later change is kept and shown, as AWS does)",
    )
    p.add_argument(
        "--fifo-throughput",
        choices=["perQueue", "perMessageGroupId"],
        help="FIFO: perMessageGroupId (with --dedup-scope messageGroup: high throughput) spreads groups over 16 shards "
        "at creation",
    )


def _fifo_args(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "content_dedup": args.content_dedup,
        "dedup_scope": args.dedup_scope,
        "fifo_throughput": args.fifo_throughput,
    }


def fifo_summary(qs: Any) -> str:
    """A queue's FIFO options in one phrase ("-" for a standard queue)."""
    if not qs.fifo:
        return "-"
    dedup = "by content" if qs.content_dedup else "by id"
    return f"fifo, dedup {dedup} per {qs.dedup_by}, throughput {qs.fifo_throughput}"


def add_cli(sub: Any) -> None:
    q = sub.add_parser("queue", help="create, update or delete a queue")
    s = q.add_subparsers(metavar="ACTION")
    c = s.add_parser("create", help="create a queue")
    c.add_argument("name")
    c.add_argument("--if-missing", action="store_true", help="succeed if the queue already exists")
    _queue_options(c, create=True)
    c.set_defaults(func=with_client(cmd_queue_create))
    sh = s.add_parser("show", help="one queue's settings, FIFO options included")
    sh.add_argument("name")
    sh.add_argument("--json", action="store_true")
    sh.set_defaults(func=with_client(cmd_queue_show))
    u = s.add_parser(
        "update", help="change a queue's timeouts, attempts, retention, payload limit or FIFO deduplication"
    )
    u.add_argument("name")
    _queue_options(u, create=False)
    u.set_defaults(func=with_client(cmd_queue_update))
    r = s.add_parser(
        "reshard", help="change a live queue's shards or buckets: new sends use the new layout, old rows drain"
    )
    r.add_argument("name")
    r.add_argument("--shards", type=int, help="concurrency shards (rows per time bucket)")
    r.add_argument("--buckets", type=int, help="rolling time buckets")
    r.add_argument("--bucket-seconds", type=int, help="length of one time bucket in seconds")
    r.add_argument("--finish", action="store_true", help="drop the old layouts once no message is left in them")
    r.set_defaults(func=with_client(cmd_queue_reshard))
    d = s.add_parser("delete", help="delete a queue: its messages, keys, poison queue and settings")
    d.add_argument("name")
    d.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    d.set_defaults(func=with_client(cmd_queue_delete))
    ls = sub.add_parser("queues", help="list queues and their settings, a page at a time; or create many (create-many)")
    add_paging(ls, 100, "TOKEN")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=with_client(cmd_queues))
    lss = ls.add_subparsers(metavar="ACTION")
    cm = lss.add_parser(
        "create-many",
        help="create a queue for every name in a file or stdin (one per line); existing ones are skipped",
    )
    cm.add_argument("file", nargs="?", default="-", help="file of names, one per line (default: stdin)")
    cm.add_argument(
        "--concurrency", type=int, default=CONCURRENCY, help=f"chunks of names in flight (default {CONCURRENCY})"
    )
    cm.add_argument("--chunk", type=int, default=CHUNK, help=f"names claimed and written per request (default {CHUNK})")
    _queue_options(cm, create=True)
    cm.set_defaults(func=with_client(cmd_queues_create_many))


def _durations(args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for name in ("timeout", "lock_ttl", "retention", "expire_after"):
        value = getattr(args, name, None)
        out[name] = (
            parse_duration(value, name.replace("_ttl", " timeout").replace("_", "-")) if value is not None else None
        )
    return out


async def cmd_queue_create(cq: Casque, args: argparse.Namespace) -> int:
    qs = await cq.create_queue(
        args.name,
        if_missing=args.if_missing,
        shards=args.shards,
        buckets=args.buckets,
        bucket_seconds=args.bucket_seconds,
        max_attempts=args.max_attempts,
        max_payload_bytes=args.max_payload_bytes,
        history=args.history,
        fifo=args.fifo,
        consumers=args.consumers,
        **_fifo_args(args),
        **_durations(args),
    )
    print(
        f"queue {qs.name}: {qs.shards} shards x {qs.buckets} buckets of {qs.bucket_seconds}s, timeout "
        f"{format_duration(qs.timeout_ms / 1000)}, "
        f"max attempts {qs.max_attempts}" + ("" if not qs.fifo else f"; {fifo_summary(qs)}")
    )
    return 0


async def cmd_queue_show(cq: Casque, args: argparse.Namespace) -> int:
    qs = await cq.queue_settings(args.name, fresh=True)
    data = qs.__dict__ | {"priorities": sorted(qs.priorities)}
    if args.json:
        emit(args, data)
        return 0
    rows = [
        ["name", qs.name],
        ["type", "FIFO" if qs.fifo else "standard"],
        ["consumers", (qs.consumers or "push") + ("" if qs.consumers else " (until a client pulls)")],
        ["layout", f"{qs.shards} shards x {qs.buckets} buckets of {qs.bucket_seconds}s"],
        ["timeout", format_duration(qs.timeout_ms / 1000)],
        ["max attempts", str(qs.max_attempts)],
        ["retention", format_duration(qs.retention_s)],
        ["max payload bytes", str(qs.max_payload_bytes)],
        ["history", "on" if qs.history else "off"],
    ]
    if qs.fifo:
        rows += [
            ["content dedup", "on" if qs.content_dedup else "off"],
            ["dedup scope", qs.dedup_scope],
            ["fifo throughput", qs.fifo_throughput],
        ]
    emit(args, data, rows, ["SETTING", "VALUE"])
    return 0


async def cmd_queue_update(cq: Casque, args: argparse.Namespace) -> int:
    qs = await cq.admin.update(
        args.name,
        max_attempts=args.max_attempts,
        max_payload_bytes=args.max_payload_bytes,
        history=args.history,
        consumers=args.consumers,
        **_fifo_args(args),
        **_durations(args),
    )
    print(
        f"queue {qs.name} updated: timeout {format_duration(qs.timeout_ms / 1000)}, max attempts {qs.max_attempts}"
        + ("" if not qs.fifo else f"; {fifo_summary(qs)}")
    )
    return 0


async def cmd_queue_reshard(cq: Casque, args: argparse.Namespace) -> int:
    if args.finish:
        if args.shards or args.buckets or args.bucket_seconds:
            raise UsageError(
                "--finish takes no layout options: reshard first, then run --finish once the old rows drained"
            )
        left = await cq.admin.finish_reshard(args.name)
        if left:
            print(
                f"casque: {left} messages of queue '{args.name}' are still in old-layout rows (schedules keep theirs "
                "until they end "
                "or are re-sent): run --finish again later",
                file=sys.stderr,
            )
            return 1
        print(f"queue {args.name}: no layout left draining")
        return 0
    qs = await cq.admin.reshard(args.name, shards=args.shards, buckets=args.buckets, bucket_seconds=args.bucket_seconds)
    print(
        f"queue {qs.name}: new sends use {qs.shards} shards x {qs.buckets} buckets of {qs.bucket_seconds}s; draining "
        + ", ".join(f"{s}x{b}x{bs}s" for s, b, bs in qs.draining)
        + f" (then: casque queue reshard {qs.name} --finish)"
    )
    return 0


async def cmd_queues(cq: Casque, args: argparse.Namespace) -> int:
    """One page of queues in token order (one bounded read, whatever the number of queues); the
    last line on stderr gives the --after of the next page."""
    queues, token = await cq.admin.page(page_token(args.after), args.limit)
    data = [q.__dict__ | {"priorities": sorted(q.priorities)} for q in queues]
    rows = [
        [
            q.name,
            str(q.shards),
            str(q.buckets),
            f"{q.bucket_seconds}s",
            format_duration(q.timeout_ms / 1000),
            str(q.max_attempts),
            format_duration(q.retention_s),
            ", ".join(f"{s}x{b}x{bs}s" for s, b, bs in q.draining) or "-",
            fifo_summary(q),
        ]
        for q in queues
    ]
    emit(
        args,
        data,
        rows,
        ["QUEUE", "SHARDS", "BUCKETS", "BUCKET", "TIMEOUT", "ATTEMPTS", "RETENTION", "DRAINING", "FIFO"],
    )
    if token is not None:
        print(
            f"casque: {len(queues)} shown; next page: casque queues --limit {args.limit} --after {token}",
            file=sys.stderr,
        )
    return 0


async def cmd_queues_create_many(cq: Casque, args: argparse.Namespace) -> int:
    """Names from a file or stdin, ``--chunk`` a request, ``--concurrency`` chunks at a time
    (engine/queues/bulk_create.py); progress and the names that existed on stderr. A bad name stops
    the command with one line naming it and its line: the names before it are created, none after."""
    stream = sys.stdin if args.file == "-" else _open(args.file)
    shown = {"at": 0, "done": 0, "created": 0}
    existed: list[str] = []
    differing: list[str] = []

    def progress(done: int, created: int) -> None:
        shown.update(done=done, created=created)
        if done - shown["at"] >= 10_000:
            shown["at"] = done
            print(f"casque: {done} queues done, {created} created", file=sys.stderr)

    def on_existing(name: str, same: bool) -> None:
        (existed if same else differing).append(name)

    try:
        created = await cq.create_queues(
            _names(stream),
            if_missing=True,
            concurrency=args.concurrency,
            chunk=args.chunk,
            progress=progress,
            on_existing=on_existing,
            shards=args.shards,
            buckets=args.buckets,
            bucket_seconds=args.bucket_seconds,
            max_attempts=args.max_attempts,
            max_payload_bytes=args.max_payload_bytes,
            history=args.history,
            consumers=args.consumers,
            **_durations(args),
        )
    except UsageError as exc:
        raise UsageError(f"{exc}; {shown['created']} queues created before it, none after") from None
    finally:
        if stream is not sys.stdin:
            stream.close()
    print(f"{created} queues created")
    _report_existing(existed, differing)
    return 0


def _names(stream: Any) -> Any:
    """The names, one per line (blank lines and # comments skipped), each checked as it is read."""
    for number, line in enumerate(stream, 1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        try:
            yield validate_queue_name(name)
        except UsageError as exc:
            raise UsageError(f"line {number}: {exc}") from None


def _report_existing(existed: list[str], differing: list[str]) -> None:
    """Existing queues are skipped, never written over: say how many, and name those whose settings differ."""
    if existed or differing:
        print(
            f"casque: {len(existed) + len(differing)} queues existed already and were left as they are", file=sys.stderr
        )
    if differing:
        sample = ", ".join(differing[:10]) + (", ..." if len(differing) > 10 else "")
        print(
            f"casque: {len(differing)} of them with other settings than these (see 'casque queue show NAME'): {sample}",
            file=sys.stderr,
        )


def _open(path: str) -> Any:
    try:
        return open(path, encoding="utf-8")
    except OSError as exc:
        raise UsageError(
            f"cannot read {path} ({exc.strerror}): give a file of queue names, one per line, or - for stdin"
        ) from None


async def cmd_queue_delete(cq: Casque, args: argparse.Namespace) -> int:
    await cq.queue_settings(args.name)
    confirm(args, f"delete queue '{args.name}' with all its messages")
    tombstones = await cq.admin.delete(args.name)
    print(f"queue {args.name} deleted ({tombstones} partitions dropped whole: no tombstone per message)")
    return 0

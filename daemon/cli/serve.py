"""``casque serve`` (the SQS-compatible HTTP endpoint) and ``casque sqs-keys`` (its SigV4 keys)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable
from typing import Any

from daemon.base.errors import UsageError
from daemon.base.metrics import start_server
from daemon.base.terminal import iso, settings_of
from daemon.cli.common import emit, with_client
from daemon.engine.access.access_keys import AccessKey, AccessKeyStore
from daemon.engine.access.grants import Grant
from daemon.engine.client import Casque
from daemon.engine.consume.sweep import PulledSweeps
from daemon.engine.operations.mover import MoveRunner
from daemon.engine.operations.reaper import QueueReaper
from daemon.engine.operations.shard_growth import ShardGrowth
from daemon.engine.operations.stats import daemon_id
from daemon.engine.wake.hint_directory import split_host
from daemon.http.workers import run_workers
from daemon.service.startup import start_when_ready


def add_cli(sub: Any) -> None:
    s = sub.add_parser("serve", help="serve the Amazon SQS-compatible HTTP API (foreground; systemd Type=notify)")
    s.add_argument("--host", help="address to listen on (default: sqs.host, 127.0.0.1)")
    s.add_argument("--port", type=int, help="port (default: sqs.port, 9324; 0 picks a free one)")
    s.add_argument(
        "--workers",
        type=int,
        help="server processes on the port (SO_REUSEPORT), one per core a busy box gives it (default: sqs.workers, 1)",
    )
    s.add_argument("--auth", choices=["none", "sigv4"], help="request authentication (default: sqs.auth)")
    s.add_argument("--cert-file", help="TLS certificate (PEM); default: sqs.cert_file, or plain HTTP")
    s.add_argument("--key-file", help="TLS private key (PEM); default: sqs.key_file")
    s.add_argument(
        "--console",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also serve the operators' console at /console on the same port (default: sqs.console)",
    )
    s.set_defaults(func=cmd_serve)
    k = sub.add_parser("sqs-keys", help="access keys for 'casque serve' with sqs.auth = sigv4")
    ks = k.add_subparsers(metavar="ACTION")
    c = ks.add_parser("create", help="create a key; prints the id and the secret (shown once)")
    c.add_argument("--description", default="", help="what the key is for")
    c.add_argument(
        "--actions",
        help="comma-separated SQS actions the key may call (ReceiveMessage,DeleteMessage; sqs:Receive*; *); "
        "default: all, unless --queues is given",
    )
    c.add_argument("--queues", help="comma-separated queue names or globs it may act on (user-42,user-*); default: all")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_checked_create)
    ls = ks.add_parser("list", help="list key ids (never secrets)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=with_client(_list))
    d = ks.add_parser("delete", help="revoke a key (running servers stop accepting it within 5 s)")
    d.add_argument("key_id")
    d.set_defaults(func=with_client(_delete))


def cmd_serve(args: argparse.Namespace) -> int:
    import uvloop

    from daemon.http.server import is_loopback

    settings = settings_of(args)
    sqs = settings.sqs
    sqs.host = args.host or sqs.host
    sqs.port = sqs.port if args.port is None else args.port
    sqs.auth = args.auth or sqs.auth
    sqs.cert_file = args.cert_file or sqs.cert_file
    sqs.key_file = args.key_file or sqs.key_file
    sqs.console = sqs.console if args.console is None else args.console
    sqs.workers = sqs.workers if args.workers is None else args.workers
    if not 1 <= sqs.workers <= 256:
        raise UsageError(f"invalid --workers {sqs.workers}: use 1-256 (about one per core)")
    if not 0 <= sqs.port <= 65535:
        raise UsageError(f"invalid port {sqs.port}: use 0-65535 (0 picks a free one)")
    if sqs.auth == "none" and not is_loopback(sqs.host):
        raise UsageError(
            f"refusing to serve SQS without authentication on {sqs.host}: use --auth sigv4 (keys from 'casque sqs-keys "
            f"create') "
            "or listen on 127.0.0.1 behind a proxy that authenticates"
        )
    if sqs.console and not (settings.console.admin_password or settings.console.viewer_password):
        raise UsageError(
            "--console needs a console password: set console.admin_password (or CASQUE_CONSOLE__ADMIN_PASSWORD), "
            "and console.viewer_password for a read-only user"
        )
    if sqs.workers == 1:
        return uvloop.run(_serve(settings))
    if settings.hints.address and split_host(settings.hints.address)[1]:
        raise UsageError(
            f"hints.address {settings.hints.address} names a port, and each of --workers {sqs.workers} needs its own: "
            "leave the port out (each worker picks a free one)"
        )

    def worker(index: int, port: int, ready: Callable[[], None]) -> int:
        settings.sqs.port = port
        if settings.metrics.port:
            settings.metrics.port += index  # each worker's own counters, on the ports after metrics.port
        return uvloop.run(_serve(settings, ready))

    return run_workers(sqs.workers, sqs.host, sqs.port, worker, tls=bool(sqs.cert_file))


async def _serve(settings: Any, worker_ready: Callable[[], None] | None = None) -> int:
    """One server process; ``worker_ready``: it is one of ``--workers N`` (daemon/http/workers.py), which tells its
    parent when it listens."""
    from daemon.http.app import build_serve_app
    from daemon.http.collector import collect_full_every
    from daemon.http.server import serve
    from daemon.service.sdnotify import Notifier

    notifier = Notifier()
    collector = asyncio.create_task(collect_full_every())  # parked polls would set off a full collection every few s
    metrics_server = await start_server(settings.metrics, ready=lambda: True)  # this server's counters
    cq = await _connect(settings, notifier)
    if cq is None:
        collector.cancel()
        if metrics_server is not None:
            await metrics_server.close()
        return 0  # asked to stop while still waiting for Cassandra
    pinger = asyncio.create_task(_watchdog(notifier)) if notifier.watchdog_interval else None
    reaper = QueueReaper(cq.stores, daemon_id(), settings.worker.expiry_interval_ms)
    expiry = asyncio.create_task(reaper.run())  # lease: one per cluster
    mover = asyncio.create_task(MoveRunner(cq, daemon_id()).run())  # SQS move tasks: a lease per task
    sqs = settings.sqs  # busy queues that opted in grow their shards (a lease per queue)
    growth = asyncio.create_task(
        ShardGrowth(cq.stores, cq.send_counts, daemon_id(), sqs.grow_rate, sqs.grow_window_ms, sqs.grow_settle_ms).run()
    )
    # Messages written behind a cursor of the queues this server pulls from (engine/consume/sweep.py), as a daemon
    # does for its queues; queues settled since rest, told of other processes' use by the activity index.
    pulled = PulledSweeps(cq.receiver.consumers, cq.stores.wakeups.notify, activity=cq.stores.activity)
    sweeps = asyncio.create_task(pulled.run(), name="casque-sweep")
    try:
        app = build_serve_app(cq, settings.sqs, settings.console if settings.sqs.console else None)
        what = "SQS and the console" if settings.sqs.console else "SQS"
        await serve(
            app,
            settings.sqs.host,
            settings.sqs.port,
            settings.sqs.cert_file,
            settings.sqs.key_file,
            on_ready=lambda url: worker_ready() if worker_ready else notifier.ready(f"serving {what} on {url}"),
            worker=worker_ready is not None,
        )
    finally:
        notifier.stopping("stopped serving")
        if pinger:
            pinger.cancel()
        expiry.cancel()
        mover.cancel()
        sweeps.cancel()
        growth.cancel()
        collector.cancel()
        await asyncio.gather(expiry, mover, sweeps, growth, collector, return_exceptions=True)
        if metrics_server is not None:
            await metrics_server.close()
        await cq.close()
    return 0


async def _connect(settings: Any, notifier: Any) -> Casque | None:
    """Connected, with the hint listener registered: again with backoff while Cassandra does not answer, as the
    daemon starts (service/startup.py); None when SIGTERM or SIGINT came meanwhile (uvicorn's handlers serve after)."""

    async def first(cq: Casque) -> None:
        if settings.hints.listen:
            await cq.listen_for_hints(["*"])  # other processes' sends wake parked SQS long polls at once

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        return await start_when_ready(settings, first, stop, notifier)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


async def _watchdog(notifier: Any) -> None:
    """WATCHDOG=1 from the event loop itself: a wedged loop stops pinging and systemd restarts it."""
    while True:
        notifier.watchdog()
        await asyncio.sleep(notifier.watchdog_interval)


def _grant(args: argparse.Namespace) -> Grant | None:
    """The key's grant from --actions/--queues (None: neither given, full access)."""
    if args.actions is None and args.queues is None:
        return None
    return Grant.parse(_split(args.actions), _split(args.queues))


def _split(text: str | None) -> list[str] | None:
    return None if text is None else text.split(",")


def _grant_view(key: AccessKey) -> dict[str, Any]:
    if key.grant is None:
        return {"actions": ["*"], "queues": ["*"], "full_access": True}
    return {"actions": list(key.grant.actions), "queues": list(key.grant.queues), "full_access": False}


def _checked_create(args: argparse.Namespace) -> int:
    """The grant is checked before connecting: a typo in --actions costs no round trip, writes nothing."""
    args.grant = _grant(args)
    return with_client(_create)(args)


async def _create(cq: Casque, args: argparse.Namespace) -> int:
    key = await _store(cq).create(args.description, args.grant)
    data = {
        "access_key_id": key.access_key_id,
        "secret_access_key": key.secret,
        "description": key.description,
        "grant": _grant_view(key),
    }
    if args.json:
        emit(args, data)
    else:
        print(f"aws_access_key_id = {key.access_key_id}\naws_secret_access_key = {key.secret}")
        print("casque: the secret is shown only now; store it (e.g. in ~/.aws/credentials)", file=sys.stderr)
    return 0


async def _list(cq: Casque, args: argparse.Namespace) -> int:
    keys = await _store(cq).list()
    emit(
        args,
        [
            {
                "access_key_id": k.access_key_id,
                "description": k.description,
                "created_at": iso(k.created_at),
                "grant": _grant_view(k),
            }
            for k in keys
        ],
        [
            [k.access_key_id, k.description, iso(k.created_at), k.grant.describe() if k.grant else "full access"]
            for k in keys
        ],
        ["KEY ID", "DESCRIPTION", "CREATED", "GRANT"],
    )
    return 0


async def _delete(cq: Casque, args: argparse.Namespace) -> int:
    await _store(cq).delete(args.key_id)
    print(f"deleted {args.key_id}")
    return 0


def _store(cq: Casque) -> AccessKeyStore:
    return cq.access_keys

"""``casque run`` (the worker daemon) and ``casque demo``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from daemon.base.errors import CasqueError, UsageError
from daemon.base.terminal import settings_of


def add_cli(sub: Any) -> None:
    r = sub.add_parser("run", help="run the worker daemon (foreground; systemd Type=notify)")
    r.add_argument("-c", "--config", default=argparse.SUPPRESS, help="TOML config file (also accepted before 'run')")
    r.add_argument(
        "--queues", help="comma-separated queues to serve (default: worker.queues, else the queues the handlers name)"
    )
    r.add_argument("--concurrency", type=int, help="consumer coroutines per queue (default: worker.consumers)")
    r.add_argument("--burst", action="store_true", help="process everything that is due, then exit 0")
    r.add_argument("--check", action="store_true", help="check config, handlers and the connection, then exit 0/1")
    r.set_defaults(func=cmd_run)
    d = sub.add_parser(
        "demo", help="start a local node, run the daemon with example handlers, send jobs, show them processed"
    )
    d.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from daemon.cli.demo import main as demo_main

    return demo_main(settings_of(args))


def cmd_run(args: argparse.Namespace) -> int:
    import uvloop

    from daemon.service.worker import Worker, check

    settings = settings_of(args)
    queues = [q.strip() for q in args.queues.split(",") if q.strip()] if args.queues else None
    if args.concurrency is not None and args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if queues:
        settings.worker.queues = queues
    if args.check:
        try:
            checked = uvloop.run(check(settings))
        except CasqueError as exc:
            print(f"casque: check failed: {exc}", file=sys.stderr)
            return 1
        for line in checked:
            print(f"ok: {line}")
        return 0
    from daemon.base.clock import Clock

    # Fault-injection tests run daemons with a skewed clock (and so skewed write timestamps);
    # never set this in production.
    offset = int(os.environ.get("CASQUE_CLOCK_OFFSET_MS", "0") or 0)
    worker = Worker(settings, queues=queues, concurrency=args.concurrency, clock=Clock(offset))
    return uvloop.run(worker.run(burst=args.burst))

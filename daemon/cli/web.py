"""``casque web``: serve the operators' console alone (uvicorn), on 127.0.0.1 unless configured.

With no console password configured, a random admin password is made for this run and printed
once on the terminal (never logged), so the console is never open without a login.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from dataclasses import replace
from typing import Any

from daemon.base.config import ConsoleSettings
from daemon.base.errors import ConfigError, UsageError
from daemon.base.logs import get_logger
from daemon.base.terminal import settings_of

log = get_logger("casque.console")


def add_cli(sub: Any) -> None:
    w = sub.add_parser("web", help="serve the operators' web console (default http://127.0.0.1:9470)")
    w.add_argument("--host", help="address to listen on (default: console.host, 127.0.0.1)")
    w.add_argument("--port", type=int, help="port (default: console.port, 9470)")
    w.add_argument(
        "--root-path",
        help="the subpath a reverse proxy serves the console under, e.g. /casque (default: console.root_path)",
    )
    w.set_defaults(func=cmd_web)


def cmd_web(args: argparse.Namespace) -> int:
    import uvloop

    settings = settings_of(args)
    console = console_settings(settings.console, args.host, args.port, args.root_path)
    if not console.admin_password and not console.viewer_password:
        console = replace(console, admin_password=secrets.token_urlsafe(18))
        print(
            f"casque web: no console password configured; for this run log in as admin / {console.admin_password}",
            file=sys.stderr,
        )
    settings = replace(settings, console=console)
    return uvloop.run(serve(settings))


def console_settings(c: ConsoleSettings, host: str | None, port: int | None, root_path: str | None) -> ConsoleSettings:
    c = replace(
        c,
        host=host or c.host,
        port=c.port if port is None else port,
        root_path=c.root_path if root_path is None else root_path,
    )
    if not 0 < c.port < 65536:
        raise UsageError(f"invalid console port {c.port}: use 1-65535")
    if c.root_path and (not c.root_path.startswith("/") or c.root_path.endswith("/")):
        raise ConfigError(f"console.root_path {c.root_path!r} must start with '/' and not end with one, e.g. /casque")
    return c


async def serve(settings: Any) -> int:
    import uvicorn

    from daemon.engine.client import Casque
    from daemon.http.console import build_console

    c = settings.console
    cq = await Casque.connect(settings)
    try:
        app = build_console(cq, c)
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=c.host,
                port=c.port,
                root_path=c.root_path,
                log_level="warning",
                proxy_headers=True,
                lifespan="off",
            )
        )
        log.info(
            "console_serving",
            url=f"http://{c.host}:{c.port}{c.root_path}/",
            roles=[r for r in ("admin", "viewer") if getattr(c, f"{r}_password")],
        )
        await server.serve()
        return 0 if server.started else 1
    finally:
        await asyncio.shield(cq.close())

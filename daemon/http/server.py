"""Serving an ASGI app with uvicorn on the running (uvloop) event loop: shared by ``casque serve``
and any other HTTP face, so TLS, the listening line and sd_notify work the same everywhere.

Port 0 picks a free port; the line ``casque: listening on URL`` is printed (and flushed) once the
socket is bound, so scripts and tests learn the real address.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from daemon.base.errors import UsageError


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` with SO_REUSEPORT (``casque serve --workers``: daemon/http/workers.py)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve(
    app: Any,
    host: str,
    port: int,
    cert_file: str = "",
    key_file: str = "",
    on_ready: Callable[[str], None] | None = None,
    worker: bool = False,
) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn's own handlers: stop accepting, finish requests). ``worker``: one of
    ``casque serve --workers N`` (daemon/http/workers.py): it listens on the port with SO_REUSEPORT, and its
    parent prints the listening line."""
    if bool(cert_file) != bool(key_file):
        raise UsageError("TLS needs both sqs.cert_file and sqs.key_file (or neither, behind a TLS reverse proxy)")
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="none",
        http="httptools",  # C parser: well under h11's CPU per request
        lifespan="off",
        log_config=None,
        access_log=False,
        ssl_certfile=cert_file or None,
        ssl_keyfile=key_file or None,
        timeout_keep_alive=65,
    )
    server = _Server(config)
    sockets = None
    if worker:
        sock = reuse_port_socket(host, port)
        sock.listen(config.backlog)
        sockets = [sock]
    task = asyncio.create_task(server.serve(sockets=sockets))
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if server.started:
        bound = server.servers[0].sockets[0].getsockname()
        url = f"{'https' if cert_file else 'http'}://{url_host(bound[0])}:{bound[1]}"
        if not worker:
            print(f"casque: listening on {url}", flush=True, file=sys.stdout)
        if on_ready:
            on_ready(url)
    await task
    if not server.started:
        raise UsageError(f"cannot listen on {host}:{port}: the address is in use or not allowed (see the log above)")


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM/SIGINT once it has stopped serving, which killed ``casque serve``
    before its own cleanup (closing the session, removing its hint listener's row). Here the signal
    only stops serving; the caller's cleanup runs and the process exits normally."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host

"""``casque serve --workers N``: N server processes on one port, for the cores of a box.

A Python process serves on one core. A box whose owners keep thousands of long polls open needs more than
one, and more file descriptors than one process may hold. Each worker is a whole ``casque serve`` (its own
Cassandra session, hint listener, sweeps and leases) bound to the same address with SO_REUSEPORT: the kernel
spreads new connections over the workers' accept queues. A send in one worker wakes a poll parked in another
as it wakes another server's: every hint listener gets the hint (engine/wake/hints.py), and the due feed
covers a lost one (engine/wake/due_feed.py). The workers share nothing but the port.

The parent binds the port first (so ``--port 0`` picks one for all), keeps it bound while the workers run,
prints the listening line and tells systemd READY once every worker listens, pings the watchdog while every
worker lives, passes SIGTERM/SIGINT on, and stops them all when one exits: the exit status is that worker's,
so a crashed worker restarts the unit.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable

from daemon.base.errors import CasqueError
from daemon.http.server import reuse_port_socket, url_host
from daemon.service.sdnotify import Notifier

#: The environment a worker must not inherit: only the parent speaks to systemd.
_SYSTEMD = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def run_workers(
    n: int, host: str, port: int, worker: Callable[[int, int, Callable[[], None]], int], tls: bool = False
) -> int:
    """Fork ``n`` workers, each ``worker(index, port, ready)`` (``ready()`` once it listens); the first exit status
    of a worker (0 when stopped by a signal)."""
    reserved = reuse_port_socket(host, port)
    port = reserved.getsockname()[1]
    ready_r, ready_w = os.pipe()
    pids: list[int] = []
    for i in range(n):
        pid = os.fork()
        if pid == 0:  # the worker: a casque serve of its own from here
            os.close(ready_r)
            reserved.close()
            for key in _SYSTEMD:
                os.environ.pop(key, None)
            code = 1
            try:
                code = worker(i, port, lambda: _tell(ready_w))
            except CasqueError as exc:  # as casque's main says it (daemon/base/terminal.py)
                print(f"casque: {exc}", file=sys.stderr)
                code = exc.exit_code
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    os.close(ready_w)
    return _supervise(pids, ready_r, f"{'https' if tls else 'http'}://{url_host(host)}:{port}", n)


def _supervise(pids: list[int], ready_r: int, url: str, n: int) -> int:
    notifier = Notifier()
    stopping: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        stopping.append(signum)
        for pid in pids:
            _kill(pid, signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    ready, announced = 0, False
    ping_every = notifier.watchdog_interval or 1.0
    last_ping = 0.0
    while True:
        done, status = os.waitpid(-1, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            for pid in pids:
                if pid != done:
                    _kill(pid, signal.SIGTERM)
            for pid in pids:
                if pid != done:
                    os.waitpid(pid, 0)
            return 0 if stopping and code in (0, -signal.SIGTERM, -signal.SIGINT) else (code if code > 0 else 1)
        if not announced:
            readable, _, _ = select.select([ready_r], [], [], 0.2)
            if readable:
                ready += len(os.read(ready_r, 64))
            if ready >= n:
                announced = True
                print(f"casque: listening on {url}", flush=True)  # the line scripts read (daemon/http/server.py)
                notifier.ready(f"serving SQS on {url} ({n} workers)")
        else:
            time.sleep(0.2)
        if announced and notifier.watchdog_interval and time.monotonic() - last_ping >= ping_every:
            notifier.watchdog()  # every worker is alive (a dead one ends the loop above)
            last_ping = time.monotonic()


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _tell(fd: int) -> None:
    os.write(fd, b".")

"""Start ``casque run`` as a real subprocess with a test config, and read what its handlers did.

The one place a test or a bench run starts a daemon process (``spawn``): tests through ``start_daemon``
(the recording handlers of ``daemon.testing.handlers``, named in the config), the bench through
bench/daemonproc.py (its probe handler)."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

ROOT = Path(__file__).resolve().parents[2]


def write_config(
    path: Path, keyspace: str, queues: list[str], handler_module: str = "daemon.testing.handlers", **worker: object
) -> Path:
    """A daemon config for a test: a keyspace, queues, fast polling, JSON debug logs. ``handler_module`` is
    a name the daemon imports (the tests' recording handlers by default), not an import of this module."""
    opts = {
        "consumers": 2,
        "batch_size": 20,
        "poll_interval": "20ms",
        "max_poll_interval": "200ms",
        "drain_timeout": "20s",
        "rescan_interval": "1s",
    } | worker
    lines = [
        "[cassandra]",
        f'keyspace = "{keyspace}"',
        "",
        "[worker]",
        f"queues = {queues!r}".replace("'", '"'),
        f'handler_modules = ["{handler_module}"]',
    ]
    for key, value in opts.items():
        lines.append(f"{key} = {value!r}".replace("'", '"'))
    lines += ["", "[log]", 'level = "debug"', 'format = "json"', ""]
    path.write_text("\n".join(lines))
    return path


class Watched(Protocol):
    """A process a test waits on (a ``Daemon``, an ``SqsServer``): its exit ends the wait, with its log."""

    proc: subprocess.Popen[Any]

    def output(self) -> str: ...


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    log: Path

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout=timeout)

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def frozen(self) -> bool:
        return stopped(self.proc.pid)


def stopped(pid: int) -> bool:
    """True while every thread of the process is stopped (state T in /proc): a ``CASQUE_PAUSE_AT`` step was
    reached, or ``freeze`` took effect."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        if stat.rsplit(")", 1)[1].split()[0] not in ("T", "t", "Z", "X"):
            return False
    return True


def freeze(pid: int, timeout: float = 10.0) -> None:
    """SIGSTOP ``pid`` and return once every thread of it is stopped. ``kill`` returns once the signal is queued,
    and each thread stops when it next runs: on a busy machine a "frozen" node can still answer a request for some
    milliseconds. A fault placed between two steps needs the freeze in force before the next step."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not stopped(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} not stopped {timeout} s after SIGSTOP")
        time.sleep(0.001)


def spawn(config: Path, env: dict[str, str], out: IO[bytes], *args: str) -> subprocess.Popen[bytes]:
    """``python -m daemon.cli -c CONFIG run ARGS`` from the repository (so it runs this checkout's code),
    with exactly ``env``, its output to ``out``."""
    return subprocess.Popen(
        [sys.executable, "-m", "daemon.cli", "-c", str(config), "run", *args],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def start_daemon(config: Path, record: Path, log: Path, *args: str, env: dict[str, str] | None = None) -> Daemon:
    """A daemon whose test handlers append what they did to ``record`` (read with ``records``)."""
    full_env = dict(os.environ) | {"CASQUE_TEST_RECORD": str(record), "PYTHONPATH": str(ROOT)} | (env or {})
    with open(log, "ab") as out:  # the child writes its own copy; ours closes once it has started
        return Daemon(spawn(config, full_env, out, *args), log)


def records(path: Path) -> list[list[str]]:
    """The complete lines of a record file. A handler in another process may be mid-write as it is
    read (a read can see part of an append), so the text after the last newline is left for later."""
    if not path.exists():
        return []
    complete = path.read_text().rpartition("\n")[0]
    return [line.split() for line in complete.splitlines() if line.strip()]


def wait_for(condition: Callable[[], bool], timeout: float, what: str, daemon: Watched | None = None) -> None:
    """Poll for a condition the test needs; fail with the daemon's log if it doesn't come."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if daemon is not None and daemon.proc.poll() is not None:
            name, code = type(daemon).__name__, daemon.proc.returncode
            raise AssertionError(f"{name} exited ({code}) while waiting for {what}:\n{daemon.output()[-4000:]}")
        time.sleep(0.05)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}" + (f":\n{daemon.output()[-4000:]}" if daemon else "")
    )


async def until(condition: Callable[[], Any], timeout: float, what: str, daemon: Watched | None = None) -> None:
    """Async form of wait_for: the condition may be a coroutine function (e.g. a Cassandra read)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if daemon is not None and daemon.proc.poll() is not None:
            name, code = type(daemon).__name__, daemon.proc.returncode
            raise AssertionError(f"{name} exited ({code}) while waiting for {what}:\n{daemon.output()[-4000:]}")
        await asyncio.sleep(0.05)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}" + (f":\n{daemon.output()[-4000:]}" if daemon else "")
    )

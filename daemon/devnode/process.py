"""Detached node processes: launch, identify, terminate.

Nodes must outlive the CLI call that started them (``casque cassandra start`` returns
while the node keeps serving), so each JVM runs in its own session, with stdio sent to a
file in the node's log dir. We launch through a short-lived intermediate Python process:
the JVM is then re-parented to init, which reaps it when it exits -- a long-lived caller
(pytest, a REPL) never accumulates zombies or "subprocess still running" warnings, and a
dead node really disappears from /proc.

A pidfile alone is not trusted: PIDs get reused. A process counts as node N of cluster C
only if its command line runs CassandraDaemon with that node's cassandra.yaml.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .errors import DevnodeError
from .jvm import DAEMON_CLASS
from .spec import NodeLayout

__all__ = [
    "pid_alive",
    "cmdline",
    "is_node_process",
    "node_pid",
    "launch",
    "terminate",
    "remove_pidfile",
]

# Runs in the intermediate process: start the JVM in a new session, print its pid, exit.
_SPAWN = (
    "import subprocess, sys\n"
    "log = open(sys.argv[1], 'ab', buffering=0)\n"
    "p = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log,\n"
    "                     stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)\n"
    "print(p.pid, flush=True)\n"
)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill(0)
    # Field 3, after the parenthesised command name (which may contain spaces).
    state = stat.rsplit(")", 1)[-1].split()[0]
    if state not in ("Z", "X"):
        return True
    # A zombie thread-group leader whose other threads still run (a JVM finishing its shutdown
    # hooks after its main thread exited) still holds its ports: alive until those threads end.
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def cmdline(pid: int) -> list[str]:
    """argv of ``pid`` ([] if gone or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def is_node_process(pid: int, node: NodeLayout) -> bool:
    """Is ``pid`` a live CassandraDaemon running ``node``'s configuration?"""
    if not pid_alive(pid):
        return False
    argv = cmdline(pid)
    if DAEMON_CLASS not in argv:
        return False
    marker = f"-Dcasque.node={node.spec.name}/{node.name}"
    config = f"-Dcassandra.config={node.yaml_path.resolve().as_uri()}"
    return marker in argv and config in argv


def _read_pidfile(node: NodeLayout) -> int | None:
    try:
        return int(node.pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


def _scan_proc(node: NodeLayout) -> int | None:
    """Find the node's JVM even if its pidfile was lost (deleted, written by a crashed CLI)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    for entry in proc.iterdir():
        if entry.name.isdigit() and is_node_process(int(entry.name), node):
            return int(entry.name)
    return None


def node_pid(node: NodeLayout) -> int | None:
    """PID of ``node``'s running JVM, or None. Repairs a missing/stale pidfile."""
    pid = _read_pidfile(node)
    if pid is not None and is_node_process(pid, node):
        return pid
    found = _scan_proc(node)
    if found is not None:
        try:
            _write_pidfile(node, found)
        except OSError:
            pass
    return found


def _write_pidfile(node: NodeLayout, pid: int) -> None:
    tmp = node.pidfile.with_suffix(".pid.tmp")
    tmp.write_text(f"{pid}\n")
    tmp.replace(node.pidfile)


def launch(node: NodeLayout, argv: list[str], env: dict[str, str]) -> int:
    """Start ``argv`` detached, stdio appended to the node's stdout.log; return its pid."""
    node.log_dir.mkdir(parents=True, exist_ok=True)
    with node.stdout_log.open("ab") as log:
        log.write(f"\n=== casque: starting {node.describe()} at {time.strftime('%Y-%m-%d %H:%M:%S')} ===\n".encode())
    result = subprocess.run(
        [sys.executable, "-c", _SPAWN, str(node.stdout_log), *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        cwd=str(node.dir),
        timeout=60,
        check=False,
    )
    try:
        pid = int(result.stdout.decode().strip())
    except ValueError:
        err = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise DevnodeError(
            f"casque: could not launch {argv[0]} for {node.describe()}: "
            f"{err[-1] if err else 'no output'}; check the JDK path and {node.stdout_log}"
        ) from None
    _write_pidfile(node, pid)
    return pid


def terminate(pid: int, timeout: float = 60.0) -> bool:
    """SIGTERM ``pid`` (Cassandra drains and flushes), SIGKILL after ``timeout`` s.

    Returns True if the process had to be killed.
    """
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return False
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    for _ in range(50):
        if not pid_alive(pid):
            break
        time.sleep(0.1)
    return True


def remove_pidfile(node: NodeLayout) -> None:
    node.pidfile.unlink(missing_ok=True)

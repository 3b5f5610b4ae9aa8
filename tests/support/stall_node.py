"""A Cassandra node of the fault tests' own, frozen (SIGSTOP) and let go (SIGCONT) under traffic.

Never the shared dev node: other tests use it meanwhile, and a frozen node stalls them all. One such node per
pytest-xdist worker (``STALL_NODE``): the files that freeze it run one after another on their worker, each in its
own keyspace, so they share its start (a JVM's start is the dearest thing a test does on this 2-core box); it is
stopped when the worker's session ends (tests/conftest.py). The servers on it time their Cassandra requests out
after 2 s, so a request the frozen node holds fails (a write may have been applied all the same) and its client
retries, as an SDK user's does.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from daemon.base.config import Settings
from daemon.devnode import ClusterSpec, start, status, stop
from daemon.engine.storage.schema import ensure_schema
from daemon.testing import sqsserver
from daemon.testing.daemonproc import freeze
from daemon.testing.sqs_clients import Receiver, poll

REQUEST_TIMEOUT_S = 2
#: The node of each xdist worker (gw0..gw3: the Makefile's --maxprocesses 4).
_NODES = [
    ClusterSpec(name="stall0", native_port=9942, storage_port=8250, jmx_base=8350),
    ClusterSpec(name="stall1", native_port=9742, storage_port=7750, jmx_base=8050),
    ClusterSpec(name="stall2", native_port=10042, storage_port=8550, jmx_base=8650),
    ClusterSpec(name="stall3", native_port=10142, storage_port=8750, jmx_base=8850),
]
STALL_NODE = _NODES[int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)]
STALL_KEYSPACE = "casque_std_stall"


def stop_stall_node() -> None:
    """Stop this worker's node if a test started it (at the end of the worker's session)."""
    if status(STALL_NODE).any_running:
        let_go(STALL_NODE)
        stop(STALL_NODE)


@contextmanager
def servers_on_own_node(
    spec: ClusterSpec, keyspace: str, count: int = 2, metrics: bool = False, first_env: dict[str, str] | None = None
) -> Iterator[list[sqsserver.SqsServer]]:
    """``spec``'s node started (or reused), ``keyspace`` made on it, and ``count`` servers on it; the servers stopped
    after (a stopped one let go first), the node left for the next file. ``first_env``: more environment for the
    first server only (a fault's pause point)."""
    start(spec)
    s = Settings()
    s.cassandra.port, s.cassandra.keyspace = spec.native_port, keyspace
    ensure_schema(s)
    env = {"CASQUE_CASSANDRA__PORT": str(spec.native_port), "CASQUE_CASSANDRA__REQUEST_TIMEOUT": str(REQUEST_TIMEOUT_S)}
    servers: list[sqsserver.SqsServer] = []
    try:
        servers += [sqsserver.start(keyspace, env=env | (first_env or {}), metrics=metrics)]
        servers += [sqsserver.start(keyspace, env=env, metrics=metrics) for _ in range(count - 1)]
        yield servers
    finally:
        let_go(spec)  # whatever a failed test left frozen: the next file on this worker uses the node
        for srv in servers:
            if srv.proc.poll() is None:
                srv.proc.send_signal(signal.SIGCONT)
            srv.stop()


def let_go(spec: ClusterSpec) -> None:
    """SIGCONT ``spec``'s node (nothing if it runs)."""
    pid = status(spec).nodes[0].pid
    if pid is not None:
        os.kill(pid, signal.SIGCONT)


def freeze_node(
    spec: ClusterSpec,
    receivers: list[Receiver],
    failures: Callable[[], int],
    threads: list[Any],
    seconds: float = 4.0,
    tries: int = 5,
) -> int:
    """SIGSTOP ``spec``'s node for ``seconds`` while a receive is under way, then SIGCONT (always),
    until ``failures()`` (a ledger's failed receives and deletes) is above 0, up to ``tries``
    times. Returns the freezes made."""
    pid = status(spec).nodes[0].pid
    assert pid is not None, "the test's own node is not running"
    for n in range(1, tries + 1):
        poll(lambda: any(r.ends.outstanding is not None for r in receivers), 60, "a receive under way", threads)
        freeze(pid)
        try:
            time.sleep(seconds)  # the fault itself: the node is frozen this long
        finally:
            os.kill(pid, signal.SIGCONT)
        if failures():
            return n
    return tries

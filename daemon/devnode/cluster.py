"""Start, stop and inspect a local Cassandra cluster (one node or several).

Orchestration only; the pieces live in their own modules: ``download`` (jars),
``java`` (JDK choice), ``config`` (cassandra.yaml), ``jvm`` (command line), ``ports``
(bind checks), ``process`` (detached JVMs, pidfiles), ``probe`` (CQL readiness) and ``node_status``
(what each node is doing, and its logs).

``start`` is idempotent: nodes that already run are reused, so a test fixture or a
developer can call it freely. The seed (node1) is started and awaited first; the other
nodes then join (in parallel by default: with fixed ``initial_token`` and
``auto_bootstrap: false`` there is no bootstrap streaming, so Cassandra's "one node
bootstrapping at a time" rule does not apply).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from . import process
from .config import write_node_config
from .download import ensure_cassandra
from .errors import DevnodeError, NodeStartError
from .java import JavaInfo, find_java
from .jvm import server_command, server_env
from .locks import locked
from .node_status import (
    ClusterStatus,
    NodeStatus,
    _discovered_nodes,
    _log_size,
    _node_status,
    last_error_line,
    last_log_line,
    status,
)
from .ports import check_ports
from .probe import release_version
from .spec import ClusterSpec, NodeLayout, load_saved_spec, save_spec

__all__ = [
    "NodeStatus",
    "ClusterStatus",
    "start",
    "stop",
    "status",
    "start_node",
    "stop_node",
    "last_log_line",
    "last_error_line",
]

Progress = Callable[[str], object]

_REPORT_EVERY_S = 5.0
_POLL_S = 0.5


# --------------------------------------------------------------------------- start


def _check_compatible(spec: ClusterSpec) -> None:
    """Refuse a spec that contradicts what is on disk (tokens are fixed at first boot)."""
    saved = load_saved_spec(spec.name, spec.home)
    if saved is None:
        return
    on_disk = [i for i in range(1, _discovered_nodes(spec) + 1) if (spec.node(i).data_dir / "data").is_dir()]
    if on_disk and saved.nodes != spec.nodes:
        raise DevnodeError(
            f"casque: cluster '{spec.name}' in {spec.cluster_dir} was created with {saved.nodes} "
            f"node(s), not {spec.nodes}; use another --name, or remove it first "
            f"(casque cassandra stop --name {spec.name} && rm -rf {spec.cluster_dir})"
        )
    if (saved.native_port, saved.storage_port, saved.jmx_base) != (spec.native_port, spec.storage_port, spec.jmx_base):
        running = [n for n in spec.all_nodes() if process.node_pid(n) is not None]
        if running:
            raise DevnodeError(
                f"casque: cluster '{spec.name}' is running with CQL port {saved.native_port}, "
                f"storage port {saved.storage_port}, JMX {saved.jmx_base}; stop it first "
                f"(casque cassandra stop --name {spec.name}) to change ports"
            )


@dataclass(frozen=True)
class _Pending:
    node: NodeLayout
    pid: int
    log_offset: int  # system.log size at launch: only newer lines describe this run


def _launch(node: NodeLayout, java: JavaInfo, cassandra_home: Path) -> _Pending:
    write_node_config(node)
    offset = _log_size(node.system_log)
    pid = process.launch(node, server_command(java, cassandra_home, node), server_env(java))
    return _Pending(node, pid, offset)


def _wait_ready(pending: dict[int, _Pending], deadline: float, started: float, progress: Progress) -> None:
    """Wait until every node in ``pending`` answers CQL; raise if one dies or time runs out."""
    last_report = time.monotonic()
    while pending:
        for index, p in list(pending.items()):
            node = p.node
            if not process.is_node_process(p.pid, node):
                process.remove_pidfile(node)
                raise NodeStartError(
                    f"casque: {node.describe()} exited during start: "
                    f"{last_error_line(node, p.log_offset)}; full log: {node.system_log} "
                    f"(JVM output: {node.stdout_log})"
                )
            if (
                release_version(node.address, node.native_port, extra_yaml=node.spec.extra_yaml, timeout=3.0)
                is not None
            ):
                progress(
                    f"  {node.name} ({node.address}:{node.native_port}) answers CQL after "
                    f"{time.monotonic() - started:.1f}s"
                )
                del pending[index]
        if not pending:
            return
        now = time.monotonic()
        if now >= deadline:
            p = next(iter(pending.values()))
            raise NodeStartError(
                f"casque: {p.node.describe()} (pid {p.pid}) does not answer CQL after "
                f"{now - started:.0f}s; last log line: "
                f"{last_log_line(p.node.system_log, since=p.log_offset)}; it is left running -- "
                f"wait and run `casque cassandra status`, or stop it; see {p.node.system_log}"
            )
        if now - last_report >= _REPORT_EVERY_S:
            for p in pending.values():
                progress(
                    f"  {now - started:5.0f}s {p.node.name}: {last_log_line(p.node.system_log, since=p.log_offset)}"
                )
            last_report = now
        time.sleep(_POLL_S)


def _start_nodes(spec: ClusterSpec, indexes: Iterable[int], timeout: float, progress: Progress, parallel: bool) -> None:
    indexes = list(indexes)
    java = find_java()
    cassandra_home = ensure_cassandra(spec.version, progress)
    # One starter per cluster at a time: a second caller waits, then finds the nodes
    # running and reuses them instead of launching a second JVM on the same data dir.
    with locked(spec.cluster_dir, ".start.lock"):
        _start_locked(spec, indexes, java, cassandra_home, timeout, progress, parallel)


def _start_locked(
    spec: ClusterSpec,
    indexes: list[int],
    java: JavaInfo,
    cassandra_home: Path,
    timeout: float,
    progress: Progress,
    parallel: bool,
) -> None:
    # The clock starts after the (first-time) download: it must not eat the start timeout.
    started = time.monotonic()
    deadline = started + timeout
    save_spec(spec)

    running: dict[int, int] = {}
    to_launch: list[NodeLayout] = []
    for i in indexes:
        node = spec.node(i)
        pid = process.node_pid(node)
        if pid is not None:
            running[i] = pid
        else:
            to_launch.append(node)
    # Check every port before launching anything: fail fast, leave nothing half-started.
    for node in to_launch:
        check_ports(node)
    if running:
        progress(
            f"casque: reusing running node(s) of '{spec.name}': "
            + ", ".join(f"node{i} (pid {p})" for i, p in sorted(running.items()))
        )
    if to_launch:
        progress(
            f"casque: starting Cassandra {spec.version} cluster '{spec.name}' "
            f"({len(to_launch)} node(s), heap {spec.heap}, Java {java.major} at "
            f"{java.java_home}); usually 5-30 s"
        )

    # Seed first: the others learn the ring from it.
    waves: list[list[int]] = []
    if 1 in indexes:
        waves.append([1])
    rest = [i for i in indexes if i != 1]
    if rest:
        waves.extend([rest] if parallel else [[i] for i in rest])
    for wave in waves:
        pending: dict[int, _Pending] = {}
        for i in wave:
            node = spec.node(i)
            if i in running:
                pending[i] = _Pending(node, running[i], _log_size(node.system_log))
                continue
            pending[i] = _launch(node, java, cassandra_home)
            progress(
                f"  launched {node.name} on {node.address}:{node.native_port} "
                f"(pid {pending[i].pid}, JMX {node.jmx_port})"
            )
        _wait_ready(pending, deadline, started, progress)


def start(spec: ClusterSpec, timeout: float = 180, progress: Progress = print, parallel: bool = True) -> ClusterStatus:
    """Start every node of ``spec`` (reusing running ones) and wait until all answer CQL.

    ``timeout`` covers the node starts, not a first-time jar download. Raises
    :class:`DevnodeError` (one line, with the fix) on a bad JDK, a busy port, a node that
    dies (quoting its last ERROR log line) or a timeout.
    """
    _check_compatible(spec)
    t0 = time.monotonic()
    _start_nodes(spec, range(1, spec.nodes + 1), timeout, progress, parallel)
    st = status(spec)
    progress(
        f"casque: cluster '{spec.name}' ready ({time.monotonic() - t0:.1f}s): "
        + ", ".join(f"{n.address}:{n.native_port}" for n in st.nodes)
    )
    for n in st.nodes:
        progress(f"  {n.name}: data {n.data_dir}  log {n.log_file}")
    return st


def start_node(spec: ClusterSpec, index: int, timeout: float = 180, progress: Progress = print) -> NodeStatus:
    """(Re)start one node of an existing cluster, e.g. after :func:`stop_node`."""
    if not 1 <= index <= spec.nodes:
        raise DevnodeError(f"casque: cluster '{spec.name}' has nodes 1..{spec.nodes}, not {index}")
    _check_compatible(spec)
    _start_nodes(spec, [index], timeout, progress, parallel=False)
    return _node_status(spec.node(index))


# --------------------------------------------------------------------------- stop


def _stop_many(nodes: list[NodeLayout], timeout: float) -> None:
    """SIGTERM all at once (drains run in parallel), SIGKILL whatever outlives ``timeout``."""
    targets: list[tuple[NodeLayout, int]] = []
    for node in nodes:
        pid = process.node_pid(node)
        if pid is not None:
            targets.append((node, pid))
        else:
            process.remove_pidfile(node)
    for _node, pid in targets:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while targets and time.monotonic() < deadline:
        targets = [(n, p) for n, p in targets if process.pid_alive(p)]
        if targets:
            time.sleep(0.2)
    for _node, pid in targets:
        process.terminate(pid, timeout=0)  # escalates straight to SIGKILL
    for node in nodes:
        process.remove_pidfile(node)


def stop(spec: ClusterSpec, timeout: float = 60) -> None:
    """Stop every node of the cluster (including nodes found on disk beyond ``spec.nodes``)."""
    count = max(spec.nodes, _discovered_nodes(spec))
    _stop_many([spec.node(i) for i in range(1, count + 1)], timeout)


def stop_node(spec: ClusterSpec, index: int, timeout: float = 60) -> None:
    """Stop one node (SIGTERM, SIGKILL after ``timeout``); the others keep running."""
    _stop_many([spec.node(index)], timeout)

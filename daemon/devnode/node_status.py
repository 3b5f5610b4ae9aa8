"""What a local cluster is doing, read from its processes and logs: each node's status (process, CQL
readiness, version) and the lines of its logs that explain a start or a failure.

``cluster.py`` starts and stops nodes; this module only looks, so ``casque cassandra status`` and the
start loop's progress lines share one reading of a node.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import process
from .probe import release_version
from .spec import ClusterSpec, NodeLayout

__all__ = ["NodeStatus", "ClusterStatus", "status", "last_log_line", "last_error_line"]


@dataclass(frozen=True)
class NodeStatus:
    """What is known about one node right now."""

    index: int
    name: str
    address: str
    native_port: int
    storage_port: int
    jmx_port: int
    pid: int | None
    running: bool
    cql_ready: bool
    release_version: str | None
    data_dir: Path
    log_file: Path

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "address": self.address,
            "native_port": self.native_port,
            "storage_port": self.storage_port,
            "jmx_port": self.jmx_port,
            "pid": self.pid,
            "running": self.running,
            "cql_ready": self.cql_ready,
            "release_version": self.release_version,
            "data_dir": str(self.data_dir),
            "log_file": str(self.log_file),
        }


@dataclass(frozen=True)
class ClusterStatus:
    """Status of every node of a cluster (node1 first)."""

    name: str
    directory: Path
    version: str
    nodes: tuple[NodeStatus, ...]

    @property
    def running(self) -> bool:
        """All nodes have a live process."""
        return bool(self.nodes) and all(n.running for n in self.nodes)

    @property
    def ready(self) -> bool:
        """All nodes answer CQL."""
        return bool(self.nodes) and all(n.cql_ready for n in self.nodes)

    @property
    def any_running(self) -> bool:
        return any(n.running for n in self.nodes)

    def node(self, index: int) -> NodeStatus:
        for n in self.nodes:
            if n.index == index:
                return n
        raise KeyError(index)

    @property
    def contact_points(self) -> list[str]:
        return [n.address for n in self.nodes]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "directory": str(self.directory),
            "version": self.version,
            "running": self.running,
            "ready": self.ready,
            "nodes": [n.to_json() for n in self.nodes],
        }

    def format(self) -> str:
        """Human-readable table for the CLI."""
        lines = [f"cluster '{self.name}' (Cassandra {self.version}) in {self.directory}"]
        for n in self.nodes:
            state = "UP, CQL ready" if n.cql_ready else ("starting/not answering CQL" if n.running else "DOWN")
            pid = f"pid {n.pid}" if n.pid else "no process"
            lines.append(f"  {n.name}  {n.address}:{n.native_port}  jmx {n.jmx_port}  {pid:<11} {state}")
            lines.append(f"         log {n.log_file}")
        return "\n".join(lines)


def _discovered_nodes(spec: ClusterSpec) -> int:
    """Highest node index present on disk (a cluster may have been started bigger)."""
    highest = 0
    if spec.cluster_dir.is_dir():
        for entry in spec.cluster_dir.iterdir():
            m = re.fullmatch(r"node(\d+)", entry.name)
            if m and entry.is_dir():
                highest = max(highest, int(m.group(1)))
    return highest


def _node_status(node: NodeLayout, probe: bool = True) -> NodeStatus:
    pid = process.node_pid(node)
    running = pid is not None
    version = (
        release_version(node.address, node.native_port, extra_yaml=node.spec.extra_yaml, timeout=3.0)
        if running and probe
        else None
    )
    return NodeStatus(
        index=node.index,
        name=node.name,
        address=node.address,
        native_port=node.native_port,
        storage_port=node.storage_port,
        jmx_port=node.jmx_port,
        pid=pid,
        running=running,
        cql_ready=version is not None,
        release_version=version,
        data_dir=node.data_dir,
        log_file=node.system_log,
    )


def status(spec: ClusterSpec) -> ClusterStatus:
    """Per-node process and CQL state. Never starts or stops anything."""
    count = max(spec.nodes, _discovered_nodes(spec))
    nodes = tuple(_node_status(spec.node(i)) for i in range(1, count + 1))
    return ClusterStatus(spec.name, spec.cluster_dir, spec.version, nodes)


# --------------------------------------------------------------------------- logs

_LOG_LINE = re.compile(r"^(INFO|WARN|ERROR)\s+\[[^\]]*\]\s+\S+\s+\S+\s+(\S+)\s+-\s+(.*)$")


def _log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tail_lines(path: Path, since: int = 0, max_bytes: int = 65536) -> list[str]:
    """Last lines of ``path`` written after byte offset ``since`` (0 after a log rotation)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size < since:  # rotated since we looked: the whole file is new
                since = 0
            f.seek(max(since, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()


def last_log_line(path: Path, width: int = 110, since: int = 0) -> str:
    """Last INFO/WARN/ERROR message of a system.log as "Logger: message" (for progress)."""
    for line in reversed(_tail_lines(path, since)):
        m = _LOG_LINE.match(line)
        if m:
            text = f"{m.group(2)}: {m.group(3)}"
            return text if len(text) <= width else text[: width - 3] + "..."
    return "(no log output yet)"


# The java launcher's trailers, printed after the line that actually explains the failure.
_GENERIC_JVM_ERRORS = frozenset(
    {
        "Error: Could not create the Java Virtual Machine.",
        "Error: A fatal exception has occurred. Program will exit.",
    }
)


def last_error_line(node: NodeLayout, since: int = 0) -> str:
    """The most telling line for a node that died: its last ERROR in system.log (written
    after offset ``since``, i.e. by this run), else the last line the JVM printed since the
    launch banner (covers failures before logging starts, e.g. a bad -Xmx)."""
    for line in reversed(_tail_lines(node.system_log, since)):
        m = _LOG_LINE.match(line)
        if m and m.group(1) == "ERROR":
            return f"{m.group(2)}: {m.group(3)}"[:400]
    for line in reversed(_tail_lines(node.stdout_log)):
        line = line.strip()
        if line.startswith("=== casque:"):
            break
        if line and not line.startswith("WARNING:") and line not in _GENERIC_JVM_ERRORS:
            return line[:400]
    return "no error was logged"

"""What a development cluster is, and where its files live.

A cluster is identified by a *name* and a *home* directory; node ``i`` (1-based) lives in
``<home>/<name>/node<i>/`` with ``conf/``, ``data/`` and ``logs/`` below it and listens on
``127.0.0.<i>``. On Linux the whole 127/8 block is loopback, so several nodes can share
the same CQL and storage port without any interface aliases; only JMX (which Cassandra
binds to 127.0.0.1 for local-only access) needs a distinct port per node: ``jmx_base+i-1``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .download import PINNED

__all__ = [
    "ClusterSpec",
    "NodeLayout",
    "default_home",
    "default_heap",
    "save_spec",
    "load_saved_spec",
]


def default_heap(nodes: int = 1, memory_mb: int | None = None) -> str:
    """``$CASQUE_NODE_HEAP``, or sized for this box as cassandra-env.sh sizes it, with the memory split between the
    ``nodes`` of a local cluster: max(min(1/2, 1 GiB), min(1/4, 8 GiB)) of each one's share, at least 512 MiB. A
    fixed small heap made a node that had run the suite pause 20-40 ms in GC under load."""
    env = os.environ.get("CASQUE_NODE_HEAP")
    if env:
        return env
    share_mb = (memory_mb or _memory_mb()) // max(1, nodes)
    heap_mb = max(min(share_mb // 2, 1024), min(share_mb // 4, 8192), 512)
    return f"{heap_mb}M"


def _memory_mb() -> int:
    """The box's memory (MemTotal), or 4 GiB where /proc/meminfo can't be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 4096


def default_home() -> Path:
    """``$CASQUE_HOME`` or ``~/.local/share/casque``: node data outlives the checkout."""
    env = os.environ.get("CASQUE_HOME")
    return Path(env) if env else Path.home() / ".local" / "share" / "casque"


@dataclass(frozen=True)
class ClusterSpec:
    """A local Cassandra cluster: how many nodes, which ports, where on disk.

    Frozen so a spec can be a dict key or a module-level constant in tests. ``extra_yaml``
    is deep-merged last into every node's cassandra.yaml (e.g. to turn on
    PasswordAuthenticator or client_encryption_options) without touching the launcher.
    """

    name: str = "dev"
    nodes: int = 1
    native_port: int = 9042
    storage_port: int = 7000
    jmx_base: int = 7199
    home: Path = field(default_factory=default_home)
    heap: str = ""  # "": default_heap(nodes)
    extra_yaml: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)
    version: str = PINNED

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_" for c in self.name):
            raise ValueError(f"cluster name {self.name!r} must be letters, digits, '-' or '_'")
        if not 1 <= self.nodes <= 254:
            raise ValueError(f"nodes must be between 1 and 254, not {self.nodes}")
        if not self.heap:
            object.__setattr__(self, "heap", default_heap(self.nodes))
        if not re.fullmatch(r"\d+[kKmMgG]?", str(self.heap)):
            raise ValueError(f"heap {self.heap!r} must be a JVM size such as 512M or 1G")
        # Absolute, so pidfile/cmdline matching does not depend on the caller's cwd.
        object.__setattr__(self, "home", Path(self.home).expanduser().resolve())

    @property
    def cluster_dir(self) -> Path:
        return self.home / self.name

    def node(self, index: int) -> NodeLayout:
        """Layout of node ``index`` (1-based)."""
        if not 1 <= index <= 254:
            raise ValueError(f"node index must be 1..254, not {index}")
        return NodeLayout(self, index)

    def all_nodes(self) -> list[NodeLayout]:
        return [self.node(i) for i in range(1, self.nodes + 1)]

    @property
    def seed_address(self) -> str:
        return "127.0.0.1"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["home"] = str(self.home)
        return d


@dataclass(frozen=True)
class NodeLayout:
    """Paths and addresses of one node."""

    spec: ClusterSpec
    index: int

    @property
    def name(self) -> str:
        return f"node{self.index}"

    @property
    def address(self) -> str:
        return f"127.0.0.{self.index}"

    @property
    def native_port(self) -> int:
        return self.spec.native_port

    @property
    def storage_port(self) -> int:
        return self.spec.storage_port

    @property
    def jmx_port(self) -> int:
        return self.spec.jmx_base + self.index - 1

    @property
    def dir(self) -> Path:
        return self.spec.cluster_dir / self.name

    @property
    def conf_dir(self) -> Path:
        return self.dir / "conf"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def log_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def yaml_path(self) -> Path:
        return self.conf_dir / "cassandra.yaml"

    @property
    def logback_path(self) -> Path:
        return self.conf_dir / "logback.xml"

    @property
    def system_log(self) -> Path:
        return self.log_dir / "system.log"

    @property
    def stdout_log(self) -> Path:
        """JVM stdout/stderr: catches failures that happen before logback is up."""
        return self.log_dir / "stdout.log"

    @property
    def pidfile(self) -> Path:
        return self.dir / "cassandra.pid"

    def describe(self) -> str:
        return f"{self.name} of cluster '{self.spec.name}' ({self.address}:{self.native_port})"


_SAVED = "cluster.json"


def save_spec(spec: ClusterSpec) -> None:
    """Remember the spec a cluster was created with, so `stop`/`status --name X` find all nodes."""
    spec.cluster_dir.mkdir(parents=True, exist_ok=True)
    path = spec.cluster_dir / _SAVED
    tmp = path.with_suffix(".tmp")
    text = json.dumps(spec.to_json(), indent=2, sort_keys=True, default=str) + "\n"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def load_saved_spec(name: str = "dev", home: Path | None = None) -> ClusterSpec | None:
    """The spec a cluster was last started with, or None if it was never started."""
    home = Path(home) if home is not None else default_home()
    path = home / name / _SAVED
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    known = {f for f in ClusterSpec.__dataclass_fields__}
    kwargs = {k: v for k, v in data.items() if k in known}
    kwargs["home"] = home
    kwargs["name"] = name
    try:
        return ClusterSpec(**kwargs)
    except (TypeError, ValueError):
        return None

"""casque's development Cassandra: a real Apache Cassandra 5.0 as local JVM processes.

No Docker, no system service: ``start(ClusterSpec())`` fetches the server jars once (Maven
Central, checksum-verified, cached under ``~/.cache/casque``), picks a Java 11/17, writes a
small cassandra.yaml per node and launches detached ``CassandraDaemon`` processes on
127.0.0.1..N that outlive the caller. Used by ``casque cassandra ...`` and by the tests.

    >>> from daemon.devnode import ClusterSpec, start, stop
    >>> st = start(ClusterSpec())                      # 127.0.0.1:9042, reused if running
    >>> ring = start(ClusterSpec(name="ring", nodes=3, native_port=9142,
    ...                          storage_port=7100, jmx_base=7299))
"""

from .cli import add_cli
from .cluster import ClusterStatus, NodeStatus, start, start_node, status, stop, stop_node
from .config import initial_token, node_yaml
from .download import PINNED, cassandra_dir, ensure_cassandra
from .errors import DevnodeError, JavaError, NodeStartError, PortInUseError
from .java import JavaInfo, check_java_version, find_java, probe_java
from .spec import ClusterSpec, NodeLayout, default_home, load_saved_spec

__all__ = [
    "PINNED",
    "ClusterSpec",
    "ClusterStatus",
    "DevnodeError",
    "JavaError",
    "JavaInfo",
    "NodeLayout",
    "NodeStartError",
    "NodeStatus",
    "PortInUseError",
    "add_cli",
    "cassandra_dir",
    "check_java_version",
    "default_home",
    "ensure_cassandra",
    "find_java",
    "initial_token",
    "load_saved_spec",
    "node_yaml",
    "probe_java",
    "start",
    "start_node",
    "status",
    "stop",
    "stop_node",
]

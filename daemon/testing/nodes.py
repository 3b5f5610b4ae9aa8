"""Settings for a local multi-node dev cluster (``daemon.devnode``), shared by the node-fault tests and
bench/soak.py: every node's loopback address as a contact point, and one replica per node."""

from __future__ import annotations

from daemon.base.config import Settings
from daemon.devnode import ClusterSpec


def settings_for(spec: ClusterSpec, keyspace: str) -> Settings:
    """Settings reaching every node of ``spec`` (127.0.0.1..N on its native port), with a short request
    timeout so a stopped node is noticed in seconds, and replication over all nodes."""
    s = Settings()
    s.cassandra.contact_points = [f"127.0.0.{i}" for i in range(1, spec.nodes + 1)]
    s.cassandra.port = spec.native_port
    s.cassandra.keyspace = keyspace
    s.cassandra.request_timeout = 5.0
    s.schema.replication_factor = spec.nodes
    return s

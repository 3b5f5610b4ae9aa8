"""A local multi-node dev cluster (``daemon.devnode``) as the node-fault tests, bench/soak.py and bench/nemesis use
it: settings and daemon configs reaching every node's loopback address (one replica per node), and a node lost to
kill -9."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from daemon.base.config import Settings
from daemon.devnode import ClusterSpec, process, start
from daemon.engine.storage.schema import ensure_schema
from daemon.testing.daemonproc import write_config


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


def start_ring(spec: ClusterSpec, keyspace: str) -> Settings:
    """``spec``'s nodes started (running ones reused) and ``keyspace`` made over them; settings reaching them."""
    start(spec)
    settings = settings_for(spec, keyspace)
    ensure_schema(settings)
    return settings


def ring_config(path: Path, spec: ClusterSpec, keyspace: str, queues: list[str], **worker: Any) -> Path:
    """A daemon config (``write_config``'s, with its ``handler_module`` and worker options) reaching every node of
    ``spec``, with the short request timeout of ``settings_for``."""
    cfg = write_config(path, keyspace, queues, **worker)
    points = json.dumps([f"127.0.0.{i}" for i in range(1, spec.nodes + 1)])
    cfg.write_text(
        cfg.read_text().replace(
            "[cassandra]", f"[cassandra]\ncontact_points = {points}\nport = {spec.native_port}\nrequest_timeout = 5"
        )
    )
    return cfg


def kill9_node(spec: ClusterSpec, index: int) -> None:
    """kill -9 the node's JVM: no drain, no flush, as a lost machine would."""
    node = spec.node(index)
    pid = process.node_pid(node)
    if pid is None:
        raise RuntimeError(f"{node.name} of cluster '{spec.name}' is not running")
    os.kill(pid, signal.SIGKILL)
    while process.pid_alive(pid):
        time.sleep(0.1)
    process.remove_pidfile(node)

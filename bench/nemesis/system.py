"""The system under the nemesis: a 3-node ring (RF 3, QUORUM: LOCAL_QUORUM in its one data centre), three
``casque run`` daemons and two ``casque serve`` servers on it, each a real process, started, killed and restarted by
index. The ring's ports are no test file's (tests/test_suite_layout.py checks theirs)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from cassandra import ConsistencyLevel, DriverException
from cassandra.cluster import Cluster, NoHostAvailable
from cassandra.policies import WhiteListRoundRobinPolicy
from cassandra.query import SimpleStatement

from daemon.base.config import Settings
from daemon.devnode import ClusterSpec, process, start_node, stop
from daemon.testing import sqsserver
from daemon.testing.daemonproc import Daemon, start_daemon
from daemon.testing.nodes import kill9_node, ring_config, start_ring

RING = ClusterSpec(name="nemesis", nodes=3, native_port=10942, storage_port=9850, jmx_base=9950)
KEYSPACE = "casque_nemesis"
REQUEST_TIMEOUT_S = 5


class System:
    def __init__(
        self,
        workdir: Path,
        queues: list[str],
        ring: ClusterSpec = RING,
        keyspace: str = KEYSPACE,
        daemons: int = 3,
        servers: int = 2,
    ) -> None:
        self.workdir, self.ring, self.keyspace = workdir, ring, keyspace
        self.record = workdir / "record.txt"
        self.config = ring_config(
            workdir / "daemon.toml",
            ring,
            keyspace,
            queues,
            handler_module="bench.nemesis.handlers",
            consumers=2,
            batch_size=20,
            max_poll_interval="500ms",
        )
        self.daemons: list[Daemon | None] = [None] * daemons
        self.skews = [0] * daemons
        self.servers: list[sqsserver.SqsServer | None] = [None] * servers
        self.ports = [sqsserver.free_port() for _ in range(servers)]
        self.urls = [f"http://127.0.0.1:{p}" for p in self.ports]

    # ---- the ring ----------------------------------------------------------------------------
    def start_ring(self) -> Settings:
        return start_ring(self.ring, self.keyspace)

    def node_pid(self, index: int) -> int:
        pid = process.node_pid(self.ring.node(index))
        if pid is None:
            raise RuntimeError(f"node{index} of the nemesis ring is not running")
        return pid

    def kill_node(self, index: int) -> None:
        kill9_node(self.ring, index)

    def start_node(self, index: int) -> None:
        start_node(self.ring, index, progress=lambda _: None)

    def whole(self) -> bool:
        """Whether every node, as coordinator, sees every replica up and answering: a read at ALL through each one
        succeeds. A node back from a fault answers CQL before the others' gossip marks it up again; the next node
        fault must wait for that, or two nodes are down at once in the coordinators' eyes."""
        for i in range(1, self.ring.nodes + 1):
            address = f"127.0.0.{i}"
            cluster = Cluster(
                [address],
                port=self.ring.native_port,
                load_balancing_policy=WhiteListRoundRobinPolicy([address]),
                connect_timeout=5,
            )
            try:
                session = cluster.connect()
                read = SimpleStatement(
                    f"SELECT name FROM {self.keyspace}.queues LIMIT 1", consistency_level=ConsistencyLevel.ALL
                )
                session.execute(read, timeout=5)
            except (DriverException, NoHostAvailable):  # unavailable, timed out, or no coordinator at all
                return False
            finally:
                cluster.shutdown()
        return True

    def thaw_all(self) -> None:
        """SIGCONT every node (a freeze interrupted by an error must not outlive the run)."""
        for i in range(1, self.ring.nodes + 1):
            pid = process.node_pid(self.ring.node(i))
            if pid is not None:
                os.kill(pid, signal.SIGCONT)

    def restore(self) -> None:
        """A borrowed ring left as it was found: every node running and answering, every replica seen up."""
        self.thaw_all()
        for i in range(1, self.ring.nodes + 1):
            if process.node_pid(self.ring.node(i)) is None:
                start_node(self.ring, i, progress=lambda _: None)
        deadline = time.time() + 120
        while not self.whole():
            if time.time() > deadline:
                raise RuntimeError(f"the {self.ring.name} ring is not whole 120 s after the nemesis")
            time.sleep(1)

    def stop_ring(self) -> None:
        self.thaw_all()
        stop(self.ring)

    # ---- daemons -------------------------------------------------------------------------------
    def start_daemon(self, i: int, skew_ms: int | None = None) -> None:
        self.skews[i] = self.skews[i] if skew_ms is None else skew_ms
        env = {"CASQUE_CLOCK_OFFSET_MS": str(self.skews[i])}
        self.daemons[i] = start_daemon(self.config, self.record, self.workdir / f"daemon-{i}.log", env=env)

    def kill_daemon(self, i: int) -> None:
        d = self.daemons[i]
        if d is not None and d.proc.poll() is None:
            d.kill9()

    def stop_daemon(self, i: int) -> None:
        """The graceful stop (SIGTERM: in-flight messages finish), kill -9 if it hangs."""
        d = self.daemons[i]
        if d is None or d.proc.poll() is not None:
            return
        d.signal(signal.SIGTERM)
        try:
            d.wait(60)
        except subprocess.TimeoutExpired:
            d.kill9()

    def daemon_pids(self) -> list[int]:
        return [d.proc.pid for d in self.daemons if d is not None]

    # ---- servers -------------------------------------------------------------------------------
    def start_server(self, j: int) -> None:
        """``casque serve`` on its own port (the same after a restart: the clients keep their URLs)."""
        env = {
            "CASQUE_CASSANDRA__CONTACT_POINTS": str([f"127.0.0.{i}" for i in range(1, self.ring.nodes + 1)]),
            "CASQUE_CASSANDRA__PORT": str(self.ring.native_port),
            "CASQUE_CASSANDRA__REQUEST_TIMEOUT": str(REQUEST_TIMEOUT_S),
        }
        # It retries its own start until Cassandra answers (a node frozen or cut off meanwhile): up to 2 minutes here
        self.servers[j] = sqsserver.start(self.keyspace, "--port", str(self.ports[j]), env=env, timeout=120)

    def kill_server(self, j: int) -> None:
        s = self.servers[j]
        if s is not None and s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(30)
            self._keep_log(j, s.stop())

    def _keep_log(self, j: int, log: str) -> None:
        with open(self.workdir / f"server-{j}.log", "a") as f:
            f.write(log)

    def stop_processes(self) -> None:
        for i in range(len(self.daemons)):
            self.stop_daemon(i)
        for j, s in enumerate(self.servers):
            if s is not None:
                self._keep_log(j, s.stop())
                self.servers[j] = None

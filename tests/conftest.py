"""Test fixtures: a REAL Cassandra node, started by the project's own launcher.

The session starts (or reuses) the "dev" node on 127.0.0.1:9042 and applies the schema to the
``casque_test`` keyspace. Nothing here mocks storage: if the node can't start, the suite fails.
"""

from __future__ import annotations

import itertools
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The fault tests' own clusters (rings, a node to freeze) run beside the suite's node: a small fixed heap each, not
# the share of the box a user's node gets (daemon/devnode/spec.py default_heap).
os.environ.setdefault("CASQUE_NODE_HEAP", "768M")

from daemon.base.clock import Clock, ManualClock  # noqa: E402
from daemon.base.config import Settings  # noqa: E402
from daemon.devnode import ClusterSpec, start  # noqa: E402
from daemon.engine.client import Casque  # noqa: E402
from daemon.engine.storage.schema import ensure_schema  # noqa: E402
from tests.support.stall_node import stop_stall_node  # noqa: E402

#: A keyspace per xdist worker (make test runs a file per core at a time): the keyspace-wide state of one worker's
#: tests (heartbeats, leases, hint listeners, queue listings) never meets another's. A file that starts Cassandra nodes
#: of its own gives them ports no other file uses (tests/test_suite_layout.py).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
TEST_KEYSPACE = f"casque_test_{_WORKER}" if _WORKER else "casque_test"
pytest_plugins = ["tests.support.sqsfixtures"]
_counter = itertools.count()


def test_settings() -> Settings:
    s = Settings()
    s.cassandra.keyspace = TEST_KEYSPACE
    s.cassandra.consistency = "LOCAL_QUORUM"
    s.queue_defaults.shards = 4
    s.queue_defaults.buckets = 4
    s.queue_defaults.bucket_seconds = 60
    return s


@pytest.fixture(scope="session")
def cassandra_node() -> ClusterSpec:
    """Start (or reuse) the single dev node; fails loudly if it can't."""
    spec = ClusterSpec()
    start(spec, progress=lambda line: print(line, file=sys.stderr))
    return spec


@pytest.fixture(scope="session", autouse=True)
def stall_node_stopped_at_the_end() -> Iterator[None]:
    """The fault tests' node of this worker (tests/support/stall_node.py) is shared by its files, and stopped here."""
    yield
    stop_stall_node()


@pytest.fixture(scope="session")
def settings(cassandra_node: ClusterSpec) -> Settings:
    s = test_settings()
    ensure_schema(s)
    return s


@pytest.fixture(scope="session")
async def cq(settings: Settings) -> AsyncIterator[Casque]:
    client = await Casque.connect(settings)
    yield client
    await client.close()


@pytest.fixture
def queue_name() -> str:
    return f"q{os.getpid()}_{next(_counter)}_{uuid.uuid4().hex[:6]}"


@pytest.fixture
async def manual(settings: Settings) -> AsyncIterator[tuple[Casque, ManualClock]]:
    """A client whose clock only moves when the test says so: no sleeps, no wall-clock hopes."""
    clock = ManualClock(Clock().now_ms())
    client = await Casque.connect(settings, clock=clock)
    yield client, clock
    await client.close()

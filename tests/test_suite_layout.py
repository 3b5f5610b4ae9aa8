"""The suite's own plan for running in parallel (tests/conftest.py): every file that starts Cassandra nodes of its
own is in the one group whose files run one after another, so no two of them meet on a port."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import OWN_NODES

TESTS = Path(__file__).resolve().parent


def test_every_file_that_starts_its_own_nodes_runs_in_the_own_nodes_group() -> None:
    starts = {
        p.name
        for p in TESTS.glob("test_*.py")
        if p.name != Path(__file__).name
        and any(word in p.read_text() for word in ("ClusterSpec(", "servers_on_own_node(", "STALL_NODE"))
    }
    assert starts == OWN_NODES, f"add to or remove from tests/conftest.py OWN_NODES: {starts ^ OWN_NODES}"

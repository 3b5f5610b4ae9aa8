"""The suite's plan for running files side by side (make test: one file per worker, tests/conftest.py): every
Cassandra node a test file starts of its own listens on ports no other file's node uses, so two fault files running at
once never meet on a port. Read from the sources: each ``ClusterSpec(...)`` with its ports written out."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from daemon.devnode import ClusterSpec

TESTS = Path(__file__).resolve().parent


def specs() -> dict[str, list[tuple[str, set[tuple[int, int]]]]]:
    """Per file, each spec's name and the (node, port) pairs it binds: CQL and storage on each node's address,
    JMX on 127.0.0.1 (node 1's) from jmx_base on."""
    found: dict[str, list[tuple[str, set[tuple[int, int]]]]] = {}
    for path in sorted([*TESTS.glob("test_*.py"), *(TESTS / "support").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ClusterSpec"):
                continue
            kw: dict[str | None, Any] = {
                k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)
            }
            if not {"native_port", "storage_port", "jmx_base"} <= set(kw):
                continue  # free ports chosen at run time, or the default dev node's (below)
            nodes = int(kw.get("nodes", 1))
            ports = {(i, kw["native_port"]) for i in range(1, nodes + 1)}
            ports |= {(i, kw["storage_port"]) for i in range(1, nodes + 1)}
            ports |= {(1, kw["jmx_base"] + i) for i in range(nodes)}
            found.setdefault(path.name, []).append((str(kw.get("name")), ports))
    return found


def test_no_two_files_nodes_share_a_port() -> None:
    dev = ClusterSpec()
    taken: dict[tuple[int, int], str] = {(1, p): "dev" for p in (dev.native_port, dev.storage_port, dev.jmx_base)}
    clashes = []
    for file, named in specs().items():
        for name, ports in named:
            for port in ports:
                other = taken.setdefault(port, f"{file}:{name}")
                if other.split(":")[0] not in (file, "dev") or (other == "dev" and name != "dev"):
                    clashes.append(f"{file}:{name} and {other} on 127.0.0.{port[0]}:{port[1]}")
    assert sum(len(named) for named in specs().values()) >= 6, "the sources' clusters were not found"
    assert not clashes, clashes

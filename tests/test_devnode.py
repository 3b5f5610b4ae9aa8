"""Tests for daemon.devnode: a real Cassandra 5.0 started as local JVM processes.

No mocks: the Java checks run real (or fake-but-executable) ``java`` binaries, the port
test holds a real socket, and the node tests start real CassandraDaemon processes.

The single-node "dev" cluster (127.0.0.1:9042) is shared with the rest of the test suite
and with developers, so it is started if needed and deliberately left running. Throw-away
clusters use their own names and free ports and are stopped (and wiped) afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from daemon.devnode import (
    ClusterSpec,
    DevnodeError,
    JavaError,
    NodeStartError,
    PortInUseError,
    check_java_version,
    ensure_cassandra,
    find_java,
    initial_token,
    start,
    start_node,
    status,
    stop,
)
from daemon.devnode.config import to_yaml
from daemon.devnode.download import PINNED, cassandra_dir, is_installed
from daemon.devnode.java import probe_java
from daemon.devnode.spec import default_heap

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT = 300.0  # generous: CI machines have 2 slow cores


def _free_ports(n: int) -> list[int]:
    """``n`` distinct currently-free TCP ports (all held open until every one is chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _fake_jdk(root: Path, version_line: str) -> Path:
    """A directory that looks like a JDK whose ``bin/java -version`` prints ``version_line``."""
    java = root / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\nexit 0\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return root


def _query(address: str, port: int, cql: str) -> list[tuple]:
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([address]))
    cluster = Cluster([address], port=port, execution_profiles={EXEC_PROFILE_DEFAULT: profile}, connect_timeout=5)
    try:
        return [tuple(r) for r in cluster.connect().execute(cql, timeout=15)]
    finally:
        cluster.shutdown()


# --------------------------------------------------------------------------- Java


@pytest.mark.parametrize(
    "text, major",
    [
        ("11.0.22", 11),
        ("17.0.15", 17),
        ("17", 17),
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment (build 17.0.15+6)', 17),
        ('openjdk version "11.0.22" 2024-01-16 LTS', 11),
    ],
)
def test_check_java_version_accepts_11_and_17(text: str, major: int) -> None:
    assert check_java_version(text) == major


@pytest.mark.parametrize(
    "text, expected",
    [
        ("21.0.2", "Java 21"),
        ('openjdk version "21.0.2" 2024-01-16', "Java 21"),
        ('openjdk version "25" 2025-09-16', "Java 25"),
        ('java version "1.8.0_392"', "Java 8"),
        ("1.8.0_392", "Java 8"),
        ("garbage", "cannot read a Java version"),
        ("", "cannot read a Java version"),
    ],
)
def test_check_java_version_rejects_others(text: str, expected: str) -> None:
    with pytest.raises(JavaError) as exc:
        check_java_version(text)
    msg = str(exc.value)
    assert expected in msg
    assert "11 or 17" in msg and "CASQUE_JAVA_HOME" in msg
    assert "\n" not in msg and msg.startswith("casque: ")


def test_find_java_rejects_casque_java_home_with_java_21(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_jdk(tmp_path / "jdk-21", 'openjdk version "21.0.2" 2024-01-16')
    monkeypatch.setenv("CASQUE_JAVA_HOME", str(fake))
    with pytest.raises(JavaError) as exc:
        find_java()
    msg = str(exc.value)
    assert msg.startswith("casque: Java 21 at ")
    assert str(fake) in msg
    assert "install openjdk-17-jdk-headless or set CASQUE_JAVA_HOME to a JDK 17" in msg


def test_find_java_rejects_casque_java_home_without_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASQUE_JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaError, match="no executable bin/java"):
        find_java()


def test_find_java_skips_a_java_home_it_cannot_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """JAVA_HOME pointing at a newer JDK is common; we fall back to a system JDK 11/17."""
    fake = _fake_jdk(tmp_path / "jdk-21", 'openjdk version "21.0.2" 2024-01-16')
    monkeypatch.delenv("CASQUE_JAVA_HOME", raising=False)
    monkeypatch.setenv("JAVA_HOME", str(fake))
    info = find_java()
    assert info.major in (11, 17)
    assert info.java_home != fake


def test_probe_java_runs_the_real_binary() -> None:
    info = find_java()
    again = probe_java(info.java, info.home)
    assert again.major == info.major in (11, 17)
    assert again.version.startswith(str(info.major))


# --------------------------------------------------------------------------- config


def test_initial_tokens_are_spread_and_distinct() -> None:
    assert initial_token(1, 1) == 0
    tokens = [initial_token(i, 3) for i in (1, 2, 3)]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    assert all(-(2**63) < t < 2**63 - 1 for t in tokens)


def test_yaml_writer_nests_maps_and_lists() -> None:
    text = to_yaml(
        {
            "a": 1,
            "b": True,
            "c": "x: y",
            "d": {"e": [1, {"f": "g", "h": []}]},
            "i": {},
        }
    )
    assert text == ('a: 1\nb: true\nc: "x: y"\nd:\n  e:\n    - 1\n    - f: "g"\n      h: []\ni: {}\n')


# --------------------------------------------------------------------------- download


def test_ensure_cassandra_is_cached_and_verified() -> None:
    home = ensure_cassandra(progress=lambda _msg: None)
    marker = json.loads((home / ".complete").read_text())
    assert marker["pinned"] is True and marker["jars"] >= 50
    assert (home / "lib" / f"cassandra-all-{PINNED}.jar").is_file()
    assert list((home / "lib").glob("jamm-*.jar"))


def test_interrupted_download_is_redone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No marker means "not downloaded": leftovers of a killed download are discarded.

    Maven resolves from ~/.m2 here (filled by the first real download), so this is quick.
    """
    ensure_cassandra(progress=lambda _m: None)  # make sure ~/.m2 holds the artifacts
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    target = cassandra_dir()
    (target / "lib.partial").mkdir(parents=True)
    (target / "lib.partial" / "half-written.jar").write_bytes(b"PK")
    (target / "lib").mkdir()
    assert not is_installed()
    messages: list[str] = []
    assert ensure_cassandra(progress=messages.append) == target
    assert is_installed() and not (target / "lib.partial").exists()
    assert not (target / "lib" / "half-written.jar").exists()
    assert any("jars in place" in m for m in messages)


# --------------------------------------------------------------------------- nodes


@pytest.fixture()
def scratch_spec(request: pytest.FixtureRequest) -> Iterator[ClusterSpec]:
    """A one-node cluster on free ports, stopped and wiped afterwards."""
    native, storage, jmx = _free_ports(3)
    spec = ClusterSpec(
        name=f"t-{request.node.name[5:25].replace('_', '-')}", native_port=native, storage_port=storage, jmx_base=jmx
    )
    shutil.rmtree(spec.cluster_dir, ignore_errors=True)
    yield spec
    stop(spec, timeout=30)
    shutil.rmtree(spec.cluster_dir, ignore_errors=True)


def test_busy_port_is_reported_before_launching(scratch_spec: ClusterSpec) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", scratch_spec.native_port))
        holder.listen()
        with pytest.raises(PortInUseError) as exc:
            start(scratch_spec, timeout=60, progress=lambda _m: None)
    msg = str(exc.value)
    assert f"port {scratch_spec.native_port} on 127.0.0.1" in msg
    assert "--port" in msg and "\n" not in msg
    assert not scratch_spec.node(1).pidfile.exists()
    assert not status(scratch_spec).any_running


def test_node_that_dies_reports_its_error_line(scratch_spec: ClusterSpec) -> None:
    broken = replace(scratch_spec, extra_yaml={"no_such_setting": 1})
    with pytest.raises(NodeStartError) as exc:
        start(broken, timeout=120, progress=lambda _m: None)
    msg = str(exc.value)
    node = broken.node(1)
    # What the node wrote, read before the scratch cluster is removed: a failure here must say why the line was missed
    logs = "\n".join(
        f"--- {p.name}:\n{p.read_text(errors='replace')[-3000:] if p.exists() else '(none)'}"
        for p in (node.stdout_log, node.system_log)
    )
    assert "exited during start" in msg, logs
    assert "no_such_setting" in msg, logs
    assert str(node.system_log) in msg
    assert not status(broken).any_running


def test_concurrent_starts_share_one_node(scratch_spec: ClusterSpec) -> None:
    """Two callers starting the same cluster at once end up with one JVM, not two."""
    argv = [
        sys.executable,
        "-m",
        "daemon.devnode",
        "start",
        "--name",
        scratch_spec.name,
        "--port",
        str(scratch_spec.native_port),
        "--storage-port",
        str(scratch_spec.storage_port),
        "--jmx-port",
        str(scratch_spec.jmx_base),
        "--timeout",
        str(START_TIMEOUT),
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=START_TIMEOUT + 60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert sum("launched node1" in out for out in outputs) == 1, outputs
    assert sum("reusing" in out for out in outputs) == 1, outputs
    st = status(scratch_spec)
    assert st.ready and st.node(1).pid is not None
    dev_pid = status(ClusterSpec()).node(1).pid
    stop(scratch_spec)
    assert not status(scratch_spec).any_running and not scratch_spec.node(1).pidfile.exists()
    assert status(ClusterSpec()).node(1).pid == dev_pid  # the shared dev node is another cluster: untouched


@pytest.fixture(scope="session")
def dev() -> ClusterSpec:
    """The shared single-node cluster on 127.0.0.1:9042; started if needed, left running."""
    spec = ClusterSpec()
    start(spec, timeout=START_TIMEOUT)
    return spec


def test_dev_node_answers_cql(dev: ClusterSpec) -> None:
    st = status(dev)
    node = st.node(1)
    assert st.ready and node.running and node.cql_ready
    assert node.address == "127.0.0.1" and node.native_port == 9042
    assert node.release_version and node.release_version.startswith("5.0.")
    assert node.log_file.is_file() and node.data_dir.is_dir()
    rows = _query("127.0.0.1", 9042, "SELECT cluster_name, release_version FROM system.local")
    assert rows == [("dev", node.release_version)]


def test_second_start_reuses_running_node(dev: ClusterSpec) -> None:
    before = status(dev).node(1).pid
    messages: list[str] = []
    after = start(dev, timeout=60, progress=messages.append).node(1).pid
    assert before is not None and after == before
    assert any("reusing" in m for m in messages)


def test_changing_the_node_count_of_an_existing_cluster_is_refused(dev: ClusterSpec) -> None:
    with pytest.raises(DevnodeError, match="was created with 1 node"):
        start(replace(dev, nodes=3), timeout=10, progress=lambda _m: None)
    assert status(dev).ready


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "daemon.devnode", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
        check=False,
    )


def test_cli_status_json(dev: ClusterSpec) -> None:
    result = _cli("status", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["name"] == "dev" and data["ready"] is True
    assert data["nodes"][0]["pid"] == status(dev).node(1).pid


def test_cli_cqlsh_passes_arguments_through(dev: ClusterSpec) -> None:
    result = _cli("cqlsh", "-e", "SELECT cluster_name FROM system.local")
    assert result.returncode == 0, result.stderr
    assert "dev" in result.stdout and "(1 rows)" in result.stdout


def test_cli_nodetool(dev: ClusterSpec) -> None:
    result = _cli("nodetool", "status")
    assert result.returncode == 0, result.stderr
    assert "UN  127.0.0.1" in result.stdout


def test_cli_reports_errors_in_one_line(tmp_path: Path) -> None:
    env_home = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "daemon.devnode", "start", "--name", "x", "--port", "9042"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
        env=dict(
            os.environ,
            CASQUE_HOME=env_home,
            CASQUE_JAVA_HOME=str(_fake_jdk(tmp_path / "jdk", 'openjdk version "21.0.2"')),
            PYTHONPATH=str(REPO),
        ),
    )
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("casque: Java 21 at ")


# --------------------------------------------------------------------------- cluster


def test_bad_spec_values_are_rejected() -> None:
    with pytest.raises(ValueError):
        ClusterSpec(name="bad name")
    with pytest.raises(ValueError):
        ClusterSpec(nodes=0)
    with pytest.raises(DevnodeError, match="nodes 1..1"):
        start_node(ClusterSpec(name="never-started"), 2)


def test_the_default_heap_is_sized_for_the_box_and_split_between_local_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """cassandra-env.sh's rule on each node's share of memory: a 24 GiB box gives one node 6 GiB and each of three
    2 GiB; a 2 GiB box gives one node 1 GiB, and no node gets under 512 MiB. $CASQUE_NODE_HEAP wins."""
    monkeypatch.delenv("CASQUE_NODE_HEAP", raising=False)
    sizes = {m: [default_heap(n, m) for n in (1, 3)] for m in (24 * 1024, 2048, 1024)}
    assert sizes == {24 * 1024: ["6144M", "2048M"], 2048: ["1024M", "512M"], 1024: ["512M", "512M"]}
    assert ClusterSpec(nodes=3).heap == default_heap(3)
    monkeypatch.setenv("CASQUE_NODE_HEAP", "900M")
    assert ClusterSpec(nodes=3).heap == "900M"

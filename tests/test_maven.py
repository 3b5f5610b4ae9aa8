"""The one Maven fetcher (daemon/devnode/maven.py) when Maven is missing or fails: each caller's own
error, naming the fix, and no half set of jars left behind. (The successful fetch is covered by
tests/test_devnode.py's downloads and tests/test_pipeline.py's connector.) The failing Maven is a real
executable that prints what Maven prints on a network failure and exits 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.devnode import download
from daemon.devnode.errors import DevnodeError
from daemon.devnode.maven import MavenFailed, copy_dependencies
from pipeline import jars
from pipeline.errors import ConnectorJarError

FAILING_MVN = """#!/bin/sh
echo "[INFO] Scanning for projects..."
echo "[ERROR] Failed to execute goal: Could not transfer artifact from/to central: Connection refused"
echo "[ERROR] "
exit 1
"""


@pytest.fixture
def failing_mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    mvn = tmp_path / "mvn"
    mvn.write_text(FAILING_MVN)
    mvn.chmod(0o755)
    monkeypatch.setenv("CASQUE_MVN", str(mvn))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return mvn


def test_a_failed_fetch_reports_mavens_first_error_and_its_log(failing_mvn: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(MavenFailed) as failed:
        copy_dependencies(tmp_path / "pom.xml", out, tmp_path / "maven.log", lambda _m: None)
    assert failed.value.rc == 1 and "Connection refused" in failed.value.reason
    assert "Connection refused" in (tmp_path / "maven.log").read_text(), "Maven's whole output is in the log"


def test_the_connector_fetch_fails_with_its_own_error_and_leaves_no_jars(failing_mvn: Path) -> None:
    refused = "Maven failed \\(exit 1\\) fetching spark-cassandra-connector.*Connection refused"
    with pytest.raises(ConnectorJarError, match=refused):
        jars.ensure_connector(progress=lambda _m: None)
    assert not jars.is_installed() and not (jars.connector_dir() / "lib.partial").exists()


def test_the_cassandra_fetch_fails_with_its_own_error_and_leaves_no_jars(failing_mvn: Path) -> None:
    with pytest.raises(DevnodeError, match="Maven failed \\(exit 1\\) fetching cassandra-all.*Connection refused"):
        download.ensure_cassandra(progress=lambda _m: None)
    assert not download.is_installed() and not (download.cassandra_dir() / "lib.partial").exists()


def test_no_maven_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CASQUE_MVN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without mvn
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(ConnectorJarError, match="apt-get install maven"):
        jars.ensure_connector(progress=lambda _m: None)

"""The bench's own set-up: everything it needs, installed by itself, on a fresh machine.

* Python: bench/requirements.lock (hash-pinned, compiled against the project's lock so shared
  packages keep their versions) into the interpreter running the bench (``make bench``: .venv).
* Debian: redis-server and postgresql for the peers, iptables for the nemesis's network partitions (``apt-get update``
  first, as root).
* Cassandra: the local node (``daemon.devnode``, the same one ``make test`` uses) and the
  ``casque_bench`` keyspace (the engine's own ``apply_schema``).
* cassandra-stress: Apache publishes no 5.0 binary tarball on Maven Central, and no stress
  artifact; the 4.0-alpha2 binary tarball is there, and its stress tool speaks the native
  protocol to a 5.0 node. It is fetched with Maven (checksum-verified) and unpacked in the cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from .env import ROOT, progress

LOCK = ROOT / "bench" / "requirements.lock"
STRESS_VERSION = "4.0-alpha2"
STRESS_HOME = Path.home() / ".cache" / "casque" / f"apache-cassandra-{STRESS_VERSION}"
APT_PACKAGES = {
    "redis-server": "/usr/bin/redis-server",
    "postgresql": "/usr/lib/postgresql",
    "iptables": "/usr/sbin/iptables",
}
NEEDED_MODULES = ("celery", "redis", "arq", "dramatiq", "pgqueuer", "asyncpg", "procrastinate", "psycopg", "matplotlib")


def python_deps() -> None:
    """Install the bench's locked Python packages once per lock version."""
    digest = hashlib.sha1(LOCK.read_bytes()).hexdigest()[:12]
    stamp = Path(sys.prefix) / f".bench-installed-{digest}"
    spy = Path(sys.executable).parent / "py-spy"  # the profile part's sampler: a binary, not a module
    if stamp.exists() and all(importlib.util.find_spec(m) for m in NEEDED_MODULES) and spy.exists():
        return
    progress(f"installing the bench's Python packages from {LOCK.relative_to(ROOT)} into {sys.prefix}")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--require-hashes",
            "-r",
            str(LOCK),
        ],
        check=True,
    )
    for old in Path(sys.prefix).glob(".bench-installed-*"):
        old.unlink()
    stamp.touch()


def debian_packages() -> None:
    missing = [name for name, path in APT_PACKAGES.items() if not Path(path).exists()]
    if not missing:
        return
    if os.geteuid() != 0:
        raise SystemExit(
            f"bench: needs Debian packages {', '.join(missing)}: run as root, or apt-get install {' '.join(missing)}"
        )
    progress(f"installing Debian packages: {', '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-q", *missing], check=True, env=env, stdout=subprocess.DEVNULL)


def cassandra_node() -> None:
    """Start (or reuse) the local node and create the bench keyspace."""
    from daemon.devnode import ClusterSpec, start
    from daemon.engine.storage.schema import ensure_schema

    from .env import bench_settings

    start(ClusterSpec(), progress=lambda line: progress(f"cassandra: {line}"))
    ensure_schema(bench_settings())


def stress_tool() -> Path:
    """The cassandra-stress launcher's home (downloaded and unpacked on first use)."""
    jar = STRESS_HOME / "tools" / "lib" / "stress.jar"
    if jar.exists():
        return STRESS_HOME
    if shutil.which("mvn") is None:
        raise SystemExit("bench: Maven is needed to fetch cassandra-stress: apt-get install maven")
    progress(f"fetching cassandra-stress (apache-cassandra-{STRESS_VERSION}-bin.tar.gz) from Maven Central")
    artifact = f"org.apache.cassandra:apache-cassandra:{STRESS_VERSION}:tar.gz:bin"
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "dependency:get",
            f"-Dartifact={artifact}",
            "-Dtransitive=false",
            "-DremoteRepositories=central::default::https://repo.maven.apache.org/maven2",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    repo = Path.home() / ".m2" / "repository" / "org" / "apache" / "cassandra" / "apache-cassandra" / STRESS_VERSION
    tarball = repo / f"apache-cassandra-{STRESS_VERSION}-bin.tar.gz"
    sha1 = (repo / f"{tarball.name}.sha1").read_text().split()[0].strip()
    if hashlib.sha1(tarball.read_bytes()).hexdigest() != sha1:
        raise SystemExit(f"bench: {tarball} does not match its published SHA-1: delete it and run again")
    STRESS_HOME.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.11.4+: refuse paths outside the target
        tar.extractall(STRESS_HOME.parent, **safe)  # type: ignore[arg-type]
    return STRESS_HOME


def all_steps(peers: bool = True, stress: bool = True) -> None:
    python_deps()
    if peers:
        debian_packages()
    cassandra_node()
    if stress:
        stress_tool()

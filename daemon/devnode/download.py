"""Fetch the Cassandra server jars (once) into a per-user cache.

Apache publishes the Cassandra 5.0 *binary tarball* only on its own download mirrors,
not on Maven Central; Central does carry ``org.apache.cassandra:cassandra-all`` and its
whole dependency tree, which is everything ``CassandraDaemon`` needs on the classpath.
So we let Maven resolve that tree (``pom.xml`` next to this file) and copy the runtime
jars into ``${XDG_CACHE_HOME:-~/.cache}/casque/cassandra-<version>/lib``, checked and
made atomic as every jar set casque fetches (daemon/devnode/jar_set.py), against the
SHA-256 of cassandra-all's jar pinned here.
"""

from __future__ import annotations

from pathlib import Path

from .errors import DevnodeError
from .jar_set import JarSet, cache_root
from .maven import DEPENDENCY_PLUGIN, Progress

__all__ = [
    "PINNED",
    "KNOWN_SHA256",
    "DEPENDENCY_PLUGIN",
    "cache_root",
    "cassandra_dir",
    "is_installed",
    "ensure_cassandra",
]

#: The Cassandra release casque develops and tests against.
PINNED = "5.0.6"

#: SHA-256 of ``cassandra-all-<version>.jar`` as published on Maven Central.
KNOWN_SHA256: dict[str, str] = {
    "5.0.6": "bd533204e1088179ba58bd817082673b211cc78f605e64e34c3cd001c42aca2a",
}


def cassandra_dir(version: str = PINNED) -> Path:
    """Where the jars of ``version`` live (``<dir>/lib/*.jar``) once installed."""
    return cache_root() / f"cassandra-{version}"


def _jars(version: str) -> JarSet:
    return JarSet(
        name=f"cassandra-all {version}",
        target=cassandra_dir(version),
        pom=Path(__file__).with_name("pom.xml"),
        main_jar=f"cassandra-all-{version}.jar",
        sha256=KNOWN_SHA256.get(version),
        m2_dir=f"org/apache/cassandra/cassandra-all/{version}",
        min_jars=50,  # cassandra-all 5.0 pulls ~100
        error=DevnodeError,
        options=[f"-Dcassandra.version={version}"],
        size="and ~100 runtime jars, ~70 MB",
    )


def is_installed(version: str = PINNED) -> bool:
    """True if a complete download of ``version`` is in the cache."""
    return _jars(version).installed()


def ensure_cassandra(version: str = PINNED, progress: Progress = print) -> Path:
    """Return the directory holding ``lib/*.jar`` for ``version``, downloading it if needed.
    Raises :class:`DevnodeError` naming the fix if Maven is missing, the download fails or a checksum
    does not match."""
    jars = _jars(version)
    jars.ensure(progress)
    return jars.target

"""Fetch the Spark Cassandra connector's jars (once) into casque's per-user cache.

The connector is a JVM library: PySpark cannot ``pip install`` it, so casque fetches it the way it
fetches Cassandra, through the one Maven fetcher (``daemon.devnode.maven``): Maven's dependency
plugin, pinned, copies the jars from Maven Central with ``--strict-checksums`` (each jar must match
the SHA-1 Central publishes), and the connector's own jar is then compared with the SHA-256 pinned below, so a
poisoned ``~/.m2`` or mirror is refused.

Why not the single *assembly* jar: ``spark-cassandra-connector-assembly_2.12`` is published on
Maven Central only up to 3.2.0, and the connector for Spark 3.5 is 3.5.1. So casque resolves
``spark-cassandra-connector_2.12:3.5.1`` and its runtime dependencies (the DataStax Java driver,
shaded) from a resolver-only POM written next to the jars, minus what Spark itself ships (Scala,
SLF4J): the same set ``spark-submit --packages`` would load, without Ivy at every start.

Atomicity: jars land in ``lib.partial``; a ``.complete`` marker is written after verification and the
directory renamed to ``lib``, under a file lock, so an interrupted download or two parallel first
runs never leave half a set behind.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from daemon.devnode.download import _sha256, cache_root
from daemon.devnode.locks import locked
from daemon.devnode.maven import MavenFailed, MavenMissing, Progress, copy_dependencies

from .errors import ConnectorJarError

GROUP = "com.datastax.spark"
ARTIFACT = "spark-cassandra-connector_2.12"
VERSION = "3.5.1"
PROVIDED_BY_SPARK = "org.scala-lang,org.slf4j"

#: SHA-256 of the connector jar as published on Maven Central (Maven checks every jar's SHA-1).
KNOWN_SHA256: dict[str, str] = {
    "3.5.1": "5c5b53813d8fc1e69115758fb4a7ccb24cae335778f9e6902f49999d7f985c08",
}

_MARKER = ".complete"
_MIN_JARS = 8  # the connector, its driver module and the Java driver's pieces
_POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Resolver-only POM written by casque (pipeline/jars.py): it builds nothing. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.casque</groupId>
  <artifactId>casque-spark-connector</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


def connector_dir(version: str = VERSION) -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/casque/spark-cassandra-connector-<version>``."""
    return cache_root() / f"spark-cassandra-connector-{version}"


def is_installed(version: str = VERSION) -> bool:
    d = connector_dir(version)
    return (d / _MARKER).is_file() and _main_jar(d / "lib", version).is_file()


def ensure_connector(version: str = VERSION, progress: Progress = print) -> list[Path]:
    """The connector's jars (for ``spark.jars`` / ``--jars``), downloaded and verified if needed.

    Cheap once cached (a marker check and one SHA-256 of the connector jar). Raises
    ConnectorJarError naming the fix if Maven is missing, the download fails or a checksum differs.
    """
    target = connector_dir(version)
    lib = target / "lib"
    if not is_installed(version):
        with locked(target):  # parallel first runs wait for one download
            if not is_installed(version):
                _download(version, target, progress)
    _verify(lib, version)
    return sorted(lib.glob("*.jar"))


def _download(version: str, target: Path, progress: Progress) -> None:
    partial, lib = target / "lib.partial", target / "lib"
    for stale in (partial, lib):
        shutil.rmtree(stale, ignore_errors=True)
    (target / _MARKER).unlink(missing_ok=True)
    partial.mkdir(parents=True)
    progress(
        f"casque: fetching the Spark Cassandra connector {version} and its Java driver (13 jars, 14 MB) "
        f"from Maven Central into {target}; this happens once"
    )
    started = time.monotonic()
    pom = target / "pom.xml"
    pom.write_text(_POM.format(group=GROUP, artifact=ARTIFACT, version=version), encoding="utf-8")
    try:
        _run_maven(pom, partial, target / "maven.log", progress)
        digest = _verify(partial, version)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    partial.rename(lib)
    jars = sorted(lib.glob("*.jar"))
    size, seconds = sum(j.stat().st_size for j in jars), round(time.monotonic() - started, 1)
    marker = {
        "version": version,
        "connector_sha256": digest,
        "jars": [j.name for j in jars],
        "bytes": size,
        "seconds": seconds,
    }
    (target / _MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    progress(f"casque: connector ready: {len(jars)} jars, {size / 1e6:.0f} MB in {seconds}s")


def _main_jar(lib: Path, version: str) -> Path:
    return lib / f"{ARTIFACT}-{version}.jar"


def _verify(lib: Path, version: str) -> str:
    """Check the jar set; return the connector jar's SHA-256 or raise."""
    jar = _main_jar(lib, version)
    if not jar.is_file():
        raise ConnectorJarError(
            f"{jar} is missing after the Maven download: delete {lib.parent} and retry (log: "
            f"{lib.parent / 'maven.log'})"
        )
    digest = _sha256(jar)
    expected = KNOWN_SHA256.get(version)
    if expected and digest != expected:
        raise ConnectorJarError(
            f"{jar.name} has SHA-256 {digest} but {expected} is pinned: the download is corrupt or tampered; "
            f"delete ~/.m2/repository/{GROUP.replace('.', '/')}/{ARTIFACT}/{version} and {lib.parent}, then retry"
        )
    count = len(list(lib.glob("*.jar")))
    if count < _MIN_JARS:
        raise ConnectorJarError(
            f"only {count} jars were fetched for the connector {version}: delete {lib.parent} and retry "
            f"(log: {lib.parent / 'maven.log'})"
        )
    return digest


def _run_maven(pom: Path, out_dir: Path, log_path: Path, progress: Progress) -> None:
    """Run the copy through the shared Maven fetcher (daemon/devnode/maven.py), leaving Spark's own jars out."""
    try:
        copy_dependencies(pom, out_dir, log_path, progress, options=[f"-DexcludeGroupIds={PROVIDED_BY_SPARK}"])
    except MavenMissing:
        raise ConnectorJarError(
            "Maven (mvn) is not on PATH: install it (apt-get install maven); "
            "it fetches the Spark Cassandra connector once"
        ) from None
    except MavenFailed as exc:
        raise ConnectorJarError(
            f"Maven failed (exit {exc.rc}) fetching {ARTIFACT}: {exc.reason}; "
            f"check network/proxy (~/.m2/settings.xml) and retry, full log: {log_path}"
        ) from None

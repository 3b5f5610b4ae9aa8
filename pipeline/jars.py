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

Checked and made atomic as every jar set casque fetches (daemon/devnode/jar_set.py).
"""

from __future__ import annotations

from pathlib import Path

from daemon.devnode.jar_set import JarSet, cache_root
from daemon.devnode.maven import Progress

from .errors import ConnectorJarError

GROUP = "com.datastax.spark"
ARTIFACT = "spark-cassandra-connector_2.12"
VERSION = "3.5.1"
PROVIDED_BY_SPARK = "org.scala-lang,org.slf4j"

#: SHA-256 of the connector jar as published on Maven Central (Maven checks every jar's SHA-1).
KNOWN_SHA256: dict[str, str] = {
    "3.5.1": "5c5b53813d8fc1e69115758fb4a7ccb24cae335778f9e6902f49999d7f985c08",
}

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


def _jars(version: str) -> JarSet:
    return JarSet(
        name=f"{ARTIFACT} {version}",
        target=connector_dir(version),
        pom=_POM.format(group=GROUP, artifact=ARTIFACT, version=version),
        main_jar=f"{ARTIFACT}-{version}.jar",
        sha256=KNOWN_SHA256.get(version),
        m2_dir=f"{GROUP.replace('.', '/')}/{ARTIFACT}/{version}",
        min_jars=8,  # the connector, its driver module and the Java driver's pieces
        error=ConnectorJarError,
        options=[f"-DexcludeGroupIds={PROVIDED_BY_SPARK}"],  # Spark's own jars stay out
        size="and its Java driver, 13 jars, 14 MB",
    )


def is_installed(version: str = VERSION) -> bool:
    return _jars(version).installed()


def ensure_connector(version: str = VERSION, progress: Progress = print) -> list[Path]:
    """The connector's jars (for ``spark.jars`` / ``--jars``), downloaded and checked if needed. Raises
    ConnectorJarError naming the fix if Maven is missing, the download fails or a checksum differs."""
    return _jars(version).ensure(progress)

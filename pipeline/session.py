"""The SparkSession every job runs in: local (``casque pipeline <job>``) or under ``spark-submit``.

Local: casque starts Spark itself, so it chooses the JVM (``daemon.devnode.find_java``: Spark 3.5
runs on Java 17, and a newer default JDK would fail deep inside start-up), adds the connector's
jars (fetched once, ``pipeline.jars``), the ``--add-opens`` options Spark 3.5 needs on Java 17, and
runs the Python workers on this interpreter so they import the same ``daemon`` code.

spark-submit: the cluster's Spark already exists; its master, jars and JVM options come from the
``spark-submit`` command line (docs/pipeline.md), and casque only sets the Cassandra connection.

Either way the connection (hosts, port, DC, credentials, TLS, consistency) comes from casque's own
config, so a job reads the same cluster and keyspace as ``casque run``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from daemon.base.config import CassandraSettings, Settings
from daemon.base.logs import get_logger
from daemon.devnode.errors import DevnodeError
from daemon.devnode.java import find_java

from .errors import PipelineError
from .jars import ensure_connector

log = get_logger("casque.pipeline")

#: What Spark 3.5 opens on Java 17 (its own launcher list), plus Netty's reflection switch for Arrow.
JAVA17_OPTIONS = " ".join(
    [
        "-XX:+IgnoreUnrecognizedVMOptions",
        *(
            f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
            for pkg in (
                "java.lang",
                "java.lang.invoke",
                "java.lang.reflect",
                "java.io",
                "java.net",
                "java.nio",
                "java.util",
                "java.util.concurrent",
                "java.util.concurrent.atomic",
                "sun.nio.ch",
                "sun.nio.cs",
                "sun.security.action",
                "sun.util.calendar",
            )
        ),
        "-Djdk.reflect.useDirectMethodHandle=false",
        "-Dio.netty.tryReflectionSetAccessible=true",
    ]
)

EXTENSIONS = "com.datastax.spark.connector.CassandraSparkExtensions"


def connection_conf(c: CassandraSettings) -> dict[str, str]:
    """The connector's settings for the cluster casque's config names (spark.cassandra.*)."""
    conf = {
        "spark.cassandra.connection.host": ",".join(c.contact_points),
        "spark.cassandra.connection.port": str(c.port),
        "spark.cassandra.connection.timeoutMS": str(int(c.connect_timeout * 1000)),
        "spark.cassandra.read.timeoutMS": str(int(c.request_timeout * 1000)),
        "spark.cassandra.input.consistency.level": c.consistency.upper(),
        "spark.cassandra.output.consistency.level": c.consistency.upper(),
    }
    if c.local_dc:
        conf["spark.cassandra.connection.localDC"] = c.local_dc
    if c.username:
        conf["spark.cassandra.auth.username"] = c.username
        conf["spark.cassandra.auth.password"] = c.password
    if c.tls.enabled:
        conf["spark.cassandra.connection.ssl.enabled"] = "true"
    return conf


def local_conf(settings: Settings, master: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Everything a locally started Spark needs; ``extra`` (``--spark-conf``) wins."""
    jars = ensure_connector(progress=lambda line: print(line, file=sys.stderr))
    conf = {
        "spark.master": master,
        "spark.app.name": "casque-pipeline",
        "spark.jars": ",".join(str(j) for j in jars),
        "spark.sql.extensions": EXTENSIONS,
        "spark.driver.extraJavaOptions": JAVA17_OPTIONS,
        "spark.executor.extraJavaOptions": JAVA17_OPTIONS,
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "2g",
    }
    conf.update(connection_conf(settings.cassandra))
    conf.update(extra or {})
    return conf


def submitted() -> bool:
    """True inside ``spark-submit`` (the JVM started this Python and left its gateway port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def start_session(settings: Settings, master: str = "local[*]", extra: dict[str, str] | None = None) -> Any:
    """Start (or join) the SparkSession for a job and log how long start-up took."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise PipelineError(
            "PySpark is not installed: pip install 'casque[pipeline]' (make setup installs it)"
        ) from None

    started = time.monotonic()
    if submitted():
        spark = SparkSession.builder.getOrCreate()
        for key, value in {
            **connection_conf(settings.cassandra),
            **_small_shuffles(spark),
            "spark.sql.session.timeZone": "UTC",
            **(extra or {}),
        }.items():
            spark.conf.set(key, value)
        _check_extensions(spark)
    else:
        _local_environment()
        builder = SparkSession.builder
        for key, value in local_conf(settings, master, extra).items():
            builder = builder.config(key, value)
        try:
            spark = builder.getOrCreate()
        except Exception as exc:  # py4j and the launcher raise plain exceptions
            raise PipelineError(
                f"Spark did not start ({' '.join(str(exc).split())[:300]}): check Java 17 and 'casque pipeline jar'"
            ) from None
    spark.sparkContext.setLogLevel("WARN")
    log.info(
        "spark_started",
        master=spark.sparkContext.master,
        seconds=round(time.monotonic() - started, 1),
        version=spark.version,
    )
    return spark


def _small_shuffles(spark: Any) -> dict[str, str]:
    """Spark's default of 200 shuffle partitions turns each small aggregation into 200 tasks; unless
    spark-submit set it, use twice the cluster's cores."""
    if spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        return {}
    return {"spark.sql.shuffle.partitions": str(max(8, 2 * spark.sparkContext.defaultParallelism))}


def _local_environment() -> None:
    """Point PySpark's launcher at a Java 17 (never a newer default JDK), and its Python workers at
    this interpreter (local mode reads the environment, not only spark.pyspark.python)."""
    try:
        java = find_java()
    except DevnodeError as exc:
        raise PipelineError(str(exc).removeprefix("casque: ")) from None
    os.environ["JAVA_HOME"] = str(java.java_home)
    os.environ["PYSPARK_PYTHON"] = sys.executable


def _check_extensions(spark: Any) -> None:
    if EXTENSIONS not in (spark.conf.get("spark.sql.extensions", "") or ""):
        raise PipelineError(
            f"spark-submit without the connector's extensions: add --conf spark.sql.extensions={EXTENSIONS} "
            "(docs/pipeline.md)"
        )

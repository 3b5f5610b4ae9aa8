"""casque's data pipeline on Apache Spark (PySpark), imported as ``pipeline``.

Jobs, each runnable as ``casque pipeline <job>`` with a local Spark or by ``spark-submit`` on a
cluster (docs/pipeline.md):

* ``stats``: depth per shard and bucket, due / scheduled / in flight / poisoned, oldest due age and
  shard skew per queue (the definitions of ``casque stats``), plus per-task throughput, latency
  percentiles and failure rates from ``history``; Parquet, a JSON summary and an HTML report.
* ``load``: bulk enqueue from Parquet, CSV or JSON, every row validated, placed and written by the
  producer's own code inside Spark tasks; bad rows go to a reject output with their reason.
* ``archive``: history and poison rows older than a cut-off to Parquet by date, then (optionally)
  deleted once the written files were read back and matched.

Modules: ``jars`` (the connector, fetched once), ``session`` (SparkSession and Java 17), ``tables``
(connector reads), ``workers`` (the engine's client inside tasks), ``stats``/``tasks``/``report``,
``mapping``/``sender``/``load``, ``archive``, ``outputs``, ``progress``, ``cli``.
"""

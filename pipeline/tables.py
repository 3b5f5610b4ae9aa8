"""Reading casque's tables into Spark through the Cassandra connector.

Which tables: ``poison`` and ``history`` (append-mostly, read whole or by partition), and ``queues``.
Not ``messages``: a token-range scan of the shard rows walks every tombstone that consumers left
behind (up to gc_grace and compaction), which is exactly what the cursors exist to avoid, and on a
busy queue it trips Cassandra's tombstone limits; the live messages are read from their cursors by
the engine's own statements instead (``pipeline.stats``).

When a job names its queues, the partitions it needs are known, so the read is a *direct join*
(``directJoinSetting=on``): one single-partition query per key instead of a scan of the table.
"""

from __future__ import annotations

from typing import Any

from daemon.base.config import Settings

FORMAT = "org.apache.spark.sql.cassandra"


def read(spark: Any, settings: Settings, table: str, keys: Any = None) -> Any:
    """The table as a DataFrame; with ``keys`` (a DataFrame of its partition key columns) only
    those partitions, fetched by direct join."""
    df = spark.read.format(FORMAT).options(keyspace=settings.cassandra.keyspace, table=table)
    if keys is None:
        return df.load()
    cass = df.option("directJoinSetting", "on").load()
    return keys.join(cass, on=keys.columns, how="inner")


def exists(settings: Settings, table: str) -> bool:
    """Whether the keyspace has this table (history is optional: older schemas lack it)."""
    from . import workers

    cq = workers.client(settings)
    assert cq.db.cluster is not None
    ks = cq.db.cluster.metadata.keyspaces.get(settings.cassandra.keyspace)
    return ks is not None and table in ks.tables


def queue_names(spark: Any, settings: Settings, chosen: list[str] | None) -> list[str]:
    """The queues a job covers: the chosen ones (each must exist) or every queue in ``queues``."""
    from daemon.base.errors import QueueNotFound

    rows = read(spark, settings, "queues").select("name").collect()
    known = {r.name for r in rows}
    if not chosen:
        return sorted(known)
    missing = [q for q in chosen if q not in known]
    if missing:
        raise QueueNotFound(f"queue '{missing[0]}' does not exist: check the name ('casque queues' lists them)")
    return sorted(set(chosen))

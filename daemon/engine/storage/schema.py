"""The keyspace and tables, created idempotently by ``casque schema apply``.

Each table states why its compaction, TTL and gc_grace settings are what they are; docs/design.md
has the full data model and the lock protocol that runs on ``messages``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from daemon.base.config import SchemaSettings, Settings
from daemon.base.errors import ConfigError
from daemon.engine.storage.db import Database

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")
# Queue names are data (partition key values), never CQL identifiers: SQS's rule, 1-80 of A-Z a-z
# 0-9 _ -, so queues created over the SQS endpoint are ordinary casque queues.
# A FIFO queue's name ends in ".fifo", counted in the 80 (SQS's rule).
_QUEUE_NAME = re.compile(r"^(?=.{1,80}$)[A-Za-z0-9_-]+(\.fifo)?$")

#: How long a delete's tombstone is kept, on every table whose rows are deleted: Cassandra's hint window
#: (``max_hint_window``, 3 h by default). A replica that missed a delete gets it from a hint when it comes back
#: within that window; the hints of a write live only as long as its table's gc_grace, so a shorter gc_grace
#: drops them sooner, and once the tombstone is purged on the replicas that had it, the replica that missed it
#: brings the deleted row back (an acked message delivered again). A node down longer than the hint window is
#: repaired (``nodetool repair``) before it rejoins, Cassandra's own rule. Tables whose rows only expire (a
#: default TTL) keep a short gc_grace: every replica expires them on its own.
GC_GRACE_S = 3 * 3600
#: A keyspace with one replica has no other replica to miss a delete: its tombstones go after 5 minutes, so a
#: single dev node's churn is compacted away as it goes.
ONE_REPLICA_GC_GRACE_S = 300

TABLES: dict[str, str] = {
    # One row per queue: the settings every producer and consumer reads (Astyanax's createQueue).
    # Tiny and rarely written: default compaction, no TTL.
    "queues": """
        CREATE TABLE IF NOT EXISTS {ks}.queues (
            name text PRIMARY KEY,
            shards int, buckets int, bucket_seconds int,
            lock_ttl_ms int, timeout_ms int, max_attempts int, retention_s int, max_payload_bytes int,
            priorities set<int>,
            created_at bigint, updated_at bigint
        )""",
    # The shard rows. Partition = (queue, rolling time bucket, concurrency shard). Clustering:
    #   kind 0 = lock columns (due = lock time), kind 1 = messages (rank = -priority, due, id).
    # A message lives where it was sent for its whole life; it is marked in flight there, so "release lock +
    # mark taken in flight + check entry + cursor" is one single-partition (atomic) batch (engine/take/flights.py).
    # cursors (static): per rank, a due time before which every message is consumed; reads start
    # there, so tombstones of consumed messages are never scanned again (docs/design.md).
    # gc_grace_seconds: GC_GRACE_S, the hint window (above): a lost delete would deliver an acked message again.
    # Every write carries a TTL (due delay + retention), so nothing outlives retention.
    # UnifiedCompactionStrategy (5.0's default recommendation) keeps recent rows in few SSTables;
    # TWCS is for append-only data and would keep these deletes from ever meeting their rows.
    "messages": """
        CREATE TABLE IF NOT EXISTS {ks}.messages (
            queue text, bucket int, shard int,
            kind tinyint, rank smallint, due bigint, id uuid,
            cursors map<smallint, bigint> static,
            state tinyint,
            task text, payload blob, headers frozen<map<text, text>>,
            attempt int, max_attempts int, timeout_ms int,
            key text, trigger text, enqueued_at bigint, last_error text,
            PRIMARY KEY ((queue, bucket, shard), kind, rank, due, id)
        ) WITH gc_grace_seconds = {gc_grace}
          AND compaction = {{'class': 'UnifiedCompactionStrategy'}}
          AND comment = 'casque shard rows: lock columns, messages and timeout columns'""",
    # Lookup keys -> the message they name. Partition (queue, key_shard) spreads millions of keys
    # over 16 partitions per queue, so listing a queue's keys is 16 bounded reads, not a scan.
    # Keys are claimed and released with lightweight transactions (only keyed sends pay for them).
    "keys": """
        CREATE TABLE IF NOT EXISTS {ks}.keys (
            queue text, key_shard int, key text,
            id uuid, bucket int, shard int,
            task text, trigger text, created_at bigint, last_run bigint,
            PRIMARY KEY ((queue, key_shard), key)
        ) WITH gc_grace_seconds = {gc_grace}
          AND comment = 'casque lookup keys'""",
    # Messages that failed for good, with the reason. Read by people (list/show/replay), so one
    # partition per queue; TTL = the queue's retention keeps it bounded.
    "poison": """
        CREATE TABLE IF NOT EXISTS {ks}.poison (
            queue text, id uuid,
            poisoned_at bigint, task text, payload blob, headers frozen<map<text, text>>,
            attempt int, priority int, key text, trigger text,
            error_type text, error text, traceback text, reason text,
            PRIMARY KEY ((queue), id)
        ) WITH gc_grace_seconds = {gc_grace}
          AND comment = 'casque poison queue'""",
    # Each daemon's cumulative counters, written every 10 s (the "pipes" design's per-writer stats):
    # nothing is incremented per message on a shared row; readers sum the daemons. Append-only and
    # TTL'd, so TimeWindowCompactionStrategy drops whole expired SSTables; reads slice the newest
    # minutes (clustering DESC), never reaching expired cells.
    "daemon_stats": """
        CREATE TABLE IF NOT EXISTS {ks}.daemon_stats (
            queue text, at bigint, daemon text,
            received bigint, acked bigint, retried bigint, poisoned bigint, timed_out bigint,
            contention bigint, empty_polls bigint, in_flight int,
            PRIMARY KEY ((queue), at, daemon)
        ) WITH CLUSTERING ORDER BY (at DESC, daemon ASC)
          AND default_time_to_live = 86400
          AND gc_grace_seconds = 3600
          AND compaction = {{'class': 'TimeWindowCompactionStrategy',
                             'compaction_window_unit': 'HOURS', 'compaction_window_size': 1}}
          AND comment = 'casque per-daemon statistics snapshots'""",
    # One heartbeat row per running daemon (host:pid), rewritten every 10 s: what the console's
    # daemons page lists. Daemons are few, so one partition (slot 0) holds them all and listing is a
    # single read; the TTL drops a dead daemon's row an hour after its last heartbeat.
    "daemons": """
        CREATE TABLE IF NOT EXISTS {ks}.daemons (
            slot int, daemon text,
            host text, pid int, queues list<text>, concurrency int, in_flight int,
            started_at bigint, heartbeat bigint, version text,
            PRIMARY KEY ((slot), daemon)
        ) WITH default_time_to_live = 3600
          AND gc_grace_seconds = 3600
          AND comment = 'casque daemon heartbeats'""",
    # The first history layout (one partition per queue and UTC day): no longer written or read
    # (see message_history below); still created so that applying the schema never drops a table
    # with data in it. Its rows expire with their TTL.
    "history": """
        CREATE TABLE IF NOT EXISTS {ks}.history (
            queue text, day text, at bigint, id uuid, event text,
            task text, attempt int, duration_ms double, lateness_ms double, error text, key text,
            PRIMARY KEY ((queue, day), at, id, event)
        ) WITH gc_grace_seconds = {gc_grace}
          AND compaction = {{'class': 'TimeWindowCompactionStrategy',
                             'compaction_window_unit': 'DAYS', 'compaction_window_size': 1}}
          AND comment = 'casque message history'""",
    # Message history, partitioned by what it is read by: (queue, subject, UTC day), where the
    # subject is "id:<message id>", plus "key:<lookup key>" for a keyed message (written twice).
    # A partition holds one message's or one key's events of one day, so its size is bounded by
    # how often that one key runs, never by the queue's rate ('history' put a whole queue's day in
    # one partition: ~170M rows at 1,000 msg/s). ``casque history --key K`` reads one partition
    # per day asked. Append-only with a TTL of the queue's retention, so TWCS.
    "message_history": """
        CREATE TABLE IF NOT EXISTS {ks}.message_history (
            queue text, subject text, day text, at bigint, id uuid, event text,
            task text, attempt int, duration_ms double, lateness_ms double, error text, key text,
            PRIMARY KEY ((queue, subject, day), at, id, event)
        ) WITH gc_grace_seconds = {gc_grace}
          AND compaction = {{'class': 'TimeWindowCompactionStrategy',
                             'compaction_window_unit': 'DAYS', 'compaction_window_size': 1}}
          AND comment = 'casque message history by message and by key'""",
    # Duties that one daemon at a time performs (e.g. computing the queue gauges): a row per duty,
    # claimed and renewed with lightweight transactions; its TTL frees it when the holder dies.
    "leases": """
        CREATE TABLE IF NOT EXISTS {ks}.leases (
            name text PRIMARY KEY, holder text
        ) WITH gc_grace_seconds = {gc_grace}
          AND comment = 'casque single-holder duties'""",
    # Who listens for wake hints (engine/wake/hint_directory.py): one row per listening process, written
    # with a 15 s TTL and renewed every 5 s, so a dead listener is forgotten within seconds.
    # Listeners are few: one partition, read whole by each producer at most every few seconds.
    "hint_listeners": """
        CREATE TABLE IF NOT EXISTS {ks}.hint_listeners (
            slot int, address text,
            queues set<text>, host text, pid int, heartbeat bigint,
            PRIMARY KEY ((slot), address)
        ) WITH gc_grace_seconds = 300
          AND comment = 'casque wake-hint listeners'""",
    # FIFO deduplication (engine/send/fifo_send.py): a send claims its dedup id with an LWT
    # (IF NOT EXISTS), which every `casque serve` sees, for SQS's 5-minute window (the table's TTL).
    # The row names the message the id was first sent as (its id, position and write timestamp), and
    # `written` says that message was written: a retry after a crash between the claim and the write
    # writes it then, at the same timestamp, so it can never resurrect a message already deleted.
    # The row (queue, '', '') is the queue's purge mark (no dedup id is empty): ids claimed before it
    # are claimed again past it, their old row turned into a redirect (due -1; fifo_send.py).
    "fifo_dedup": """
        CREATE TABLE IF NOT EXISTS {ks}.fifo_dedup (
            queue text, scope text, dedup_id text,
            id uuid, due bigint, wt bigint, written boolean,
            PRIMARY KEY ((queue, scope, dedup_id))
        ) WITH default_time_to_live = 300 AND gc_grace_seconds = 300
          AND comment = 'casque FIFO deduplication ids, 5 minutes'""",
    # SQS ReceiveRequestAttemptId (engine/delivery/receive_attempts.py): the receipts a FIFO receive returned,
    # so a retried receive with the same attempt id gets the same messages, on any server.
    "receive_attempts": """
        CREATE TABLE IF NOT EXISTS {ks}.receive_attempts (
            queue text, attempt_id text, receipts list<text>,
            PRIMARY KEY ((queue, attempt_id))
        ) WITH default_time_to_live = 300 AND gc_grace_seconds = 300
          AND comment = 'casque FIFO receive attempts, 5 minutes'""",
    # Queues created with expire_after (engine/operations/reaper.py): one row each, so the sweeper pages through
    # only the queues that can expire, never the whole queues table. active_at is rewritten at most
    # once per queue every few minutes per process (a send or a receive).
    "queue_expiry": """
        CREATE TABLE IF NOT EXISTS {ks}.queue_expiry (
            name text PRIMARY KEY, expire_after_s int, active_at bigint
        ) WITH gc_grace_seconds = {gc_grace}
          AND comment = 'casque queues that expire when idle'""",
    # When each expiring queue can next expire (engine/queues/expiry_index.py): a row per queue at
    # the time (ms) its idle expiry falls due, partitioned by day, so the reaper reads only what is
    # now due. A row is a candidate, not a verdict: the reaper re-reads queue_expiry before deleting,
    # and moves the row on (one write) when the queue was used since. Day -1 holds the sweep's marker.
    "queue_expiry_due": """
        CREATE TABLE IF NOT EXISTS {ks}.queue_expiry_due (
            day int, due_at bigint, name text,
            PRIMARY KEY ((day), due_at, name)
        ) WITH gc_grace_seconds = {gc_grace}
          AND comment = 'casque expiring queues by the time they fall due'""",
    # The queues used lately (engine/cluster/activity.py): a row per queue and hour it was sent to,
    # received from or served in, rewritten at most every 10 minutes per process, in 16 partitions
    # per hour; read by the queue gauges (service/queue_gauges.py), so a round costs the queues
    # active in the last hour or two, not the queues that exist. Rows expire after 3 hours.
    "active_queues": """
        CREATE TABLE IF NOT EXISTS {ks}.active_queues (
            hour bigint, part int, name text,
            PRIMARY KEY ((hour, part), name)
        ) WITH default_time_to_live = 10800 AND gc_grace_seconds = 3600
          AND comment = 'casque queues used in the last hours'""",
    # The due feed (engine/wake/due_feed.py): a row per queue, second of due time and writing process, for every
    # announced write; a process with long polls parked reads the last seconds' partitions once a second, so a
    # message whose wake hint was lost is found without a read per queue. Rows expire 10 minutes after their second.
    "due_queues": """
        CREATE TABLE IF NOT EXISTS {ks}.due_queues (
            slot bigint, name text, writer bigint,
            PRIMARY KEY ((slot), name, writer)
        ) WITH gc_grace_seconds = 600
          AND comment = 'casque queues with something due, by second (lost wake hints)'""",
    # Secrets every server of a cluster must share, created once with an LWT: the key that signs
    # receipt handles (so a receipt issued by one `casque serve` is honoured by another, and none
    # can be forged). Tiny, never expires.
    "secrets": """
        CREATE TABLE IF NOT EXISTS {ks}.secrets (
            name text PRIMARY KEY, value blob, created_at bigint
        ) WITH comment = 'casque shared secrets (receipt signing key)'""",
    # Access keys for the SQS endpoint's SigV4 verification. SigV4 is an HMAC, so the server needs
    # the secret itself (not a hash of it): restrict who can read this table (docs/security.md).
    "access_keys": """
        CREATE TABLE IF NOT EXISTS {ks}.access_keys (
            access_key_id text PRIMARY KEY, secret text, description text, created_at bigint
        ) WITH comment = 'casque SQS access keys (SigV4)'""",
    # SQS message move tasks (engine/cluster/move_tasks.py): one partition per source queue, newest first,
    # as ListMessageMoveTasks reads them. Every write is the whole row with a TTL counted from the
    # task's start, so a task is forgotten 14 days after it started, as SQS keeps them.
    # cancel_requested is written by CancelMessageMoveTask only (never by the runner's progress
    # writes), so a cancel can't be overwritten by a progress write racing it.
    "move_tasks": """
        CREATE TABLE IF NOT EXISTS {ks}.move_tasks (
            source text, started_at bigint, task_id uuid,
            destination text, rate int, status text, moved bigint, to_move bigint, failure text, updated_at bigint,
            cancel_requested boolean,
            PRIMARY KEY ((source), started_at, task_id)
        ) WITH CLUSTERING ORDER BY (started_at DESC, task_id ASC)
          AND gc_grace_seconds = {gc_grace}
          AND comment = 'casque SQS message move tasks'""",
    # The active move task of each source queue (at most one: claimed with an LWT on the source's
    # row), in one partition (slot 0) that every `casque serve` lists to find tasks to run. Rows
    # are few (active tasks only) and deleted when their task ends.
    "move_tasks_active": """
        CREATE TABLE IF NOT EXISTS {ks}.move_tasks_active (
            slot int, source text, started_at bigint, task_id uuid,
            PRIMARY KEY ((slot), source)
        ) WITH gc_grace_seconds = {gc_grace}
          AND comment = 'casque SQS move tasks not yet ended'""",
    # Queue names by prefix (engine/queues/names.py): partition = the name's first 2 characters,
    # clustered by name, so ListQueues with a QueueNamePrefix reads one name range, however many
    # queues there are. One plain write per created queue (no LWT), one delete per deleted queue.
    "queue_names": """
        CREATE TABLE IF NOT EXISTS {ks}.queue_names (
            prefix text, name text,
            PRIMARY KEY ((prefix), name)
        ) WITH gc_grace_seconds = {gc_grace}
          AND comment = 'casque queue names by prefix (ListQueues)'""",
    # Dead-letter queue -> the queues whose RedrivePolicy names it (engine/queues/dead_letter_sources.py):
    # ListDeadLetterSourceQueues and StartMessageMoveTask's "is it a dead-letter queue" read one
    # partition. Written when a RedrivePolicy is set, changed or removed and when a queue is deleted.
    "dead_letter_sources": """
        CREATE TABLE IF NOT EXISTS {ks}.dead_letter_sources (
            target text, source text,
            PRIMARY KEY ((target), source)
        ) WITH gc_grace_seconds = {gc_grace}
          AND comment = 'casque dead-letter queue -> its source queues'""",
}

#: Indexes filled from the queues table when ``casque schema apply`` creates them on a keyspace that
#: already has queues (engine/queues/index_backfill.py).
BACKFILLED = ("queue_names", "dead_letter_sources")

# Columns added after a table's first release: applied with ALTER TABLE, "already exists" ignored.
MIGRATIONS: list[tuple[str, str, str]] = [
    ("queues", "history", "boolean"),
    (
        "queues",
        "draining",
        "text",
    ),  # JSON [[shards, buckets, bucket_seconds], ...]: layouts still draining after a reshard
    # Depth samples (every 60 s) for the console's one-hour chart and its sent/s estimate.
    ("daemon_stats", "depth_waiting", "int"),
    ("daemon_stats", "depth_scheduled", "int"),
    ("daemon_stats", "depth_in_flight", "int"),
    # SQS queue attributes with no casque equivalent (DelaySeconds, RedrivePolicy, ...) and tags.
    ("queues", "attributes", "map<text, text>"),
    ("queues", "tags", "map<text, text>"),
    # kind 2 rows ("moved" markers): a FIFO visibility change rewrites the message; the marker at its position
    # names the delivery (engine/delivery/settle.py). On kind 1: a check entry's range start (engine/take/flights.py).
    ("messages", "moved_to", "bigint"),
    # Idle expiry: seconds without a send or receive after which the queue is deleted (0: never).
    ("queues", "expire_after_s", "int"),
    # SQS key grants (engine/access/grants.py): the actions and queue globs a key may use; null: full access.
    ("access_keys", "grant_actions", "list<text>"),
    ("access_keys", "grant_queues", "list<text>"),
    # FIFO queues: their options as JSON (null: a standard queue), and a FIFO message's in-place
    # in-flight state: when it becomes visible again (engine/take/fifo.py).
    ("queues", "fifo", "text"),
    ("messages", "visible_at", "bigint"),
    # Queue creation's claims (engine/queues/bulk_create.py): TTL'd ids of creators about to write
    # the row, so creators race with plain writes and still never both create one name.
    ("queues", "claims", "set<uuid>"),
    # "in_place" in every queue row created since the copy layout went (engine/take/flights.py); a standard queue
    # whose row has null or "copy" is a copy-layout queue, refused (engine/queues/store.py, ``CopyLayoutQueue``).
    ("queues", "in_flight", "text"),
    # The lock TTL before its last change, and when (engine/take/row_lock.py ``lock_read_back_ms``).
    ("queues", "lock_ttl_before_ms", "int"),
    ("queues", "lock_ttl_changed_at", "bigint"),
    # Who consumes the queue: push, pull or both (null: push until pulled; QueueSettings.consumers).
    ("queues", "consumers", "text"),
    # A due-feed entry that says the queue's row was written: readers forget their copy (engine/wake/due_feed.py).
    ("due_queues", "changed", "boolean"),
]


def validate_name(name: str, what: str = "keyspace") -> str:
    if not _NAME.match(name):
        raise ConfigError(
            f"invalid {what} name {name!r}: use letters, digits and '_' (at most 48, starting with a letter)"
        )
    return name


def validate_queue_name(name: str) -> str:
    if not isinstance(name, str) or not _QUEUE_NAME.match(name):
        raise ConfigError(
            f"invalid queue name {name!r}: use 1-80 letters, digits, '-' and '_' (a FIFO queue's ends in '.fifo')"
        )
    return name


def replication_map(settings: SchemaSettings) -> str:
    """The CQL replication map from config: SimpleStrategy for dev, NetworkTopologyStrategy in production."""
    if settings.replication_class == "SimpleStrategy":
        if settings.replication_factor < 1:
            raise ConfigError("schema.replication_factor must be at least 1")
        return f"{{'class': 'SimpleStrategy', 'replication_factor': {settings.replication_factor}}}"
    if not settings.datacenters:
        raise ConfigError(
            "schema.datacenters must name each datacenter and its replica count for NetworkTopologyStrategy, e.g. "
            "{dc1 = 3}"
        )
    dcs = ", ".join(f"'{validate_name(dc, 'datacenter')}': {rf}" for dc, rf in sorted(settings.datacenters.items()))
    return f"{{'class': 'NetworkTopologyStrategy', {dcs}}}"


def apply_schema(
    db: Database,
    keyspace: str,
    settings: SchemaSettings,
    backfill: Callable[[Database, str, list[str]], object] | None = None,
) -> list[str]:
    """Create the keyspace and every table if missing. Safe to run any number of times.

    ``backfill(db, keyspace, tables)``: fills the indexes this run created on a keyspace that already has queues
    (engine/queues/index_backfill.py ``backfill``; ``casque schema apply`` passes it in, the queues being above the
    storage). None: only the queues created from now on enter them."""
    ks = validate_name(keyspace)
    db.execute(f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {replication_map(settings)}")
    gc_grace = GC_GRACE_S if replicas(db, ks) > 1 else ONE_REPLICA_GC_GRACE_S
    statements = [" ".join(cql.format(ks=ks, gc_grace=gc_grace).split()) for cql in TABLES.values()]
    had = _tables(db, ks)
    for cql in statements:
        db.execute(cql)
    for table, column, ctype in MIGRATIONS:
        _add_column(db, ks, table, column, ctype)
    _align_gc_grace(db, ks, statements)
    assert db.cluster is not None
    db.cluster.control_connection.wait_for_schema_agreement()
    new_indexes = [t for t in BACKFILLED if t not in had]
    if new_indexes and "queues" in had and backfill is not None:  # an existing keyspace: its queues enter them once
        backfill(db, ks, new_indexes)
    return [f"{ks}.{name}" for name in TABLES]


def replicas(db: Database, ks: str) -> int:
    """How many replicas the keyspace keeps of each row, in all its datacenters (as it exists, not as configured)."""
    row = db.execute("SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s", [ks]).one()
    return sum(int(str(v).split("/")[0]) for k, v in row.replication.items() if k != "class")  # "3/1": transient


def _tables(db: Database, ks: str) -> set[str]:
    return {
        r.table_name for r in db.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", [ks])
    }


def _align_gc_grace(db: Database, ks: str, statements: list[str]) -> None:
    """A table created by an older casque keeps the gc_grace it was created with: set the one its CQL states."""
    wanted = {}
    for cql in statements:
        found = re.search(rf"TABLE IF NOT EXISTS {ks}\.(\w+) .* gc_grace_seconds = (\d+)", cql)
        if found:
            wanted[found[1]] = int(found[2])
    rows = db.execute("SELECT table_name, gc_grace_seconds FROM system_schema.tables WHERE keyspace_name = %s", [ks])
    for r in rows:
        if r.table_name in wanted and r.gc_grace_seconds != wanted[r.table_name]:
            db.execute(f"ALTER TABLE {ks}.{r.table_name} WITH gc_grace_seconds = {wanted[r.table_name]}")


def _add_column(db: Database, ks: str, table: str, column: str, ctype: str) -> None:
    existing = db.execute(
        "SELECT column_name FROM system_schema.columns WHERE keyspace_name = %s AND table_name = %s AND "
        "column_name = %s",
        [ks, table, column],
    )
    if not list(existing):
        db.execute(f"ALTER TABLE {ks}.{table} ADD {column} {ctype}")


def ensure_schema(
    settings: Settings, backfill: Callable[[Database, str, list[str]], object] | None = None
) -> list[str]:
    """``apply_schema`` to the settings' keyspace over a connection of its own, closed after: for a process that has
    none yet (``casque schema apply``, the demo, the suite's and the bench's setups)."""
    db = Database(settings.cassandra).connect()
    try:
        return apply_schema(db, settings.cassandra.keyspace, settings.schema, backfill=backfill)
    finally:
        db.close()

"""The ``messages`` table: every CQL statement that touches shard rows, and row <-> Message.

The producer, consumer, acks and admin code all go through here, so the column list, the TTL rule
and the "never write a null" rule live in one place. Writing a null is writing a tombstone, so
absent optional columns are sent as UNSET; headers are a frozen map, so an insert writes no
collection tombstone either.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cassandra import cqltypes, marshal
from cassandra.query import UNSET_VALUE, BoundStatement, PreparedStatement

from daemon.base.model import Message, QueueSettings, decode_payload
from daemon.engine.storage.db import Database
from daemon.engine.storage.stored_trigger import parse_stored

#: Row kinds: 0 lock columns, 1 messages, 2 "moved" markers, 3 a FIFO group's tail (engine/send/fifo_send.py: the
#: last position written for the group).
KIND_MESSAGE, KIND_MOVED = 1, 2
#: The anchor row (kind -1, sorts before every other row): see ``write_anchor``.
KIND_ANCHOR = -1
#: BACKOFF: a standard queue's message a handler failed, waiting for its retry where it is (engine/take/flights.py).
STATE_WAITING, STATE_IN_FLIGHT, STATE_BACKOFF = 0, 1, 2
LOCK_PENDING, LOCK_ACQUIRED = 0, 1
MAX_TTL = 630_720_000  # Cassandra's ceiling: 20 years

_PK = "queue = ? AND bucket = ? AND shard = ?"
_NIL = "00000000-0000-0000-0000-000000000000"  # the anchor row's id
_MSG_COLS = (
    "rank, due, id, state, task, payload, headers, attempt, max_attempts, timeout_ms, key, trigger, enqueued_at, "
    "last_error, visible_at"
)
# WRITETIME lets a take or an ack write *after* the row it replaces even when the writer's clock
# lags the producer's (a delete with an older timestamp than the insert would silently lose).
_SELECT = _MSG_COLS + ", WRITETIME(task) AS wt"
# A standard queue's rows (engine/take/flights.py): a message's newest write is the narrow update that put it in
# flight, which always writes ``state``; a check entry is told apart by ``moved_to`` (the start of its range).
_IN_PLACE_SELECT = _MSG_COLS + ", moved_to, WRITETIME(state) AS wt"
#: Filtered reads of a standard queue's lane see only what is waiting (messages and check entries, state 0): a
#: message in flight stays where it was sent, and is found through its check entry, never by a read from the cursor.
_WAITING = "AND state = 0"
_LANE = f"{_PK} AND kind = 1 AND rank = ?"


@dataclass(frozen=True)
class LaneReads:
    """The reads that look for what is due in a lane: a standard queue's set (filtered) and a FIFO queue's."""

    peek: PreparedStatement
    read_due: PreparedStatement
    peek_after: PreparedStatement
    read_due_after: PreparedStatement
    peek_rows: PreparedStatement
    read_below: PreparedStatement  # the sweep's (engine/consume/sweep.py)


def _lane_reads(prepare: Callable[[str], PreparedStatement], t: str, cols: str, below: str, waiting: bool) -> LaneReads:
    """The reads of a lane for one place of messages in flight: ``cols`` the columns of a message read, ``below`` the
    sweep's; ``waiting``: filtered to waiting rows (a standard queue's). ``*_after`` read from just after a (due, id)
    position, not from the cursor: a daemon sharing the queue with pull readers reads past the messages it left them
    (engine/consume/consumer.py ``accepts``), and a drain past its frontier. ``peek_rows`` is an empty receive's look
    (engine/delivery/idle_look.py): the first message of every row it names, from one lower bound, in one request.
    ``read_below`` is the sweep's (engine/consume/sweep.py): a stretch below a cursor with the cursors *from the same
    read*, so a take batch (cursor move + deletes, atomic per replica) is seen whole or not at all."""
    lane = _LANE
    only, allow = (f" {_WAITING}", " ALLOW FILTERING") if waiting else ("", "")
    span, after = "due >= ? AND due <= ?", "(due, id) > (?, ?) AND (due) <= (?)"
    rows = "queue = ? AND bucket IN ? AND shard IN ? AND kind = 1 AND rank IN ?"
    return LaneReads(
        peek=prepare(f"SELECT due FROM {t} WHERE {lane} AND {span}{only} LIMIT 1{allow}"),
        read_due=prepare(f"SELECT {cols} FROM {t} WHERE {lane} AND {span}{only} LIMIT ?{allow}"),
        peek_after=prepare(f"SELECT due FROM {t} WHERE {lane} AND {after}{only} LIMIT 1{allow}"),
        read_due_after=prepare(f"SELECT {cols} FROM {t} WHERE {lane} AND {after}{only} LIMIT ?{allow}"),
        peek_rows=prepare(
            f"SELECT bucket, shard, rank, due FROM {t} WHERE {rows} AND {span}{only} PER PARTITION LIMIT 1{allow}"
        ),
        read_below=prepare(
            f"SELECT cursors, {below} FROM {t} WHERE {lane} AND due >= ? AND due < ?{only} LIMIT ?{allow}"
        ),
    )


def after(*write_ts: int, now_us: int) -> int:
    """A write timestamp later than every given one and not before ``now_us``."""
    return max([now_us] + [t + 1 for t in write_ts])


def ttl_for(due_ms: int, now_ms: int, retention_s: int) -> int:
    """A row lives until it is due plus the queue's retention, so nothing outlives retention."""
    return min(MAX_TTL, max(1, math.ceil((due_ms - now_ms) / 1000)) + retention_s)


def _opt(value: Any) -> Any:
    return UNSET_VALUE if value is None or value == {} else value


#: Serializers of the column types the hot statements bind, as one-argument C functions: the same bytes as the
#: driver's ``serialize`` of each type (tests/test_binder.py compares them), without a Python-level call per value.
_FAST_SERIALIZE: dict[type, Callable[[Any], bytes]] = {
    cqltypes.UTF8Type: str.encode,
    cqltypes.Int32Type: marshal.int32_pack,
    cqltypes.LongType: marshal.int64_pack,
    cqltypes.ByteType: marshal.int8_pack,
    cqltypes.ShortType: marshal.int16_pack,
    cqltypes.UUIDType: operator.attrgetter("bytes"),
    cqltypes.BytesType: bytes,
}


def _serializer(col_type: Any, proto: int) -> Callable[[Any], bytes]:
    fast = _FAST_SERIALIZE.get(col_type)
    return fast if fast is not None else functools.partial(col_type.serialize, protocol_version=proto)


class Binder:
    """Binds one prepared statement for the hot path (a take's and an ack's per-message statements).

    The driver's ``bind`` builds a column descriptor and asks the encryption policy about every value before
    serializing it, and its constructor copies a dozen settings from the prepared statement one by one, for every
    message a take or an ack writes. Here each column's serializer is chosen
    once, and a statement is an instance of a subclass of the driver's ``BoundStatement`` whose settings are class
    attributes, copied once from one the driver built (the same values, read the same way): an instance sets only
    its values. The values are the engine's own (typed by Message), so the driver's per-value type check has
    nothing to catch that the node would not refuse too; no column encryption policy is ever configured
    (engine/storage/db.py). An UNSET (``_opt``) or a None stays what the driver would send."""

    __slots__ = ("prepared", "_serialize", "_cls")

    def __init__(self, prepared: PreparedStatement) -> None:
        self.prepared = prepared
        proto = prepared.protocol_version
        self._serialize = [_serializer(c.type, proto) for c in prepared.column_metadata]

        class HotBoundStatement(BoundStatement):
            pass

        for name, value in BoundStatement(prepared).__dict__.items():
            if name != "values":
                setattr(HotBoundStatement, name, value)
        self._cls = HotBoundStatement

    def bind(self, values: list[Any]) -> BoundStatement:
        bound = self._cls.__new__(self._cls)
        bound.raw_values = values
        bound.values = [v if v is UNSET_VALUE or v is None else ser(v) for ser, v in zip(self._serialize, values)]
        return bound


class MessageTable:
    """Prepared statements on ``messages`` for one keyspace."""

    def __init__(self, db: Database, keyspace: str) -> None:
        self.db = db
        t = f"{keyspace}.messages"
        p = db.prepare
        self.insert = p(
            f"INSERT INTO {t} (queue, bucket, shard, kind, {_MSG_COLS}) VALUES "
            "(?,?,?,1,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) USING TTL ?"
        )
        self.delete = p(f"DELETE FROM {t} WHERE {_PK} AND kind = 1 AND rank = ? AND due = ? AND id = ?")
        self._insert, self._delete = Binder(self.insert), Binder(self.delete)
        # A FIFO queue's lane reads: unfiltered (engine/take/fifo.py reads its groups' messages in flight too).
        self.fifo_reads = _lane_reads(p, t, _SELECT, f"moved_to, {_SELECT}", waiting=False)
        r = self.fifo_reads
        self.peek, self.read_due, self.peek_after, self.read_due_after = (
            r.peek,
            r.read_due,
            r.peek_after,
            r.read_due_after,
        )
        self.peek_rows, self.read_below = r.peek_rows, r.read_below
        self.read_rank = p(
            f"SELECT moved_to, {_SELECT} FROM {t} WHERE {_PK} AND kind = 1 AND rank = ? AND due >= ? LIMIT ?"
        )
        self.read_id = p(f"SELECT {_SELECT} FROM {t} WHERE {_PK} AND kind = 1 AND id = ? ALLOW FILTERING")
        # A receipt's position: the message (kind 1) and, on a FIFO queue whose message's visibility was changed,
        # the "moved" marker (kind 2) naming the delivery (engine/delivery/settle.py).
        self.read_at = p(
            f"SELECT kind, moved_to, {_SELECT} FROM {t} WHERE {_PK} AND kind IN (1, 2) AND rank = ? AND due = ? "
            "AND id = ?"
        )
        self.unmark_moved = p(f"DELETE FROM {t} WHERE {_PK} AND kind = 2 AND rank = ? AND due = ? AND id = ?")
        counted = "cursors, state, due, visible_at, moved_to, task"  # a count's columns: no payload
        self.count_from = p(f"SELECT {counted} FROM {t} WHERE {_PK} AND kind = 1 AND rank = ? AND due >= ?")
        # The bounded depth estimate (engine/observe/depth_estimate.py): a lane's first rows from its cursor.
        self.count_head = p(f"SELECT {counted} FROM {t} WHERE {_PK} AND kind = 1 AND rank = ? AND due >= ? LIMIT ?")
        self.set_cursor = p(f"UPDATE {t} SET cursors[?] = ? WHERE {_PK}")
        self.read_cursors = p(f"SELECT cursors FROM {t} WHERE {_PK} LIMIT 1")
        # A live row that sorts before every other row of the partition, written by a row's first take in
        # each process (engine/take/step.py): the cursor reads above (``LIMIT 1``, ``DISTINCT``) read the
        # static column and stop at the first live row, so without it they scanned every tombstone a drained
        # row holds (a 1 x 1 queue keeps all of them in one partition: READ_TOO_MANY_TOMBSTONES at 100,000).
        self.write_anchor = p(
            f"INSERT INTO {t} (queue, bucket, shard, kind, rank, due, id) VALUES (?,?,?,{KIND_ANCHOR},0,0,{_NIL})"
        )
        # The cursors of every bucket row of one shard in one request (the coordinator reads the
        # partitions in parallel): a cold consumer's first look at a queue (engine/delivery/receive.py).
        self.read_shard_cursors = p(
            f"SELECT DISTINCT queue, bucket, shard, cursors FROM {t} WHERE queue = ? AND bucket IN ? AND shard = ?"
        )
        self.lock_write = p(
            f"INSERT INTO {t} (queue, bucket, shard, kind, rank, due, id, state) VALUES (?,?,?,0,0,?,?,?) USING TTL ?"
        )
        self.lock_read = p(
            f"SELECT due, id, state, cursors FROM {t} WHERE {_PK} AND kind = 0 AND rank = 0 AND due >= ?"
        )
        self.lock_delete = p(f"DELETE FROM {t} WHERE {_PK} AND kind = 0 AND rank = 0 AND due = ? AND id = ?")
        self.purge_row = p(f"DELETE FROM {t} WHERE {_PK}")
        # A FIFO group's tail (kind 3, id = the group's tail id): the highest position written for the
        # group, kept by Cassandra's last-write-wins with the position as the write timestamp.
        self.read_tail = p(f"SELECT enqueued_at FROM {t} WHERE {_PK} AND kind = 3 AND rank = 0 AND due = 0 AND id = ?")
        self.write_tail = p(
            f"INSERT INTO {t} (queue, bucket, shard, kind, rank, due, id, enqueued_at) VALUES (?,?,?,3,0,0,?,?) "
            "USING TIMESTAMP ? AND TTL ?"
        )
        # A FIFO send's reservation of its position (engine/send/fifo_send.py): the message's own key, no task; the
        # message's write replaces it, and its delete removes both.
        self.reserve = p(
            f"INSERT INTO {t} (queue, bucket, shard, kind, rank, due, id) VALUES (?,?,?,1,0,?,?) USING TTL ?"
        )
        # Deletes from receipts (engine/delivery/settle.py ``delete_batch``): the messages' attempts (a standard
        # queue's) or the moved markers and the messages' visibility (a FIFO queue's) of many receipts in one read
        # (their rows by IN, their positions by a multi-column IN: a cartesian product of which only the receipts'
        # own positions can exist), a marker that names the delivery it belongs to (its attempt), and a delete of
        # one position at a given write timestamp.
        self.read_marks = p(
            "SELECT kind, bucket, shard, rank, due, id, attempt, state, visible_at, moved_to, "
            f"WRITETIME(moved_to) AS wt FROM {t} "
            "WHERE queue = ? AND bucket IN ? AND shard IN ? AND (kind, rank, due, id) IN ?"
        )
        self.mark_moved_by = p(
            f"INSERT INTO {t} (queue, bucket, shard, kind, rank, due, id, moved_to, attempt) VALUES "
            "(?,?,?,2,?,?,?,?,?) USING TTL ?"
        )
        self.delete_at = p(
            f"DELETE FROM {t} USING TIMESTAMP ? WHERE {_PK} AND kind = ? AND rank = ? AND due = ? AND id = ?"
        )

        self._prepare_in_place(t)

    def _prepare_in_place(self, t: str) -> None:
        """A standard queue's statements (engine/take/flights.py): filtered reads of what waits, the read of a
        check entry's range, the narrow in-flight update and the check entry's insert."""
        p = self.db.prepare
        lane = _LANE
        self.in_place_reads = _lane_reads(p, t, _IN_PLACE_SELECT, _IN_PLACE_SELECT, waiting=True)
        self.read_range = p(f"SELECT {_IN_PLACE_SELECT} FROM {t} WHERE {lane} AND due >= ? AND due <= ? LIMIT ?")
        # The counts (engine/observe/behind.py): the messages in flight or in backoff of a stretch behind the cursor.
        self.count_flights = p(
            f"SELECT state, due, visible_at, moved_to, task FROM {t} WHERE {lane} AND due >= ? AND due <= ? "
            "AND state IN (1, 2) ALLOW FILTERING"
        )
        self.read_range_after = p(
            f"SELECT {_IN_PLACE_SELECT} FROM {t} WHERE {lane} AND (due, id) > (?, ?) AND (due) <= (?) LIMIT ?"
        )
        self._update_flight = Binder(
            p(
                f"UPDATE {t} USING TTL ? SET state = ?, attempt = ?, visible_at = ?, headers = ?, trigger = ?, "
                f"last_error = ? WHERE {lane} AND due = ? AND id = ?"
            )
        )
        self._insert_entry = Binder(
            p(
                f"INSERT INTO {t} (queue, bucket, shard, kind, rank, due, id, state, moved_to, visible_at, key) "
                "VALUES (?,?,?,1,?,?,?,0,?,?,?) USING TTL ?"
            )
        )

    def reads(self, qs: QueueSettings) -> LaneReads:
        """The lane reads of this queue: a standard queue's filtered to what waits, a FIFO queue's whole."""
        return self.fifo_reads if qs.fifo else self.in_place_reads

    def update_in_flight(self, m: Message, now_ms: int, retention_s: int, pulled: bool = False) -> BoundStatement:
        """Bind the narrow write of a standard queue's message's delivery state at its own position (``m.copy_due_ms``):
        state, attempt, ``visible_at``, last error, and its trigger (a schedule's successor is recorded there) and
        headers (a receive's times) when it has them. Never the payload."""
        position = m.copy_due_ms if m.copy_due_ms is not None else m.due_ms
        visible = m.visible_at if m.visible_at is not None else position
        return self._update_flight.bind(
            [
                ttl_for(max(position, visible), now_ms, retention_s),
                m.state,
                m.attempt,
                visible,
                _opt(m.headers) if pulled else UNSET_VALUE,
                _opt(json.dumps(m.trigger) if m.trigger else None),
                _opt(m.last_error),
                m.queue,
                m.bucket,
                m.shard,
                m.rank,
                position,
                m.id,
            ]
        )

    def insert_entry(
        self,
        m: Message | Any,
        rank: int,
        due_ms: int,
        entry_id: uuid.UUID,
        lo: int,
        hi: int,
        now_ms: int,
        retention_s: int,
        after_id: uuid.UUID | None = None,
    ) -> BoundStatement:
        """Bind a check entry of a standard queue's lane: at ``due_ms``, look at positions [lo, hi] of lane ``rank``
        (engine/take/flights.py), or only those after (lo, ``after_id``): a range a scan did not finish, whose
        last row read may share its due time with many. ``m`` names the row (anything with queue, bucket, shard)."""
        return self._insert_entry.bind(
            [
                m.queue,
                m.bucket,
                m.shard,
                rank,
                due_ms,
                entry_id,
                lo,
                hi,
                UNSET_VALUE if after_id is None else str(after_id),
                ttl_for(due_ms, now_ms, retention_s),
            ]
        )

    def insert_escape(
        self, row: Any, rank: int, position: int, message_id: uuid.UUID, due_ms: int, now_ms: int, retention_s: int
    ) -> BoundStatement:
        """Bind an escape: the check entry of one in-place message (at ``position``), due at ``due_ms``, with the id
        derived from the message's (``escape_id``). ``row`` names the row (queue, bucket, shard)."""
        return self.insert_entry(row, rank, due_ms, escape_id(message_id), position, position, now_ms, retention_s)

    def insert_message(self, m: Message, now_ms: int, retention_s: int) -> BoundStatement:
        """Bind an INSERT of ``m`` at its current position (``m.due_ms``) and state."""
        return self._insert.bind(
            [
                m.queue,
                m.bucket,
                m.shard,
                m.rank,
                m.due_ms,
                m.id,
                m.state,
                m.task,
                m.raw_payload,
                _opt(m.headers),
                m.attempt,
                m.max_attempts,
                m.timeout_ms,
                _opt(m.key),
                _opt(json.dumps(m.trigger) if m.trigger else None),
                m.enqueued_at,
                _opt(m.last_error),
                _opt(m.visible_at),
                ttl_for(m.due_ms if m.visible_at is None else max(m.due_ms, m.visible_at), now_ms, retention_s),
            ]
        )

    def delete_message(self, m: Message, due_ms: int) -> BoundStatement:
        return self._delete.bind([m.queue, m.bucket, m.shard, m.rank, due_ms, m.id])

    def delete_row(self, queue: str, bucket: int, shard: int, r: Any) -> BoundStatement:
        """Bind the delete of a read row of a lane (anything with rank, due, id): a standard queue's check entry
        or ghost (engine/take/flights.py)."""
        return self._delete.bind([queue, bucket, shard, r.rank, r.due, r.id])


_ESCAPE = 1 << 127  # a standard queue's message's escape entries (engine/take/flights.py)


def escape_id(message_id: uuid.UUID) -> uuid.UUID:
    """The id of a message's escape entries: derived from its own, so escapes of one message at one time are one row,
    and never equal to a message's id (a read by id finds the message alone)."""
    return uuid.UUID(int=message_id.int ^ _ESCAPE)


def is_entry(r: Any) -> bool:
    """A check entry: no task, a range."""
    return r.task is None and getattr(r, "moved_to", None) is not None


def is_ghost(r: Any) -> bool:
    """What an older delivery's delete left of a message (module docstring), or a row no writer of ours makes."""
    return r.task is None and getattr(r, "moved_to", None) is None


def message_from_row(queue: str, bucket: int, shard: int, r: Any) -> Message:
    """Build a Message from a stored row. A row whose columns can't be decoded is still returned,
    with ``corrupt`` saying why, so the consumer can poison it instead of looping on it."""
    m = Message(
        queue=queue,
        id=r.id,
        task=r.task or "",
        payload=None,
        bucket=bucket,
        shard=shard,
        priority=-r.rank,
        due_ms=r.due,
        attempt=r.attempt or 0,
        max_attempts=r.max_attempts or 0,
        timeout_ms=r.timeout_ms or 0,
        headers=dict(r.headers or {}),
        key=r.key,
        enqueued_at=r.enqueued_at or 0,
        last_error=r.last_error,
        state=r.state or 0,
        raw_payload=r.payload,
        write_ts=r.wt or 0,
        visible_at=r.visible_at,
    )
    try:
        m.payload = decode_payload(r.payload)
        m.trigger = json.loads(r.trigger) if r.trigger else None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        m.corrupt = f"stored payload or trigger is not valid JSON: {exc}"
    if m.trigger is not None and not m.corrupt:
        try:
            parse_stored(m.trigger)
        except ValueError as exc:
            m.corrupt = str(exc)
    if not m.task:
        m.corrupt = m.corrupt or "stored message has no task name"
    return m


def all_rows(qs: QueueSettings) -> Iterable[tuple[int, int]]:
    """Every (bucket, shard) row of a queue, in its current layout and any layout still draining
    after a reshard: bounded by buckets x shards per layout, never a table scan."""
    seen: set[tuple[int, int]] = set()
    for shards, buckets, _ in qs.layouts():
        for bucket in range(buckets):
            for shard in range(shards):
                if (bucket, shard) not in seen:
                    seen.add((bucket, shard))
                    yield bucket, shard


def lock_ttl_seconds(qs: QueueSettings) -> int:
    """The lock column's TTL. Cassandra counts a TTL from the coordinator's *whole* second
    (``now_in_sec + ttl``), so a column written at x.9 s dies up to 1 s early; one second more
    makes it live at least ``lock_ttl_ms``, which the consumer's expiry check relies on."""
    return math.ceil(qs.lock_ttl_ms / 1000) + 1

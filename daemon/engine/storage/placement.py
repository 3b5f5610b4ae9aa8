"""Where a message lives: functions of their arguments (``new_id`` also counts), unit-tested without a database.

A message id is a UUIDv7-layout UUID whose 48-bit millisecond field is the message's *original* due
time. Its row is a pure function of the id and the queue's settings:

    bucket = (due_ms // bucket_ms) mod buckets     (the rolling time bucket)
    shard  = (low 32 bits of the id)  mod shards   (the concurrency shard)

Id layout (128 bits): 48 due ms | 4 version (7) | 12 unique | 2 variant | 30 unique | 32 placement.
The 32 "placement" bits are random for a plain message, and so are its 42 "unique" bits, except that the ids a
process makes for one due millisecond count up from the first (``new_id``), so a row returns them in the order
made: one SQS SendMessageBatch's messages come back in send order, SQS's best-effort order. The occurrences of
a schedule keep the origin's due field and placement bits (so they all live in its row) and number
themselves in the unique bits (so they are distinct and deterministic).

Both are computed on non-negative integers, so a shard or bucket is never negative (Astyanax used
``key.hashCode() % n``, which is negative for half the keys, and those messages were never read,
issue #407). Because the row follows from the id, "read/delete by id" needs no index, and the Spark
pipeline places rows exactly as the producer does by calling these same functions.
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
import zlib

MAX_MS = (1 << 48) - 1
KEY_SHARDS = 16


UNIQUE_BITS = 42
PLACEMENT_MASK = 0xFFFF_FFFF


#: (due ms, unique bits) of the last random id this process made, under its lock (``new_id``).
_last = [-1, 0]
_last_lock = threading.Lock()


def new_id(due_ms: int, seed: bytes | None = None, placement: int | None = None) -> uuid.UUID:
    """A UUIDv7-layout id carrying ``due_ms``. With ``seed`` the id is deterministic: the same
    (queue, key, first fire) always gives the same id, so a duplicate insert overwrites one cell.
    ``placement``: the 32 placement bits to use instead of random ones (messages sent together that
    should share a row, ``placements``). Without a seed, an id due in the same millisecond as this
    process's last one has the next unique bits (RFC 9562's monotonic counter): a row orders ids of one
    due time by their bits, so what is sent together comes back in the order sent."""
    rand = hashlib.blake2b(seed, digest_size=10).digest() if seed is not None else os.urandom(10)
    r = int.from_bytes(rand, "big")
    bits = r & PLACEMENT_MASK if placement is None else placement
    unique = r >> 32 & ((1 << UNIQUE_BITS) - 1)
    if seed is None:
        with _last_lock:
            # a fresh millisecond starts in the lower half, so counting up never wraps past the top
            unique = _last[1] + 1 if _last[0] == due_ms else unique >> 1
            _last[:] = [due_ms, unique]
    return compose_id(due_ms, unique, bits)


def placements(count: int, per_row: int) -> list[int]:
    """Placement bits for ``count`` messages sent in one call, ``per_row`` consecutive ones sharing
    each draw. A row's messages are written in one request (a per-partition batch) and taken in one
    take, so a call of 26 messages spread one per shard cost the node 16 write requests where this
    costs 1; over many calls the draws still spread the rows evenly."""
    draws = [int.from_bytes(os.urandom(4), "big") for _ in range((count + per_row - 1) // per_row)]
    return [draws[i // per_row] for i in range(count)]


def compose_id(due_ms: int, unique: int, placement: int) -> uuid.UUID:
    """Assemble an id from its due time, 42 unique bits and 32 placement bits."""
    if not 0 <= due_ms <= MAX_MS:
        raise ValueError(f"due time {due_ms} ms is outside the representable range")
    unique &= (1 << UNIQUE_BITS) - 1
    rand_a, rand_b_high = unique >> 30, unique & ((1 << 30) - 1)
    value = (
        (due_ms << 80)
        | (0x7 << 76)
        | (rand_a << 64)
        | (0b10 << 62)
        | (rand_b_high << 32)
        | (placement & PLACEMENT_MASK)
    )
    return uuid.UUID(int=value)


def group_placement(group: str) -> int:
    """The 32 placement bits of every message of a group: a group lives in one shard (FIFO order
    is kept within one row, engine/take/fifo.py), under any shard count, also after a reshard."""
    return int.from_bytes(hashlib.blake2b(group.encode("utf-8"), digest_size=4).digest(), "big")


def group_id(due_ms: int, group: str, unique: int | None = None) -> uuid.UUID:
    """An id for a message of ``group``: the group's placement bits; ``unique``: the unique bits of the id it was
    built with (``unique_of``: made in send order, so groups placed at one position keep the batch's order), else
    random ones."""
    bits = int.from_bytes(os.urandom(6), "big") if unique is None else unique
    return compose_id(due_ms, bits, group_placement(group))


def unique_of(message_id: uuid.UUID) -> int:
    """The 42 unique bits of an id (``compose_id``'s ``unique``)."""
    return (message_id.int >> 64 & 0xFFF) << 30 | (message_id.int >> 32 & ((1 << 30) - 1))


def tail_id(group: str) -> uuid.UUID:
    """The clustering id of a FIFO group's tail row (kind 3): one per group, deterministic."""
    return uuid.UUID(bytes=hashlib.blake2b(group.encode("utf-8"), digest_size=16).digest())


def sibling_id(origin: uuid.UUID, n: int) -> uuid.UUID:
    """The n-th deterministic sibling of ``origin``: same due field and placement bits (so the same
    row), distinct unique bits for every n < 2**42."""
    base = int.from_bytes(hashlib.blake2b(origin.bytes, digest_size=6).digest(), "big")
    return compose_id(id_due_ms(origin), base + n, origin.int & PLACEMENT_MASK)


def id_due_ms(message_id: uuid.UUID) -> int:
    """The original due time (ms) carried in an id."""
    return message_id.int >> 80


def bucket_of(due_ms: int, bucket_ms: int, buckets: int) -> int:
    """The rolling time bucket of a due time: never negative, always < buckets."""
    return (max(due_ms, 0) // bucket_ms) % buckets


def shard_of(message_id: uuid.UUID, shards: int) -> int:
    """The concurrency shard: the id's 32 placement bits, unsigned, modulo the shard count."""
    return (message_id.int & PLACEMENT_MASK) % shards


def row_of(message_id: uuid.UUID, bucket_ms: int, buckets: int, shards: int) -> tuple[int, int]:
    """(bucket, shard) of the row that holds this message for its whole life."""
    return bucket_of(id_due_ms(message_id), bucket_ms, buckets), shard_of(message_id, shards)


def key_shard(key: str) -> int:
    """Partition of a lookup key within its queue (crc32 is unsigned in Python 3)."""
    return zlib.crc32(key.encode("utf-8")) % KEY_SHARDS


def parse_id(text: str) -> uuid.UUID:
    """Parse a message id given by a person; raise ValueError with the expected form."""
    try:
        value = uuid.UUID(text.strip())
    except (ValueError, AttributeError):
        raise ValueError(
            f"invalid message id {text!r}: expected a UUID such as 0192e3a1-7c2b-7d3e-9f00-1a2b3c4d5e6f"
        ) from None
    return value

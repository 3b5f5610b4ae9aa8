"""Receipt handles: the token a puller gets with each message, to delete it or change its visibility.

A receipt names one *delivery*: the queue, the message id, its row and lane, the position of the
message in flight (where it was sent: it stays there while in flight) and the attempt number. The
position makes delete and change-visibility point reads, never scans; the attempt tells a current
delivery from an older one of the same message (a receipt whose visibility expired and whose
message was delivered again no longer matches anything).

Version 2 also carries what a delete needs to be a blind write (engine/delivery/settle.py ``delete_batch``): the write
timestamp of the delivery (the take batch's), and whether the message has a lookup key (a keyed message is deleted by
the checked path, which releases its key) and whether the delivery is its message in place (every delivery now; one
issued in the copy layout, before it was removed, is not, and is refused as stale by engine/delivery/settle.py), and
whether the delivery has an escape entry of its own at its visibility's end (a send caught by a parked poll,
engine/wake/catch.py: the delete removes it with the message, so the row needs no sweep to settle). Version 1 receipts
(issued before) are still read; they carry none of that, so their deletes take the checked path (a point read, then
the delete).

The token is signed with HMAC-SHA256 (truncated to 128 bits) under a key shared through Cassandra
(engine/access/secrets.py), so a client can neither forge a receipt for a message it never received nor
edit one to point at another message or queue.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
import uuid
from dataclasses import dataclass

from daemon.base.errors import UsageError

VERSION = 2
_FIXED = struct.Struct(">B16siihqi")  # version, id, bucket, shard, rank, due ms, attempt (version 1)
_EXTRA = struct.Struct(">qB")  # version 2: the delivery's write timestamp (us), flags
_KEYED, _IN_PLACE, _ESCAPED = 1, 2, 4
_TAG = 16


class InvalidReceipt(UsageError):
    """A receipt handle that was not issued by casque for this queue (or was altered)."""


@dataclass(frozen=True)
class Receipt:
    queue: str
    id: uuid.UUID
    bucket: int
    shard: int
    rank: int
    due_ms: int
    attempt: int
    #: The delivery's write timestamp (us); None in a version 1 receipt.
    write_ts: int | None = None
    #: The message has a lookup key (its delete must release it).
    keyed: bool = False
    #: The delivery is the message at its position (every delivery since the copy layout was removed).
    in_place: bool = False
    #: The delivery's check entry is an escape of its own, due at its ``visible_at`` (a caught send).
    escaped: bool = False


class ReceiptSigner:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def issue(self, r: Receipt) -> str:
        flags = (_KEYED if r.keyed else 0) | (_IN_PLACE if r.in_place else 0) | (_ESCAPED if r.escaped else 0)
        body = (
            _FIXED.pack(VERSION, r.id.bytes, r.bucket, r.shard, r.rank, r.due_ms, r.attempt)
            + _EXTRA.pack(r.write_ts or 0, flags)
            + r.queue.encode("utf-8")
        )
        return base64.urlsafe_b64encode(body + self._tag(body)).decode("ascii").rstrip("=")

    def open(self, handle: str, queue: str | None = None) -> Receipt:
        """The receipt inside ``handle``; InvalidReceipt if it is malformed, forged, altered, or
        (with ``queue``) issued for another queue."""
        try:
            raw = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4))
        except (binascii.Error, ValueError, TypeError):
            raise InvalidReceipt(
                "the receipt handle is not one casque issued (not base64): pass the handle exactly as received"
            ) from None
        body, tag = raw[:-_TAG], raw[-_TAG:]
        if len(body) < _FIXED.size or not hmac.compare_digest(tag, self._tag(body)):
            raise InvalidReceipt(
                "the receipt handle is not one casque issued (bad signature): pass the handle exactly as received"
            )
        version, mid, bucket, shard, rank, due, attempt = _FIXED.unpack_from(body)
        if version not in (1, VERSION) or (version == VERSION and len(body) < _FIXED.size + _EXTRA.size):
            raise InvalidReceipt(
                f"the receipt handle has version {version}, this server reads 1-{VERSION}: receive the message again"
            )
        start, write_ts, flags = _FIXED.size, None, 0
        if version == VERSION:
            write_ts, flags = _EXTRA.unpack_from(body, start)
            start += _EXTRA.size
        r = Receipt(
            body[start:].decode("utf-8"),
            uuid.UUID(bytes=mid),
            bucket,
            shard,
            rank,
            due,
            attempt,
            write_ts or None,
            bool(flags & _KEYED),
            bool(flags & _IN_PLACE),
            bool(flags & _ESCAPED),
        )
        if queue is not None and r.queue != queue:
            raise InvalidReceipt(
                f"the receipt handle belongs to queue '{r.queue}', not '{queue}': use the queue the message came from"
            )
        return r

    def _tag(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, hashlib.sha256).digest()[:_TAG]

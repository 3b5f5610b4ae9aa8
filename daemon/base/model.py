"""The values that flow between the engine's parts: a queue's settings and a message.

Payloads are JSON (never pickle): a message can carry data, never code.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from daemon.base.errors import PayloadError, UsageError

MIN_PRIORITY, MAX_PRIORITY = -1000, 1000
#: Reserved headers: the message group and the FIFO deduplication id ride in the stored headers.
GROUP_HEADER, DEDUP_HEADER = "casque.group", "casque.dedup"
MAX_TASK_NAME = 200
MAX_KEY = 512


@dataclass(frozen=True)
class QueueSettings:
    """A queue's stored settings (the ``queues`` row). Every client reads them from Cassandra."""

    name: str
    shards: int
    buckets: int
    bucket_seconds: int
    lock_ttl_ms: int
    timeout_ms: int
    max_attempts: int
    retention_s: int
    max_payload_bytes: int
    priorities: frozenset[int] = frozenset({0})
    history: bool = False
    #: Earlier layouts (shards, buckets, bucket_seconds) whose rows may still hold messages after
    #: a reshard: read by consumers and lookups until ``casque queue reshard --finish`` drops them.
    draining: tuple[tuple[int, int, int], ...] = ()
    #: Delete the queue after this many seconds without a send or receive (0: never; engine/operations/reaper.py).
    expire_after_s: int = 0
    #: A FIFO queue (name ends in ".fifo"): a group's messages are delivered one after another, in
    #: the order they were sent; sends are deduplicated for 5 minutes (engine/take/fifo.py).
    fifo: bool = False
    #: FIFO only: a send without a dedup id is deduplicated by the SHA-256 of its body.
    content_dedup: bool = False
    #: FIFO only: "queue" (a dedup id is unique in the queue) or "messageGroup" (within its group).
    dedup_scope: str = "queue"
    #: FIFO only: the scope sends are deduplicated by, ``dedup_scope`` as the queue was created. A later change of
    #: ``dedup_scope`` is kept and shown but deduplicates as before: AWS answers so (docs/sqs.md, DeduplicationScope).
    dedup_by: str = "queue"
    #: FIFO only: "perQueue" or "perMessageGroupId" (high throughput: groups spread over more shards).
    fifo_throughput: str = "perQueue"
    #: The lock TTL before its last change and when that was (wall ms): consumers read lock columns back to the longer
    #: of the two until no holder can still keep a column written under the old one (engine/take/row_lock.py).
    lock_ttl_before_ms: int = 0
    lock_ttl_changed_ms: int = 0
    #: Who consumes the queue: "push" (daemons only: a task without a handler is poisoned), "pull" (SQS receivers and
    #: ``cq.receive``) or "both". None: push until the first pull client uses it (a receive, or a send over SQS),
    #: which makes it "both" for good; an operator's "push" stays (docs/design.md, "Push and pull on one queue").
    consumers: str | None = None

    @property
    def shared(self) -> bool:
        """Pull clients consume this queue: a daemon takes only the tasks it has handlers for and leaves the rest."""
        return self.consumers in ("pull", "both")

    @property
    def bucket_ms(self) -> int:
        return self.bucket_seconds * 1000

    def layouts(self) -> list[tuple[int, int, int]]:
        """The current layout first, then the draining ones."""
        return [(self.shards, self.buckets, self.bucket_seconds), *self.draining]

    def span(self) -> tuple[int, int]:
        """(shards, buckets) covering every row of every layout: what consumers visit."""
        return max(s for s, _, _ in self.layouts()), max(b for _, b, _ in self.layouts())

    def ranks(self) -> list[int]:
        """Clustering ranks in read order: highest priority first (rank = -priority)."""
        return sorted(-p for p in self.priorities)


@dataclass
class Message:
    """One message as the consumer hands it out. ``due_ms``/``state`` describe the stored row:
    for a delivered message ``copy_due_ms`` is where its timeout column sits (what ack deletes)."""

    queue: str
    id: uuid.UUID
    task: str
    payload: Any
    bucket: int
    shard: int
    priority: int = 0
    due_ms: int = 0
    attempt: int = 0
    max_attempts: int = 0
    timeout_ms: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    key: str | None = None
    trigger: dict[str, Any] | None = None
    enqueued_at: int = 0
    last_error: str | None = None
    state: int = 0
    copy_due_ms: int | None = None
    raw_payload: bytes | None = None
    corrupt: str | None = None
    write_ts: int = 0  # the stored row's write timestamp (us): later writes must exceed it
    scheduled_ms: int = 0  # for a delivered message: the due time it was taken at (lateness = start - this)
    started_ms: int = 0  # when its handler started (set by the dispatcher)
    #: A message in flight stays at its position (engine/storage/in_flight.py); this is when it
    #: becomes visible again. None while it waits.
    visible_at: int | None = None

    @property
    def rank(self) -> int:
        return -self.priority

    @property
    def invisible_until(self) -> int:
        """When a delivered message becomes visible again: its timeout column's due time, or a FIFO
        message's ``visible_at`` (it stays at its position)."""
        return self.visible_at if self.visible_at is not None else (self.copy_due_ms or 0)

    @property
    def group(self) -> str | None:
        """The message group (SQS MessageGroupId): FIFO order, or a fair-queue tenant."""
        return self.headers.get(GROUP_HEADER)

    @property
    def dedup_id(self) -> str | None:
        """A FIFO message's deduplication id (SQS MessageDeduplicationId)."""
        return self.headers.get(DEDUP_HEADER)

    @property
    def sequence(self) -> str | None:
        """A FIFO message's sequence number: 20 digits, increasing within its group (its position)."""
        return (
            sequence_number(self.due_ms, self.id)
            if GROUP_HEADER in self.headers and DEDUP_HEADER in self.headers
            else None
        )


def encode_payload(payload: Any, limit: int) -> bytes:
    """JSON-encode and size-check a payload; the error names the size, the limit and the fix."""
    try:
        data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        raise PayloadError(
            "payload contains text that is not valid Unicode (a lone surrogate): clean the strings before sending"
        ) from None
    except RecursionError:
        raise PayloadError("payload is nested too deeply to encode: flatten it") from None
    except (TypeError, ValueError) as exc:
        raise PayloadError(
            f"payload is not JSON-serialisable ({exc}): send only dicts, lists, strings, numbers, booleans and null"
        ) from None
    if len(data) > limit:
        raise PayloadError(
            f"payload is {len(data)} bytes, over the queue's limit of {limit}: store large data elsewhere and send a "
            f"reference, "
            "or raise the limit with 'casque queue update QUEUE --max-payload-bytes N'"
        )
    return data


def decode_payload(data: bytes | None) -> Any:
    """Decode a stored payload; raises ValueError (the message is then poisoned, never looped on)."""
    if data is None:
        return None
    return json.loads(data.decode("utf-8"))


def check_task_name(task: str) -> str:
    if (
        not isinstance(task, str)
        or not task
        or len(task) > MAX_TASK_NAME
        or not task.isprintable()
        or task != task.strip()
    ):
        raise UsageError(
            f"invalid task name {task!r}: use 1-{MAX_TASK_NAME} printable characters without surrounding spaces"
        )
    return task


def check_priority(priority: int) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise UsageError(
            f"invalid priority {priority!r}: use an integer from {MIN_PRIORITY} to {MAX_PRIORITY} (higher runs first)"
        )
    return priority


def check_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key.encode("utf-8")) > MAX_KEY or not key.isprintable():
        raise UsageError(f"invalid lookup key {key!r}: use 1-{MAX_KEY} bytes of printable text")
    return key


_PUNCTUATION = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def valid_group_id(value: Any) -> bool:
    """SQS's rule for MessageGroupId, MessageDeduplicationId and ReceiveRequestAttemptId: 1-128
    characters, ASCII letters, digits or punctuation (!"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~)."""
    return (
        isinstance(value, str)
        and 1 <= len(value) <= 128
        and all(c.isascii() and (c.isalnum() or c in _PUNCTUATION) for c in value)
    )


def check_group(kind: str, value: Any) -> str:
    if not valid_group_id(value):
        raise UsageError(f"invalid {kind} {value!r}: use 1-128 letters, digits and punctuation")
    return value


def check_headers(headers: dict[str, str] | None) -> dict[str, str]:
    headers = dict(headers or {})
    for k, v in headers.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise UsageError(f"invalid header {k!r}: header names and values must be strings")
    return headers


def sequence_number(position_ms: int, message_id: uuid.UUID) -> str:
    """A FIFO sequence number: the position (ms) then 7 digits from the id's bits that follow its
    millisecond field (what orders two messages of one millisecond in the row), so it increases
    with the row order, and so within a group."""
    return f"{position_ms:013d}{(message_id.int >> 64 & 0xFFF) * 2048 + (message_id.int >> 51 & 0x7FF):07d}"


def out_of_attempts(attempt: int, max_attempts: int) -> bool:
    """True once ``attempt`` used the last of ``max_attempts``; 0 means no limit (a queue without
    an SQS RedrivePolicy: messages are redelivered until their retention ends, as in SQS)."""
    return max_attempts > 0 and attempt >= max_attempts

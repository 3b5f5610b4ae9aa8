"""Queue settings: built from config defaults plus a caller's options, and checked against the limits.

What a queue may be (its limits, FIFO's rules), apart from how its row is stored (engine/queues/store.py):
creating, updating and resharding a queue all check here, before anything is written.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from daemon.base.config import QueueDefaults
from daemon.base.errors import UsageError
from daemon.base.model import QueueSettings
from daemon.engine.storage.schema import validate_queue_name

MIN_EXPIRE_S = 60
#: FIFO queues: a group's messages must share one row (engine/take/fifo.py), so one bucket; the shards
#: spread groups (high-throughput mode: more of them).
FIFO_SHARDS = {"perQueue": 1, "perMessageGroupId": 16}
DEDUP_SCOPES = ("queue", "messageGroup")
#: Who consumes a queue (``QueueSettings.consumers``; None: push until a pull client uses it).
CONSUMERS = (None, "push", "pull", "both")
#: 1 shard x 1 bucket is valid: a tiny queue (one user's) is a single row, and an idle receive on it
#: reads that row's lanes only (docs/design.md, "Many queues").
#: max_attempts 0: no limit, a message is redelivered until its retention ends (an SQS queue
#: without a RedrivePolicy).
_LIMITS = {"shards": (1, 4096), "buckets": (1, 1024), "bucket_seconds": (1, 86400), "max_attempts": (0, 1000)}


def settings_from_defaults(name: str, d: QueueDefaults, **overrides: Any) -> QueueSettings:
    """Queue settings from config defaults plus explicit overrides (None means 'use the default')."""
    o = {k: v for k, v in overrides.items() if v is not None}
    qs = QueueSettings(
        name=validate_queue_name(name),
        shards=int(o.get("shards", d.shards)),
        buckets=int(o.get("buckets", d.buckets)),
        bucket_seconds=int(o.get("bucket_seconds", d.bucket_seconds)),
        lock_ttl_ms=int(float(o.get("lock_ttl", d.lock_ttl)) * 1000),
        timeout_ms=int(float(o.get("timeout", d.timeout)) * 1000),
        max_attempts=int(o.get("max_attempts", d.max_attempts)),
        retention_s=int(float(o.get("retention", d.retention))),
        max_payload_bytes=int(o.get("max_payload_bytes", d.max_payload_bytes)),
        history=bool(o.get("history", False)),
        expire_after_s=int(float(o.get("expire_after", 0))),
        fifo=bool(o.get("fifo", False)),
        content_dedup=bool(o.get("content_dedup", False)),
        dedup_scope=str(o.get("dedup_scope", "queue")),
        dedup_by=str(o.get("dedup_by", o.get("dedup_scope", "queue"))),
        fifo_throughput=str(o.get("fifo_throughput", "perQueue")),
        consumers=o.get("consumers"),
    )
    if qs.fifo:  # one bucket always; the shards follow the throughput mode unless given
        qs = replace(qs, buckets=1, shards=int(o.get("shards", FIFO_SHARDS.get(qs.fifo_throughput, 1))))
    return check_settings(qs)


#: A take writes a payload again for a FIFO message (rewritten at its position) and for a schedule's next
#: occurrence: one message at this size still makes a batch far below Cassandra's 16 MiB request/mutation limits.
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
#: A take commits only while more than a second of its lock's life is left (engine/take's expiry margin): under
#: 2 s every take would be abandoned and the queue would stall.
MIN_LOCK_TTL_MS = 2000


def check_settings(qs: QueueSettings) -> QueueSettings:
    for key, (lo, hi) in _LIMITS.items():
        value = getattr(qs, key)
        if not lo <= value <= hi:
            raise UsageError(f"queue {qs.name}: {key} must be between {lo} and {hi}, got {value}")
    if qs.lock_ttl_ms < MIN_LOCK_TTL_MS:
        raise UsageError(
            f"queue {qs.name}: lock timeout must be at least {MIN_LOCK_TTL_MS // 1000}s, got {qs.lock_ttl_ms}ms"
        )
    if qs.timeout_ms < 100:
        raise UsageError(f"queue {qs.name}: message timeout must be at least 100ms, got {qs.timeout_ms}ms")
    if qs.retention_s < 60:
        raise UsageError(f"queue {qs.name}: retention must be at least 60s, got {qs.retention_s}s")
    if qs.expire_after_s and qs.expire_after_s < MIN_EXPIRE_S:
        raise UsageError(
            f"queue {qs.name}: expire_after must be 0 (never) or at least {MIN_EXPIRE_S}s, got {qs.expire_after_s}s"
        )
    check_fifo(qs)
    if qs.consumers not in CONSUMERS:
        raise UsageError(f"queue {qs.name}: consumers must be push, pull or both, got {qs.consumers!r}")
    if not 64 <= qs.max_payload_bytes <= MAX_PAYLOAD_BYTES:
        raise UsageError(
            f"queue {qs.name}: max_payload_bytes must be between 64 and {MAX_PAYLOAD_BYTES} (4 MiB), got "
            f"{qs.max_payload_bytes}"
        )
    return qs


def check_fifo(qs: QueueSettings) -> None:
    """A FIFO queue and only a FIFO queue is named "*.fifo" (SQS's rule), has one bucket (a group's
    messages share one row: engine/take/fifo.py) and known dedup options."""
    if qs.fifo != qs.name.endswith(".fifo"):
        raise UsageError(
            f"queue {qs.name}: a FIFO queue's name ends in '.fifo', and only a FIFO queue's: "
            + ("add the suffix" if qs.fifo else "create it with fifo=True (--fifo)")
        )
    if not qs.fifo:
        if qs.content_dedup or {qs.dedup_scope, qs.dedup_by} != {"queue"} or qs.fifo_throughput != "perQueue":
            raise UsageError(
                f"queue {qs.name}: content_dedup, dedup_scope and fifo_throughput apply to FIFO queues only"
            )
        return
    if qs.buckets != 1:
        raise UsageError(
            f"queue {qs.name}: a FIFO queue has one bucket (a group's messages share one row), got {qs.buckets}"
        )
    if not {qs.dedup_scope, qs.dedup_by} <= set(DEDUP_SCOPES):
        raise UsageError(f"queue {qs.name}: dedup_scope must be queue or messageGroup, got {qs.dedup_scope!r}")
    if qs.fifo_throughput not in FIFO_SHARDS:
        raise UsageError(
            f"queue {qs.name}: fifo_throughput must be perQueue or perMessageGroupId, got {qs.fifo_throughput!r}"
        )


def defaults_of(qs: QueueSettings) -> QueueDefaults:
    """Config defaults that rebuild ``qs`` (an update re-checks the merged settings as a create would)."""
    return QueueDefaults(
        shards=qs.shards,
        buckets=qs.buckets,
        bucket_seconds=qs.bucket_seconds,
        lock_ttl=qs.lock_ttl_ms / 1000,
        timeout=qs.timeout_ms / 1000,
        max_attempts=qs.max_attempts,
        retention=qs.retention_s,
        max_payload_bytes=qs.max_payload_bytes,
    )

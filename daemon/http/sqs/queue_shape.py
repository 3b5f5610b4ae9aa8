"""A queue's shape (shards, buckets, bucket length), growth cap and idle expiry, asked for at CreateQueue.

SQS has no such attributes, so they travel where every AWS SDK lets a caller put anything: as
attributes named ``casque.<option>`` (the SDKs pass attribute names through as strings; botocore and
the Go and Java SDKs do not check them against SQS's list) or as tags ``casque:<option>`` (free-form
everywhere). Options: ``shards``, ``buckets``, ``bucket_seconds``, ``max_shards`` (0: never grows;
engine/operations/shard_growth.py), ``expire_after`` (seconds, or a duration such as ``30d``; 0: never).

What is not asked for comes from ``[sqs]`` (a standard queue: ``queue_shards`` x ``queue_buckets``,
1 x 1 unless configured) or, for a FIFO queue, from its rules: one bucket (a group lives in one row),
1 shard or 16 with ``FifoThroughputLimit=perMessageGroupId``, and no growth (resharding a FIFO queue
would split a group over two rows: docs/design.md, "FIFO queues"). The values the queue was created
with are kept as hidden ``casque.*`` attributes, so a later CreateQueue of the same name is compared
with what was asked, not with the shards it has grown to.
"""

from __future__ import annotations

from typing import Any

from daemon.base.config import SqsSettings
from daemon.base.durations import parse_duration
from daemon.base.errors import UsageError
from daemon.base.model import QueueSettings
from daemon.engine.queues.settings import FIFO_SHARDS, MIN_EXPIRE_S
from daemon.http.sqs.errors import SqsError

ATTRIBUTE = "casque."
TAG = "casque:"
MAX_EXPIRE_S = 10 * 365 * 86400
#: option -> (lowest, highest); ``expire_after`` is also 0 (never).
LIMITS = {
    "shards": (1, 4096),
    "buckets": (1, 1024),
    "bucket_seconds": (1, 86400),
    "max_shards": (0, 4096),
    "expire_after": (MIN_EXPIRE_S, MAX_EXPIRE_S),
}
#: The shape options that are queue settings (``max_shards`` is none: a hidden attribute, read by
#: engine/operations/shard_growth.py).
_SETTINGS = ("shards", "buckets", "bucket_seconds", "expire_after")


def split(raw: Any, tags: dict[str, str]) -> tuple[dict[str, int], Any]:
    """The shape options asked for (attributes and tags, each checked), and the attributes left for
    SQS's own checks. Bad values: InvalidAttributeValue (an attribute) or InvalidParameterValue (a tag)."""
    asked: dict[str, int] = {}
    rest = raw
    if isinstance(raw, dict):
        rest = {}
        for name, value in raw.items():
            key = str(name).strip()
            if key.startswith(ATTRIBUTE):
                option = _option(key, ATTRIBUTE, "InvalidAttributeName")
                asked[option] = _value(option, key, value, "InvalidAttributeValue")
            else:
                rest[name] = value
    for key, value in tags.items():
        if key.startswith(TAG):
            option = _option(key, TAG, "InvalidParameterValue")
            number = _value(option, key, value, "InvalidParameterValue")
            if asked.get(option, number) != number:
                raise SqsError(
                    "InvalidParameterValue", f"Tag {key} and attribute {ATTRIBUTE}{option} ask for different values."
                )
            asked[option] = number
    return asked, rest


def _option(key: str, prefix: str, error: str) -> str:
    option = key[len(prefix) :].replace("-", "_")
    if option not in LIMITS:
        known = ", ".join(prefix + k for k in LIMITS)
        what = "Attribute" if prefix == ATTRIBUTE else "Tag"
        raise SqsError(error, f"Unknown {what} {key}: casque knows {known}.")
    return option


def _value(option: str, key: str, value: Any, error: str) -> int:
    lo, hi = LIMITS[option]
    text = str(value).strip()
    number = int(text) if text.isascii() and text.isdigit() else _seconds(text, key) if option == "expire_after" else -1
    if option == "expire_after" and number == 0:
        return 0
    if not lo <= number <= hi:
        never = "0 (never) or " if option == "expire_after" else ""
        unit = " seconds (or a duration such as 30d)" if option == "expire_after" else ""
        raise SqsError(error, f"Invalid value for the parameter {key}: must be {never}from {lo} to {hi}{unit}.")
    return number


def _seconds(text: str, key: str) -> int:
    try:
        return round(parse_duration(text, key))
    except UsageError:
        return -1


def settle(asked: dict[str, int], fifo: bool, sqs: SqsSettings) -> dict[str, int]:
    """Every shape option the queue is created with: what was asked, the rest from ``[sqs]`` (a
    standard queue) or from FIFO's rules (a FIFO queue, which never grows)."""
    if fifo:
        if asked.get("buckets", 1) != 1:
            raise SqsError("InvalidAttributeValue", "Invalid value for casque.buckets: a FIFO queue has one bucket.")
        if asked.get("max_shards", 0):
            raise SqsError(
                "InvalidAttributeValue", "Invalid value for casque.max_shards: a FIFO queue is never resharded (0)."
            )
        base = {"buckets": 1, "max_shards": 0}
    else:
        base = {
            "shards": sqs.queue_shards,
            "buckets": sqs.queue_buckets,
            "bucket_seconds": sqs.queue_bucket_seconds,
            "max_shards": sqs.queue_max_shards,
        }
    return {"expire_after": 0} | base | asked


def options(shape: dict[str, int], fifo_throughput: str = "perQueue") -> dict[str, Any]:
    """The engine's create options for a settled shape (a FIFO queue's shards follow its throughput
    mode unless asked for)."""
    out: dict[str, Any] = {k: v for k, v in shape.items() if k in _SETTINGS}
    out.setdefault("shards", FIFO_SHARDS.get(fifo_throughput, 1))
    return out


def hidden(shape: dict[str, int]) -> dict[str, str]:
    """The shape as created, kept in the queue's attribute map (``casque.*``: never listed by
    GetQueueAttributes) for the growth cap and for a later CreateQueue's comparison."""
    return {ATTRIBUTE + k: str(v) for k, v in shape.items()}


def differs(asked: dict[str, int], qs: QueueSettings, kept: dict[str, str]) -> str | None:
    """The first option asked for that the existing queue was not created with (None: all match).
    A queue created another way (no hidden attributes) is compared with its settings now."""
    now = {
        "shards": qs.shards,
        "buckets": qs.buckets,
        "bucket_seconds": qs.bucket_seconds,
        "expire_after": qs.expire_after_s,
        "max_shards": 0,
    }
    for option, value in asked.items():
        if int(kept.get(ATTRIBUTE + option, now[option])) != value:
            return ATTRIBUTE + option
    return None

"""SQS FIFO queues and fair queues, on the face: the rules SQS checks before anything is written.

A FIFO queue is a casque queue with ``fifo=True`` (daemon/base/model.py QueueSettings): its name ends
in ".fifo" and only FIFO queues' names may. Its four SQS attributes are the queue's settings
(FifoQueue = ``fifo``, ContentBasedDeduplication = ``content_dedup``, DeduplicationScope =
``dedup_scope``, FifoThroughputLimit = ``fifo_throughput``), not text in the attributes map: the
engine orders, deduplicates and shards by them, so they have one home.

The ids (MessageGroupId, MessageDeduplicationId, ReceiveRequestAttemptId) share SQS's rule: 1-128
alphanumeric and punctuation characters. A group is the engine's ``group=`` (FIFO order, or a fair
queue's tenant on a standard queue); a dedup id its ``dedup_id=``. Content-based deduplication is
the SHA-256 of the MessageBody as sent, computed here: the engine stores the body as a JSON
string, whose bytes are not the ones SQS hashes, and the id must be what a receiver sees as the
message's MessageDeduplicationId.

The error texts are AWS's (recorded against AWS in LocalStack's validated snapshots, or in the
terraform/SDK output users quote); where no recording was found the text says so in docs/sqs.md.
"""

from __future__ import annotations

import hashlib
from typing import Any

from daemon.base.model import QueueSettings, valid_group_id
from daemon.http.sqs.errors import SqsError, invalid

SUFFIX = ".fifo"
ATTRIBUTES = ("FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
SCOPES = ("messageGroup", "queue")
LIMITS = ("perQueue", "perMessageGroupId")
# The ids (1-128 alphanumeric and punctuation) are checked by base/model.py valid_group_id, the engine's own rule.
FIFO_NAME = (
    "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo "
    "suffix "
    "and be 1 to 80 in length"
)
STANDARD_NAME = "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
NEEDS_DEDUP = (
    "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly"
)
NEEDS_GROUP = "The request must contain the parameter MessageGroupId."
NOT_THIS_TYPE = "The request include parameter that is not valid for this queue type."


def is_fifo_name(name: str) -> bool:
    return name.endswith(SUFFIX)


def creates_fifo(name: str, attrs: Any) -> bool:
    """Whether CreateQueue makes a FIFO queue: FifoQueue=true and a ".fifo" name go together, as
    SQS requires (each without the other is InvalidParameterValue)."""
    raw = attrs.get("FifoQueue") if isinstance(attrs, dict) else None
    wants = str(raw).strip().lower() == "true" if raw is not None else False
    if wants and not is_fifo_name(name):
        raise invalid(FIFO_NAME)
    if is_fifo_name(name) and not wants:
        raise invalid(STANDARD_NAME)
    return wants


def check_attribute(name: str, text: str, fifo: bool) -> str:
    """One FIFO attribute given to CreateQueue or SetQueueAttributes; returns it normalised.

    On a standard queue each is refused as SQS refuses it (InvalidAttributeName). On a FIFO queue
    FifoQueue may only be repeated as true: the queue type never changes."""
    if not fifo:
        if name in ("DeduplicationScope", "FifoThroughputLimit"):
            raise SqsError("InvalidAttributeName", f"You can specify the {name} only when FifoQueue is set to true.")
        raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
    low = text.strip().lower()
    if name == "FifoQueue":
        if low != "true":
            raise SqsError(
                "InvalidAttributeValue",
                "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.",
            )
        return "true"
    if name == "ContentBasedDeduplication":
        if low not in ("true", "false"):
            raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
        return low
    allowed = SCOPES if name == "DeduplicationScope" else LIMITS
    if text not in allowed:
        raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
    return text


def check_throughput(scope: str, limit: str) -> None:
    """SQS: FifoThroughputLimit perMessageGroupId is allowed only with DeduplicationScope
    messageGroup (checked on the values the queue will have, so an earlier call counts too)."""
    if limit == "perMessageGroupId" and scope != "messageGroup":
        raise SqsError(
            "InvalidAttributeValue",
            "Invalid value for the parameter FifoThroughputLimit. Reason: The perMessageGroupId value "
            "is allowed only when the value for DeduplicationScope is messageGroup.",
        )


def options(attrs: dict[str, str]) -> dict[str, Any]:
    """The engine settings these (checked) FIFO attributes imply."""
    out: dict[str, Any] = {}
    if "ContentBasedDeduplication" in attrs:
        out["content_dedup"] = attrs["ContentBasedDeduplication"] == "true"
    if "DeduplicationScope" in attrs:
        out["dedup_scope"] = attrs["DeduplicationScope"]
    if "FifoThroughputLimit" in attrs:
        out["fifo_throughput"] = attrs["FifoThroughputLimit"]
    return out


def describe(qs: QueueSettings) -> dict[str, str]:
    """A FIFO queue's four attributes (a standard queue has none, as in SQS)."""
    if not qs.fifo:
        return {}
    return {
        "FifoQueue": "true",
        "ContentBasedDeduplication": "true" if qs.content_dedup else "false",
        "DeduplicationScope": qs.dedup_scope,
        "FifoThroughputLimit": qs.fifo_throughput,
    }


def check_id(value: Any, parameter: str) -> str | None:
    """MessageGroupId, MessageDeduplicationId or ReceiveRequestAttemptId: None when absent."""
    if value is None:
        return None
    if not valid_group_id(value):
        raise invalid(
            f"Value {value} for parameter {parameter} is invalid. Reason: {parameter} can only include alphanumeric "
            "and "
            "punctuation characters. 1 to 128 in length."
        )
    return value


def content_dedup_id(body: str) -> str:
    """ContentBasedDeduplication's id: the SHA-256 (hex) of the body as sent (SQS: of the body only,
    not of its attributes)."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def ids(p: dict[str, Any], qs: QueueSettings, body: str) -> tuple[str | None, str | None]:
    """A send's (group, dedup id), checked for the queue's type. On a FIFO queue the group is
    required (MissingParameter) and so is a dedup id unless the queue deduplicates by content; on
    a standard queue a group is a fair-queue tenant and a dedup id is refused."""
    group = check_id(p.get("MessageGroupId"), "MessageGroupId")
    raw = p.get("MessageDeduplicationId")
    if not qs.fifo:
        if raw is not None:
            raise invalid(f"Value {raw} for parameter MessageDeduplicationId is invalid. Reason: {NOT_THIS_TYPE}")
        return group, None
    if group is None:
        raise SqsError("MissingParameter", NEEDS_GROUP)
    dedup = check_id(raw, "MessageDeduplicationId")
    if dedup is None:
        if not qs.content_dedup:
            raise invalid(NEEDS_DEDUP)
        dedup = content_dedup_id(body)
    return group, dedup


def check_batch(entries: list[dict[str, Any]], qs: QueueSettings) -> None:
    """SendMessageBatch on a FIFO queue: an entry without its group or dedup id fails the whole
    request (InvalidParameterValue), as SQS answers, before any entry is sent."""
    if not qs.fifo:
        return
    for e in entries:
        if e.get("MessageDeduplicationId") is None and not qs.content_dedup:
            raise invalid(NEEDS_DEDUP)
        if e.get("MessageGroupId") is None:
            raise invalid(NEEDS_GROUP)


def check_delay(p: dict[str, Any], qs: QueueSettings) -> None:
    """A per-message DelaySeconds on a FIFO queue: SQS refuses any but 0 (the queue's DelaySeconds
    applies to all its messages)."""
    raw = p.get("DelaySeconds")
    if qs.fifo and raw not in (None, "") and str(raw) != "0":
        raise invalid(f"Value {raw} for parameter DelaySeconds is invalid. Reason: {NOT_THIS_TYPE}")

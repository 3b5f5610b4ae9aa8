"""SQS's message system attributes: what a sender may set (AWSTraceHeader) and what a receiver may
ask for (ReceiveMessage's MessageSystemAttributeNames / AttributeNames).

AWSTraceHeader is stored as the header ``sqs.AWSTraceHeader`` beside the message attributes
(``sqs:<Name>``): it costs nothing more than the message row. It comes from
``MessageSystemAttributes`` or, as SQS does, from the request's ``X-Amzn-Trace-Id`` header.
MessageGroupId and MessageDeduplicationId are the engine's ``group`` and ``dedup_id`` (checked in
fifo.py); a message sent before the engine had groups kept its group in ``sqs.MessageGroupId``,
which is still read.

Received ones: SenderId, SentTimestamp, ApproximateReceiveCount, ApproximateFirstReceiveTimestamp
(the first receive, kept with the message: engine/storage/received.py), AWSTraceHeader and MessageGroupId
when sent (FIFO, or a fair queue's tenant), MessageDeduplicationId and SequenceNumber on a FIFO
message, DeadLetterQueueSourceArn for a dead-lettered message. ``All`` gives every one the message
has; a name it lacks (SequenceNumber on a standard queue) and unknown names give nothing, as SQS.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daemon.base.model import Message
from daemon.engine.delivery.deadletter import FROM_HEADER, RECEIVES_HEADER
from daemon.engine.storage.received import times
from daemon.http.sqs.errors import invalid

TRACE = "AWSTraceHeader"
TRACE_HEADER = "sqs.AWSTraceHeader"
GROUP_HEADER = "sqs.MessageGroupId"  # where MessageGroupId was kept before the engine had groups: still read
MAX_TRACE = 1024  # no SQS figure is documented; an X-Ray header is ~100 characters


def check(value: Any) -> dict[str, dict[str, str]]:
    """SendMessage's MessageSystemAttributes: only AWSTraceHeader exists, a non-empty String."""
    if value is None or value == {}:
        return {}
    if not isinstance(value, dict):
        raise invalid("MessageSystemAttributes must be a map of attribute name to value.")
    out: dict[str, dict[str, str]] = {}
    for name, a in value.items():
        if name != TRACE:
            raise invalid(f"Message system attribute name '{name}' is invalid.")
        dtype = a.get("DataType") if isinstance(a, dict) else None
        text = a.get("StringValue") if isinstance(a, dict) else None
        if dtype != "String":
            raise invalid(f"The message system attribute '{name}' must be of type 'String'.")
        if not isinstance(text, str) or not text or len(text) > MAX_TRACE:
            raise invalid(
                f"The message system attribute '{name}' must contain a non-empty value of at most {MAX_TRACE} "
                "characters."
            )
        out[name] = {"DataType": dtype, "StringValue": text}
    return out


def to_headers(system: dict[str, dict[str, str]], trace: str | None) -> dict[str, str]:
    """The headers that keep them; an explicit AWSTraceHeader wins over the HTTP header's."""
    out: dict[str, str] = {}
    value = system[TRACE]["StringValue"] if TRACE in system else (trace or None)
    if value:
        out[TRACE_HEADER] = value[:MAX_TRACE]
    return out


def values(m: Message, received_ms: int, sender: str, arn_of: Callable[[str], str]) -> dict[str, str]:
    """Every system attribute the message has, by name."""
    first, _ = times(m.headers)
    out = {
        "SenderId": sender,
        "SentTimestamp": str(m.enqueued_at),
        "ApproximateReceiveCount": str(m.attempt + int(m.headers.get(RECEIVES_HEADER, "0"))),  # a dead letter's too
        "ApproximateFirstReceiveTimestamp": str(first if first is not None else received_ms),
    }
    if TRACE_HEADER in m.headers:
        out[TRACE] = m.headers[TRACE_HEADER]
    group = m.group or m.headers.get(GROUP_HEADER)  # the engine's group; the SQS header of messages sent before FIFO
    if group is not None:
        out["MessageGroupId"] = group
    if m.dedup_id is not None:
        out["MessageDeduplicationId"] = m.dedup_id
    if m.sequence is not None:
        out["SequenceNumber"] = m.sequence
    if FROM_HEADER in m.headers:
        out["DeadLetterQueueSourceArn"] = arn_of(m.headers[FROM_HEADER])
    return out


def select(available: dict[str, str], wanted: list[str]) -> dict[str, str]:
    if "All" in wanted:
        return available
    return {k: v for k, v in available.items() if k in wanted}

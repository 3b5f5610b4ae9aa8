"""SQS's message system attributes: what a sender may set (AWSTraceHeader, MessageGroupId) and
what a receiver may ask for (ReceiveMessage's MessageSystemAttributeNames / AttributeNames).

Sent ones are stored as headers beside the message attributes (``sqs.AWSTraceHeader``,
``sqs.MessageGroupId``; message attributes are ``sqs:<Name>``): they cost nothing more than the
message row. AWSTraceHeader comes from ``MessageSystemAttributes`` or, as SQS does, from the
request's ``X-Amzn-Trace-Id`` header. MessageGroupId on a standard queue is what SQS fair queues
use: accepted, stored and given back (casque does not build FIFO on it).

Received ones: SenderId, SentTimestamp, ApproximateReceiveCount, ApproximateFirstReceiveTimestamp
(the first receive, kept with the message: engine/received.py), AWSTraceHeader and MessageGroupId
when sent, DeadLetterQueueSourceArn for a dead-lettered message. ``All`` gives every one; names
SQS only has for FIFO queues (SequenceNumber, MessageDeduplicationId) and unknown names are
ignored, as SQS does on a standard queue.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from daemon.base.model import Message
from daemon.engine.deadletter import FROM_HEADER
from daemon.engine.received import times
from daemon.http.sqs.errors import invalid

TRACE = "AWSTraceHeader"
TRACE_HEADER = "sqs.AWSTraceHeader"
GROUP_HEADER = "sqs.MessageGroupId"
MAX_TRACE = 1024  # no SQS figure is documented; an X-Ray header is ~100 characters
# SQS: "MessageGroupId can only include alphanumeric and punctuation characters. 1 to 128 in length."
_GROUP = re.compile(r"""^[A-Za-z0-9!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}$""")


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
            raise invalid(f"The message system attribute '{name}' must contain a non-empty value of at most {MAX_TRACE} characters.")
        out[name] = {"DataType": dtype, "StringValue": text}
    return out


def check_group(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _GROUP.match(value):
        raise invalid(f"Value {value} for parameter MessageGroupId is invalid. Reason: MessageGroupId can only include alphanumeric and "
                      "punctuation characters. 1 to 128 in length.")
    return value


def to_headers(system: dict[str, dict[str, str]], group: str | None, trace: str | None) -> dict[str, str]:
    """The headers that keep them; an explicit AWSTraceHeader wins over the HTTP header's."""
    out: dict[str, str] = {}
    value = system[TRACE]["StringValue"] if TRACE in system else (trace or None)
    if value:
        out[TRACE_HEADER] = value[:MAX_TRACE]
    if group is not None:
        out[GROUP_HEADER] = group
    return out


def values(m: Message, received_ms: int, sender: str, arn_of: Callable[[str], str]) -> dict[str, str]:
    """Every system attribute the message has, by name."""
    first, _ = times(m.headers)
    out = {"SenderId": sender, "SentTimestamp": str(m.enqueued_at), "ApproximateReceiveCount": str(m.attempt),
           "ApproximateFirstReceiveTimestamp": str(first if first is not None else received_ms)}
    if TRACE_HEADER in m.headers:
        out[TRACE] = m.headers[TRACE_HEADER]
    if GROUP_HEADER in m.headers:
        out["MessageGroupId"] = m.headers[GROUP_HEADER]
    if FROM_HEADER in m.headers:
        out["DeadLetterQueueSourceArn"] = arn_of(m.headers[FROM_HEADER])
    return out


def select(available: dict[str, str], wanted: list[str]) -> dict[str, str]:
    if "All" in wanted:
        return available
    return {k: v for k, v in available.items() if k in wanted}

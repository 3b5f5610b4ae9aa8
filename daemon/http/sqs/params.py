"""Request parameters shared by the SQS actions: integers in range, name lists, tags, batch
entries, the ListQueues token; each refuses bad input with SQS's own error."""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from collections.abc import Awaitable, Callable
from typing import Any

from daemon.http.sqs import messages as msg
from daemon.http.sqs.errors import SqsError, invalid

MAX_BATCH = 10
MAX_TAGS = 50
# 1-80 of A-Za-z0-9_-, a FIFO queue's ".fifo" suffix counted in the 80 (the name alone says nothing
# of the type: CreateQueue checks it against FifoQueue, fifo.py).
QUEUE_NAME = re.compile(r"^(?:[A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")
ENTRY_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


def integer(p: dict[str, Any], key: str, default: int, lo: int, hi: int, message: str | None = None) -> int:
    raw = p.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw) if not isinstance(raw, bool) and str(raw).lstrip("-").isdigit() else None
    except (TypeError, ValueError):
        value = None
    if value is None or not lo <= value <= hi:
        raise invalid(
            message.format(v=raw)
            if message
            else f"Value {raw} for parameter {key} is invalid. Reason: Must be between {lo} and {hi}."
        )
    return value


def names(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid("Attribute name lists must be lists of strings.")
    return value


def tags(value: Any, queue: str) -> dict[str, str]:
    """Tags to set, with SQS's limits: at most 50 per queue, keys 1-128 characters, values at most 256."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise invalid("Tags must be a map of string keys to string values.")
    if len(value) > MAX_TAGS:
        raise invalid(f"Too many tags added for queue {queue}.")
    tag_keys(list(value))
    if any(len(v) > 256 for v in value.values()):
        raise invalid("Tag values may be at most 256 characters in length.")
    return dict(value)


def tag_keys(keys: Any) -> list[str]:
    """Tag keys to remove or set: a non-empty list of 1-128 character strings."""
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise invalid("TagKeys must be a list of strings.")
    if not keys or any(not 1 <= len(k) <= 128 for k in keys):
        raise invalid("Tag keys must be between 1 and 128 characters in length.")
    return keys


def entries(p: dict[str, Any], action: str) -> list[dict[str, Any]]:
    """A batch's entries, checked as SQS does (``action``: SendMessageBatch, DeleteMessageBatch, ...,
    which SQS names in its EmptyBatchRequest message)."""
    entries = p.get("Entries")
    if not entries:
        raise SqsError("EmptyBatchRequest", f"There should be at least one {action}RequestEntry in the request.")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise invalid("Entries must be a list of entries.")
    if len(entries) > MAX_BATCH:
        raise SqsError(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(entries)}.",
        )
    ids = [e.get("Id") for e in entries]
    for eid in ids:
        if not isinstance(eid, str) or not ENTRY_ID.match(eid):
            raise SqsError(
                "InvalidBatchEntryId",
                "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most "
                "80 letters long.",
            )
    seen: set[str] = set()
    for eid in ids:  # SQS names the first id met a second time (AWS-verified in moto's suite)
        if eid in seen:
            raise SqsError("BatchEntryIdsNotDistinct", f"Id {eid} repeated.")
        seen.add(eid)
    return entries


def attributes_size(attrs: Any) -> int:
    try:
        return msg.attributes_size(msg.check_attributes(attrs))
    except SqsError:
        return 0


async def batch(entries: list[dict[str, Any]], one: Callable[[dict[str, Any]], Awaitable[None]]) -> dict[str, Any]:
    results = await asyncio.gather(*(one(e) for e in entries), return_exceptions=True)
    ok, failed = [], []
    for e, res in zip(entries, results):
        if isinstance(res, SqsError):
            failed.append({"Id": e["Id"], "SenderFault": True, "Code": res.query_code, "Message": res.message})
        elif isinstance(res, BaseException):
            raise res
        else:
            ok.append({"Id": e["Id"]})
    return {"Successful": ok, "Failed": failed}


def decode_token(token: Any) -> str | None:
    if not token:
        return None
    try:
        name = base64.urlsafe_b64decode(str(token)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        name = ""
    if not QUEUE_NAME.match(name):
        raise invalid("Invalid NextToken value.")
    return name


def encode_token(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode()

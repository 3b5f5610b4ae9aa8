"""An SQS message <-> a casque message, and the checksums the SDKs verify.

Body: the casque payload is the body as a JSON string (a handler gets ``payload == body``). A
message sent by casque itself with a non-string payload is seen over SQS as the payload's JSON
text. Message attributes: stored as headers ``sqs:<Name>`` = ``<DataType>:<value>`` (binary values
in base64), so they survive the trip through Cassandra and a handler can read them too. Task name:
the String attribute ``casque.task`` if the sender gives one, else ``sqs.task`` from the config
(default ``sqs``): that is the handler a ``casque run`` daemon calls for the message.

MD5OfMessageBody is the MD5 of the body's UTF-8 bytes; MD5OfMessageAttributes is AWS's: for each
attribute in name order, the 4-byte big-endian length and bytes of the name, of the data type,
then a transport byte (1 string/number, 2 binary) and the length and bytes of the value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import struct
from typing import Any

from daemon.base.model import Message
from daemon.http.sqs.errors import SqsError, invalid, missing

HEADER_PREFIX = "sqs:"
TASK_ATTRIBUTE = "casque.task"
MAX_ATTRIBUTES = 10
MAX_NAME = 256
_TYPE = re.compile(r"^(String|Number|Binary)(\.[A-Za-z0-9_\-.]{1,})?$")
# SQS accepts #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF in bodies.
_BAD_CHARS = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def md5_of_attributes(attrs: dict[str, dict[str, Any]]) -> str | None:
    if not attrs:
        return None
    out = bytearray()
    for name in sorted(attrs):
        a = attrs[name]
        _lv(out, name.encode("utf-8"))
        _lv(out, a["DataType"].encode("utf-8"))
        if "StringValue" in a:
            out.append(1)
            _lv(out, a["StringValue"].encode("utf-8"))
        else:
            out.append(2)
            _lv(out, binary_value(a["BinaryValue"]))
    return md5_hex(bytes(out))


def _lv(out: bytearray, data: bytes) -> None:
    out += struct.pack(">I", len(data)) + data


def binary_value(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise invalid("A BinaryValue is not valid base64.") from None


def check_body(body: Any) -> str:
    if body is None or body == "":
        raise missing("MessageBody")
    if not isinstance(body, str):
        raise invalid("MessageBody must be a string.")
    if _BAD_CHARS.search(body):
        raise SqsError(
            "InvalidMessageContents",
            "Invalid characters found. Valid values are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 "
            "to #x10FFFF",
        )
    return body


def check_attributes(attrs: Any) -> dict[str, dict[str, Any]]:
    """Validate MessageAttributes as SQS does; returns them normalised (binary as base64 text)."""
    if attrs is None:
        return {}
    if not isinstance(attrs, dict):
        raise invalid("MessageAttributes must be a map of name to value.")
    if len(attrs) > MAX_ATTRIBUTES:
        raise invalid(f"Number of message attributes [{len(attrs)}] exceeds the allowed maximum [{MAX_ATTRIBUTES}].")
    out: dict[str, dict[str, Any]] = {}
    for name, a in attrs.items():
        if not valid_name(str(name)):
            raise invalid(
                f"The message attribute name '{name}' is invalid: use letters, digits, _ - and . (at most "
                f"{MAX_NAME}, not starting with AWS. or Amazon., no leading, trailing or doubled period)."
            )
        if not isinstance(a, dict) or not isinstance(a.get("DataType"), str) or not a["DataType"]:
            raise invalid(f"The message attribute '{name}' must contain a non-empty message attribute type.")
        dtype = a["DataType"]
        m = _TYPE.match(dtype)
        if not m:
            raise invalid(
                f"The type of message (user) attribute '{name}' is invalid. You must use only the following "
                "supported type prefixes: Binary, Number, String."
            )
        empty = f"Message (user) attribute '{name}' must contain a non-empty value of type '{m.group(1)}'."
        if m.group(1) == "Binary":
            if "BinaryValue" not in a or a["BinaryValue"] in (None, "", b""):
                raise invalid(empty)
            out[name] = {
                "DataType": dtype,
                "BinaryValue": base64.b64encode(binary_value(a["BinaryValue"])).decode("ascii"),
            }
            continue
        value = a.get("StringValue")
        if not isinstance(value, str) or value == "":
            raise invalid(empty)
        if m.group(1) == "Number":
            _check_number(name, value)
        if _BAD_CHARS.search(value):  # SQS answers InvalidParameterValue here, not the body's InvalidMessageContents
            raise invalid(
                f"Message (user) attribute '{name}' contains characters outside the allowed set: #x9 | #xA | #xD | "
                "#x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF."
            )
        out[name] = {"DataType": dtype, "StringValue": value}
    return out


def valid_name(name: str) -> bool:
    """SQS's rule for a message attribute name: 1-256 alphanumeric characters (letters and digits of
    any script: AWS's API reference says "alphanumeric", and accepts names such as 'attr.1øßä'), ``_``,
    ``-`` and ``.``; not starting with ``AWS.`` or ``Amazon.`` in any case; no period first, last or
    twice in a row."""
    return (
        0 < len(name) <= MAX_NAME
        and all(c.isalnum() or c in "_-." for c in name)
        and not name.lower().startswith(("aws.", "amazon."))
        and not name.startswith(".")
        and not name.endswith(".")
        and ".." not in name
    )


def _check_number(name: str, value: str) -> None:
    try:
        float(value)
    except ValueError:
        raise invalid(f"Can't cast the value of message (user) attribute '{name}' to a number.") from None
    digits = re.sub(r"[^0-9]", "", value.split("e")[0].split("E")[0])
    if len(digits.lstrip("0")) > 38:
        raise invalid(f"The value of message attribute '{name}' has more than 38 digits of precision.")


def attributes_size(attrs: dict[str, dict[str, Any]]) -> int:
    """What SQS counts towards the message size: name, type and value bytes of each attribute."""
    n = 0
    for name, a in attrs.items():
        value = binary_value(a["BinaryValue"]) if "BinaryValue" in a else a["StringValue"].encode("utf-8")
        n += len(name.encode("utf-8")) + len(a["DataType"].encode("utf-8")) + len(value)
    return n


def to_headers(attrs: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {
        HEADER_PREFIX + name: f"{a['DataType']}:{a.get('StringValue', a.get('BinaryValue'))}"
        for name, a in attrs.items()
    }


def from_headers(headers: dict[str, str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, raw in headers.items():
        if not key.startswith(HEADER_PREFIX) or ":" not in raw:
            continue
        dtype, value = raw.split(":", 1)
        out[key[len(HEADER_PREFIX) :]] = {
            "DataType": dtype,
            ("BinaryValue" if dtype.startswith("Binary") else "StringValue"): value,
        }
    return out


def task_of(attrs: dict[str, dict[str, Any]], default: str) -> str:
    a = attrs.get(TASK_ATTRIBUTE)
    if a and a["DataType"].startswith("String") and a.get("StringValue"):
        return a["StringValue"]
    return default


def body_of(m: Message) -> str:
    if isinstance(m.payload, str):
        return m.payload
    return json.dumps(m.payload, separators=(",", ":"), ensure_ascii=False)


def select_attributes(attrs: dict[str, dict[str, Any]], wanted: list[str]) -> dict[str, dict[str, Any]]:
    """MessageAttributeNames: 'All', '*' or '.*', exact names, or prefixes written 'prefix.*'
    (what precedes '.*': 'Hel.*' gives Hello and Help.Me, as SQS answers). Other names, valid or
    not, select nothing (no error, as SQS)."""
    if not wanted or not attrs:
        return {}
    if any(w in ("All", ".*", "*") for w in wanted):
        return dict(attrs)
    out = {}
    for name, a in attrs.items():
        for w in wanted:
            if name == w or (w.endswith(".*") and name.startswith(w[:-2])):
                out[name] = a
                break
    return out

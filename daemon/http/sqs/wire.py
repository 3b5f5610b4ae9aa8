"""The two wire protocols SQS speaks, chosen per request by its headers:

* AWS JSON 1.0 (current boto3, AWS CLI v1.3x+, Java v2, JS v3, Go v2): ``POST /`` with
  ``X-Amz-Target: AmazonSQS.<Action>`` and a JSON body; errors are ``{"__type", "message"}`` plus
  the ``x-amzn-query-error: <code>;<Sender|Receiver>`` header.
* query/XML (older SDKs): form-encoded ``Action=...`` (POST body or GET query string), indexed
  parameters (``Attribute.1.Name``, ``SendMessageBatchRequestEntry.2.MessageBody``, ...), XML
  answers and ``<ErrorResponse>`` errors.

Both are turned into one request shape (the JSON protocol's) before an action runs, and an
action's result (the JSON shape) is rendered back in the caller's protocol.
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from daemon.http.sqs.errors import SqsError

JSON_TYPE = "application/x-amz-json-1.0"
XMLNS = "http://queue.amazonaws.com/doc/2012-11-05/"
TARGET_PREFIX = "AmazonSQS."


def is_json(headers: Any) -> bool:
    return "x-amz-target" in headers or "amz-json" in headers.get("content-type", "")


def parse_json(headers: Any, body: bytes) -> tuple[str, dict[str, Any]]:
    target = headers.get("x-amz-target", "")
    if not target.startswith(TARGET_PREFIX):
        raise SqsError("UnknownOperationException", f"The X-Amz-Target header {target!r} does not name an SQS action (AmazonSQS.<Action>).")
    try:
        params = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise SqsError("SerializationException", "The request body is not valid JSON.") from None
    if not isinstance(params, dict):
        raise SqsError("SerializationException", "The request body must be a JSON object.")
    return target[len(TARGET_PREFIX):], params


def parse_query(query_string: str, body: bytes) -> tuple[str, dict[str, Any]]:
    try:
        pairs = parse_qsl(query_string, keep_blank_values=True, strict_parsing=False)
        pairs += parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        raise SqsError("MalformedQueryString", "The request body is not form-encoded UTF-8.") from None
    flat = dict(pairs)
    action = flat.pop("Action", "")
    flat.pop("Version", None)
    if not action:
        raise SqsError("MissingParameter", "The request must contain the parameter Action.")
    return action, _shape(_tree(flat))


def _tree(flat: dict[str, str]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for key, value in flat.items():
        node = root
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[parts[-1]] = value
    return root


_LISTS = {"AttributeName": "AttributeNames", "MessageAttributeName": "MessageAttributeNames",
          "MessageSystemAttributeName": "MessageSystemAttributeNames", "TagKey": "TagKeys"}


def _shape(node: dict[str, Any]) -> dict[str, Any]:
    """Indexed query parameters -> the JSON protocol's request shape."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        items = _indexed(value)
        if key == "Attribute" and items is not None:
            out["Attributes"] = {i.get("Name", ""): i.get("Value", "") for i in items if isinstance(i, dict)}
        elif key == "MessageAttribute" and items is not None:
            out["MessageAttributes"] = {i.get("Name", ""): i.get("Value", {}) for i in items if isinstance(i, dict)}
        elif key == "MessageSystemAttribute" and items is not None:
            out["MessageSystemAttributes"] = {i.get("Name", ""): i.get("Value", {}) for i in items if isinstance(i, dict)}
        elif key == "Tag" and items is not None:
            out["Tags"] = {i.get("Key", ""): i.get("Value", "") for i in items if isinstance(i, dict)}
        elif key in _LISTS and items is not None:
            out[_LISTS[key]] = items
        elif key.endswith("RequestEntry") and items is not None:
            out["Entries"] = [_shape(i) if isinstance(i, dict) else i for i in items]
        else:
            out[key] = value
    return out


def _indexed(value: Any) -> list[Any] | None:
    if not isinstance(value, dict) or not value or not all(k.isdigit() for k in value):
        return None
    return [value[k] for k in sorted(value, key=int)]


# ---- rendering -----------------------------------------------------------------------------------
def json_ok(result: dict[str, Any], request_id: str) -> tuple[int, dict[str, str], bytes]:
    return 200, {"content-type": JSON_TYPE, "x-amzn-requestid": request_id}, json.dumps(result, separators=(",", ":")).encode()


def json_error(err: SqsError, request_id: str) -> tuple[int, dict[str, str], bytes]:
    headers = {"content-type": JSON_TYPE, "x-amzn-requestid": request_id, "x-amzn-query-error": f"{err.query_code};{err.fault}"}
    return err.status, headers, json.dumps({"__type": err.json_type, "message": err.message}).encode()


def xml_ok(action: str, result: dict[str, Any], request_id: str) -> tuple[int, dict[str, str], bytes]:
    inner = "".join(_xml_field(action, k, v) for k, v in result.items())
    body = (f'<?xml version="1.0" encoding="UTF-8"?><{action}Response xmlns="{XMLNS}"><{action}Result>{inner}</{action}Result>'
            f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{action}Response>")
    return 200, {"content-type": "text/xml", "x-amzn-requestid": request_id}, body.encode("utf-8")


def xml_error(err: SqsError, request_id: str) -> tuple[int, dict[str, str], bytes]:
    body = (f'<?xml version="1.0" encoding="UTF-8"?><ErrorResponse xmlns="{XMLNS}"><Error><Type>{err.fault}</Type>'
            f"<Code>{_x(err.query_code)}</Code><Message>{_x(err.message)}</Message><Detail/></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>")
    return err.status, {"content-type": "text/xml", "x-amzn-requestid": request_id}, body.encode("utf-8")


def _x(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return escape(str(value), {'"': "&quot;", "\r": "&#xD;"})


def _xml_field(action: str, key: str, value: Any) -> str:
    if key in ("Attributes",):
        return "".join(f"<Attribute><Name>{_x(k)}</Name><Value>{_x(v)}</Value></Attribute>" for k, v in value.items())
    if key == "MessageAttributes":
        return "".join(f"<MessageAttribute><Name>{_x(k)}</Name><Value>{_xml_value(v)}</Value></MessageAttribute>" for k, v in value.items())
    if key == "Tags":
        return "".join(f"<Tag><Key>{_x(k)}</Key><Value>{_x(v)}</Value></Tag>" for k, v in value.items())
    if key in ("QueueUrls", "queueUrls"):
        return "".join(f"<QueueUrl>{_x(u)}</QueueUrl>" for u in value)
    if key == "Messages":
        return "".join("<Message>" + "".join(_xml_field(action, k, v) for k, v in m.items()) + "</Message>" for m in value)
    if key == "Successful":
        return "".join(f"<{action}ResultEntry>" + "".join(_xml_field(action, k, v) for k, v in e.items()) + f"</{action}ResultEntry>" for e in value)
    if key == "Results":  # ListMessageMoveTasks: a flattened list of entries
        return "".join(f"<{action}ResultEntry>" + "".join(f"<{k}>{_x(v)}</{k}>" for k, v in e.items()) + f"</{action}ResultEntry>" for e in value)
    if key == "Failed":
        return "".join("<BatchResultErrorEntry>" + "".join(f"<{k}>{_x(v)}</{k}>" for k, v in e.items()) + "</BatchResultErrorEntry>" for e in value)
    return f"<{key}>{_x(value)}</{key}>"


def _xml_value(v: dict[str, Any]) -> str:
    return "".join(f"<{k}>{_x(v[k])}</{k}>" for k in ("StringValue", "BinaryValue", "DataType") if k in v)


def new_request_id() -> str:
    return str(uuid.uuid4())

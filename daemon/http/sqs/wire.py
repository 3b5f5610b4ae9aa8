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
NO_QUEUE = "The specified queue does not exist."


def is_json(headers: Any) -> bool:
    return "x-amz-target" in headers or "amz-json" in headers.get("content-type", "")


def parse_json(headers: Any, body: bytes) -> tuple[str, dict[str, Any]]:
    target = headers.get("x-amz-target", "")
    if not target.startswith(TARGET_PREFIX):
        raise SqsError(
            "UnknownOperationException",
            f"The X-Amz-Target header {target!r} does not name an SQS action (AmazonSQS.<Action>).",
        )
    try:
        params = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise SqsError("SerializationException", "The request body is not valid JSON.") from None
    if not isinstance(params, dict):
        raise SqsError("SerializationException", "The request body must be a JSON object.")
    return target[len(TARGET_PREFIX) :], params


def parse_query(query_string: str, body: bytes, get: bool = False) -> tuple[str, dict[str, Any]]:
    """A query-protocol request: a POST's parameters are its URL's and its form body's, a GET's its
    URL's only. A GET without an Action is SQS's 404 ``<UnknownOperationException/>``."""
    try:
        pairs = parse_qsl(query_string, keep_blank_values=True, strict_parsing=False)
        pairs += parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        raise SqsError("MalformedQueryString", "The request body is not form-encoded UTF-8.") from None
    flat = dict(pairs)
    action = flat.pop("Action", "")
    flat.pop("Version", None)
    if not action:
        if get:
            raise SqsError("UnknownOperationException", "A GET request must name its Action in the URL.")
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


# The query protocol's lists, by the name AWS's API reference gives them (``AttributeName.N``, its
# sample requests also a bare ``AttributeName=All``) and by the member's own name (``AttributeNames.N``:
# what a query serializer built from today's SQS model sends, its lists having lost their
# locationName); either spelling becomes the JSON protocol's list.
_LISTS = {
    "AttributeName": "AttributeNames",
    "MessageAttributeName": "MessageAttributeNames",
    "MessageSystemAttributeName": "MessageSystemAttributeNames",
    "TagKey": "TagKeys",
    "AWSAccountId": "AWSAccountIds",
    "ActionName": "Actions",
}
_LISTS |= {plural: plural for plural in list(_LISTS.values())}


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
            out["MessageSystemAttributes"] = {
                i.get("Name", ""): i.get("Value", {}) for i in items if isinstance(i, dict)
            }
        elif key == "Tag" and items is not None:
            out["Tags"] = {i.get("Key", ""): i.get("Value", "") for i in items if isinstance(i, dict)}
        elif key in _LISTS and (items is not None or isinstance(value, str)):
            out[_LISTS[key]] = out.get(_LISTS[key], []) + (items if items is not None else [value])
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
    return (
        200,
        {"content-type": JSON_TYPE, "x-amzn-requestid": request_id},
        json.dumps(result, separators=(",", ":")).encode(),
    )


def json_error(err: SqsError, request_id: str) -> tuple[int, dict[str, str], bytes]:
    headers = {
        "content-type": JSON_TYPE,
        "x-amzn-requestid": request_id,
        "x-amzn-query-error": f"{err.query_code};{err.fault}",
    }
    return err.status, headers, json.dumps({"__type": err.json_type, "message": err.message}).encode()


def xml_ok(action: str, result: dict[str, Any], request_id: str) -> tuple[int, dict[str, str], bytes]:
    inner = "".join(_xml_field(action, k, v) for k, v in result.items())
    # An empty result is one empty element, as SQS writes it (an empty receive: <ReceiveMessageResult/>).
    wrapped = f"<{action}Result>{inner}</{action}Result>" if inner else f"<{action}Result/>"
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><{action}Response '
        f'xmlns="{XMLNS}">{wrapped}'
        f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{action}Response>"
    )
    return 200, {"content-type": "text/xml", "x-amzn-requestid": request_id}, body.encode("utf-8")


def xml_error(err: SqsError, request_id: str) -> tuple[int, dict[str, str], bytes]:
    if err.shape == "UnknownOperationException":  # what SQS answers a GET naming no action: no ErrorResponse
        return 404, {"content-type": "text/xml", "x-amzn-requestid": request_id}, b"<UnknownOperationException/>"
    if err.message == NO_QUEUE:  # SQS's query protocol words it so (its JSON protocol without the suffix)
        err = SqsError(err.shape, NO_QUEUE[:-1] + " for this wsdl version.")
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><ErrorResponse xmlns="{XMLNS}"><Error><Type>{err.fault}</Type>'
        f"<Code>{_x(err.query_code)}</Code><Message>{_x(err.message)}</Message><Detail/></Error>"
        f"<RequestId>{request_id}</RequestId></ErrorResponse>"
    )
    return err.status, {"content-type": "text/xml", "x-amzn-requestid": request_id}, body.encode("utf-8")


def _x(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return escape(str(value), {'"': "&quot;", "\r": "&#xD;"})


# How the query protocol writes each list and map of SQS's results (the xmlFlattened/xmlName traits
# of SQS's model): a flattened list repeats its element, no wrapper; a map is flattened entries.
_FLAT_LISTS = {
    "Messages": "Message",
    "QueueUrls": "QueueUrl",
    "queueUrls": "QueueUrl",
    "Failed": "BatchResultErrorEntry",
    "Results": "ListMessageMoveTasksResultEntry",
}
_MAPS = {
    "Attributes": ("Attribute", "Name", "Value"),
    "Tags": ("Tag", "Key", "Value"),
    "MessageAttributes": ("MessageAttribute", "Name", "Value"),
}


def _xml_field(action: str, key: str, value: Any) -> str:
    """One member of a result in XML: scalars as text, lists and maps as SQS's model writes them,
    any other structure or list as nested elements (never a Python repr)."""
    if key in _MAPS and isinstance(value, dict):
        entry, k_name, v_name = _MAPS[key]
        render = _xml_value if key == "MessageAttributes" else _x
        return "".join(
            f"<{entry}><{k_name}>{_x(k)}</{k_name}><{v_name}>{render(v)}</{v_name}></{entry}>" for k, v in value.items()
        )
    if isinstance(value, list):
        element = f"{action}ResultEntry" if key == "Successful" else _FLAT_LISTS.get(key)
        if element is None:  # not flattened in SQS's model: a wrapper with <member> items
            return f"<{key}>" + "".join(f"<member>{_xml_item(action, v)}</member>" for v in value) + f"</{key}>"
        return "".join(f"<{element}>{_xml_item(action, v)}</{element}>" for v in value)
    if isinstance(value, dict):
        return f"<{key}>{_xml_item(action, value)}</{key}>"
    return f"<{key}>{_x(value)}</{key}>"


def _xml_item(action: str, value: Any) -> str:
    if isinstance(value, dict):
        return "".join(_xml_field(action, k, v) for k, v in value.items())
    return _x(value)


def _xml_value(v: dict[str, Any]) -> str:
    return "".join(f"<{k}>{_x(v[k])}</{k}>" for k in ("StringValue", "BinaryValue", "DataType") if k in v)


def new_request_id() -> str:
    return str(uuid.uuid4())

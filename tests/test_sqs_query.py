"""The query/XML protocol (what older SDKs speak): form posts signed with botocore's own SigV4
signer, answers parsed as XML. Same server process kind as tests/test_sqs.py."""

from __future__ import annotations

import base64
import hashlib
import urllib.error
import urllib.parse
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from daemon.testing import sqsserver
from tests.test_sqs import reference_md5_of_attributes

NS = {"q": "http://queue.amazonaws.com/doc/2012-11-05/"}
#: The system attributes ``All`` gives a message of a standard queue sent without a trace header or group.
ALL_STANDARD = {"SenderId", "SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp"}


def query(
    url: str, action: str, params: dict[str, str], creds: Credentials | None = None, method: str = "POST"
) -> tuple[int, ET.Element]:
    """One query-protocol request, SigV4-signed like an SDK would (any key works with auth none)."""
    status, _, body = query_raw(url, action, params, creds, method)
    return status, ET.fromstring(body)


def query_raw(
    url: str,
    action: str,
    params: dict[str, str],
    creds: Credentials | None = None,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """``query``'s request, answered as sent: the status, the headers (lower-case names) and the body's bytes."""
    form = urllib.parse.urlencode({"Action": action, "Version": "2012-11-05", **params})
    if method == "GET":
        req = AWSRequest(method="GET", url=f"{url}?{form}", headers=dict(headers or {}))
    else:
        sent = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"} | (headers or {})
        req = AWSRequest(method="POST", url=url, data=form.encode(), headers=sent)
    SigV4Auth(creds or Credentials("k", "s"), "sqs", "us-east-1").add_auth(req)
    prepared = req.prepare()
    raw = urllib.request.Request(prepared.url, data=prepared.body, headers=dict(prepared.headers), method=method)
    try:
        with urllib.request.urlopen(raw, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()


def text(root: ET.Element, path: str) -> str:
    node = root.find(path, NS)
    assert node is not None, f"{path} missing in {ET.tostring(root)[:500]!r}"
    return node.text or ""


def test_query_protocol_full_cycle(server: sqsserver.SqsServer) -> None:
    name = f"qry-{uuid.uuid4().hex[:10]}"
    status, root = query(
        server.url,
        "CreateQueue",
        {"QueueName": name, "Attribute.1.Name": "VisibilityTimeout", "Attribute.1.Value": "40"},
    )
    assert status == 200 and root.tag == f"{{{NS['q']}}}CreateQueueResponse"
    url = text(root, "q:CreateQueueResult/q:QueueUrl")
    assert text(query(server.url, "GetQueueUrl", {"QueueName": name})[1], "q:GetQueueUrlResult/q:QueueUrl") == url
    status, root = query(
        url,
        "SendMessage",
        {
            "MessageBody": "hi <&> there",
            "MessageAttribute.1.Name": "k",
            "MessageAttribute.1.Value.DataType": "String",
            "MessageAttribute.1.Value.StringValue": "v",
            "MessageAttribute.2.Name": "b",
            "MessageAttribute.2.Value.DataType": "Binary",
            "MessageAttribute.2.Value.BinaryValue": base64.b64encode(b"\x00\xff").decode(),
        },
    )
    assert status == 200
    attrs: dict[str, dict[str, Any]] = {
        "k": {"DataType": "String", "StringValue": "v"},
        "b": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
    }
    assert text(root, "q:SendMessageResult/q:MD5OfMessageBody") == hashlib.md5(b"hi <&> there").hexdigest()
    assert text(root, "q:SendMessageResult/q:MD5OfMessageAttributes") == reference_md5_of_attributes(attrs)
    mid = text(root, "q:SendMessageResult/q:MessageId")
    # QueueUrl as a parameter (posted to /), and as the request path: both are SQS's query forms
    status, root = query(
        server.url,
        "ReceiveMessage",
        {"QueueUrl": url, "WaitTimeSeconds": "5", "AttributeName.1": "All", "MessageAttributeName.1": "All"},
    )
    msg = root.find("q:ReceiveMessageResult/q:Message", NS)
    assert status == 200 and msg is not None
    assert text(msg, "q:MessageId") == mid and text(msg, "q:Body") == "hi <&> there"
    got = {
        text(a, "q:Name"): text(a, "q:Value/q:StringValue")
        if a.find("q:Value/q:StringValue", NS) is not None
        else text(a, "q:Value/q:BinaryValue")
        for a in msg.findall("q:MessageAttribute", NS)
    }
    assert got == {"k": "v", "b": base64.b64encode(b"\x00\xff").decode()}
    assert text(msg, "q:MD5OfMessageAttributes") == reference_md5_of_attributes(attrs)
    system = {text(a, "q:Name"): text(a, "q:Value") for a in msg.findall("q:Attribute", NS)}
    assert system["ApproximateReceiveCount"] == "1"
    assert query(url, "DeleteMessage", {"ReceiptHandle": text(msg, "q:ReceiptHandle")})[0] == 200
    status, root = query(
        url,
        "SendMessageBatch",
        {
            "SendMessageBatchRequestEntry.1.Id": "a",
            "SendMessageBatchRequestEntry.1.MessageBody": "1",
            "SendMessageBatchRequestEntry.2.Id": "b",
            "SendMessageBatchRequestEntry.2.MessageBody": "2",
        },
    )
    assert sorted(
        text(e, "q:Id") for e in root.findall("q:SendMessageBatchResult/q:SendMessageBatchResultEntry", NS)
    ) == ["a", "b"]
    handles: list[str] = []
    while len(handles) < 2:
        _, root = query(url, "ReceiveMessage", {"MaxNumberOfMessages": "10", "WaitTimeSeconds": "5"}, method="GET")
        handles += [text(m, "q:ReceiptHandle") for m in root.findall("q:ReceiveMessageResult/q:Message", NS)]
    params: dict[str, str] = {}
    for i, h in enumerate(handles + ["forged"], 1):
        params |= {
            f"DeleteMessageBatchRequestEntry.{i}.Id": f"d{i}",
            f"DeleteMessageBatchRequestEntry.{i}.ReceiptHandle": h,
        }
    _, root = query(url, "DeleteMessageBatch", params)
    assert len(root.findall("q:DeleteMessageBatchResult/q:DeleteMessageBatchResultEntry", NS)) == 2
    (failed,) = root.findall("q:DeleteMessageBatchResult/q:BatchResultErrorEntry", NS)
    assert (text(failed, "q:Id"), text(failed, "q:Code"), text(failed, "q:SenderFault")) == (
        "d3",
        "ReceiptHandleIsInvalid",
        "true",
    )
    _, root = query(url, "GetQueueAttributes", {"AttributeName.1": "All"})
    attrs_out = {
        text(a, "q:Name"): text(a, "q:Value") for a in root.findall("q:GetQueueAttributesResult/q:Attribute", NS)
    }
    assert attrs_out["VisibilityTimeout"] == "40" and attrs_out["ApproximateNumberOfMessages"] == "0"
    _, root = query(server.url, "ListQueues", {"QueueNamePrefix": name})
    assert [u.text for u in root.findall("q:ListQueuesResult/q:QueueUrl", NS)] == [url]
    assert query(url, "DeleteQueue", {})[0] == 200


def test_query_protocol_errors_are_xml_error_responses(server: sqsserver.SqsServer) -> None:
    status, root = query(server.url, "GetQueueUrl", {"QueueName": "does-not-exist-" + uuid.uuid4().hex[:6]})
    assert status == 400 and root.tag == f"{{{NS['q']}}}ErrorResponse"
    assert (text(root, "q:Error/q:Type"), text(root, "q:Error/q:Code")) == (
        "Sender",
        "AWS.SimpleQueueService.NonExistentQueue",
    )
    assert text(root, "q:RequestId")
    status, root = query(server.url, "Frobnicate", {})
    assert status == 400 and text(root, "q:Error/q:Code") == "InvalidAction"
    status, root = query(server.url, "CreateQueue", {})
    assert status == 400 and text(root, "q:Error/q:Code") == "MissingParameter"
    status, root = query(
        server.url, "ReceiveMessage", {"QueueUrl": server.url + "/000000000000/x", "WaitTimeSeconds": "99"}
    )
    assert status == 400 and text(root, "q:Error/q:Code") in (
        "InvalidParameterValue",
        "AWS.SimpleQueueService.NonExistentQueue",
    )


def test_receive_name_lists_in_every_query_spelling_and_an_empty_receive(server: sqsserver.SqsServer) -> None:
    """ReceiveMessage's three name lists as AWS's API reference writes them (``AttributeName.N``,
    ``MessageAttributeName.N``, ``MessageSystemAttributeName.N``; its sample request also a bare
    ``AttributeName=All``) and by their members' names (``AttributeNames.N``: what a query
    serializer built from today's SQS model sends, which was refused with "Attribute name lists must
    be lists of strings"). An empty receive is ``<ReceiveMessageResult/>``, as SQS answers it; a
    query request asking for JSON (``Accept: application/json``) still gets XML: AWS documents XML
    for the query protocol and JSON only for the JSON protocol (docs/sqs.md, compatibility table)."""
    name = f"qry-{uuid.uuid4().hex[:10]}"
    _, root = query(server.url, "CreateQueue", {"QueueName": name})
    url = text(root, "q:CreateQueueResult/q:QueueUrl")
    status, _, body = query_raw(url, "ReceiveMessage", {"AttributeName.1": "All"})
    assert status == 200 and b"<ReceiveMessageResult/>" in body and b"</ReceiveMessageResult>" not in body
    status, headers, body = query_raw(url, "ReceiveMessage", {}, headers={"Accept": "application/json"})
    assert status == 200 and headers["content-type"].startswith("text/xml") and b"<ReceiveMessageResult/>" in body
    query(
        url,
        "SendMessage",
        {
            "MessageBody": "lists",
            "MessageAttribute.1.Name": "colour",
            "MessageAttribute.1.Value.DataType": "String",
            "MessageAttribute.1.Value.StringValue": "blue",
            "MessageAttribute.2.Name": "size",
            "MessageAttribute.2.Value.DataType": "Number",
            "MessageAttribute.2.Value.StringValue": "3",
        },
    )
    spellings: list[tuple[dict[str, str], set[str], set[str]]] = [
        ({"AttributeName.1": "SentTimestamp", "MessageAttributeName.1": "colour"}, {"SentTimestamp"}, {"colour"}),
        ({"AttributeName": "All", "MessageAttributeName": "size"}, ALL_STANDARD, {"size"}),
        (
            {"AttributeNames.1": "SentTimestamp", "AttributeNames.2": "SenderId", "MessageAttributeNames.1": "All"},
            {"SentTimestamp", "SenderId"},
            {"colour", "size"},
        ),
        (  # MessageSystemAttributeNames wins over AttributeNames, as in SQS
            {"MessageSystemAttributeName.1": "ApproximateReceiveCount", "AttributeName.1": "SentTimestamp"},
            {"ApproximateReceiveCount"},
            set(),
        ),
        ({"MessageSystemAttributeNames.1": "SenderId", "MessageAttributeNames.1": "col.*"}, {"SenderId"}, {"colour"}),
    ]
    for params, system, user in spellings:
        status, root = query(url, "ReceiveMessage", params | {"WaitTimeSeconds": "5", "VisibilityTimeout": "0"})
        msg = root.find("q:ReceiveMessageResult/q:Message", NS)
        assert status == 200 and msg is not None, (params, ET.tostring(root)[:300])
        got_system = {text(a, "q:Name") for a in msg.findall("q:Attribute", NS)}
        got_user = {text(a, "q:Name") for a in msg.findall("q:MessageAttribute", NS)}
        assert (got_system, got_user) == (system, user), params

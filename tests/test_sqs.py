"""The SQS endpoint (``casque serve``) driven by real clients: boto3 and aiobotocore over the JSON
protocol, and raw HTTP for malformed input. The server is a real process on 127.0.0.1 (port 0)
against the test keyspace; every queue is a real casque queue."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import struct
import threading
import time
import urllib.request
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from daemon.engine.client import Casque
from daemon.engine.operations.stats import queue_stats
from daemon.testing import sqsserver
from tests.support.sqsfixtures import make_client


@pytest.fixture
def qname() -> str:
    return f"sqs-{uuid.uuid4().hex[:12]}"


def code(exc: ClientError) -> str:
    return exc.response["Error"]["Code"]


def reference_md5_of_attributes(attrs: dict[str, dict[str, Any]]) -> str:
    """AWS's documented algorithm, written out independently of the server's code."""
    buf = b""
    for name in sorted(attrs):
        a = attrs[name]
        for part in (name, a["DataType"]):
            data = part.encode()
            buf += struct.pack(">I", len(data)) + data
        if "StringValue" in a:
            data = a["StringValue"].encode()
            buf += b"\x01" + struct.pack(">I", len(data)) + data
        else:
            data = a["BinaryValue"]
            buf += b"\x02" + struct.pack(">I", len(data)) + data
    return hashlib.md5(buf).hexdigest()


def raw_post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def oversize_post(url: str, size: int) -> tuple[int, bytes]:
    """Announce a body over the server's limit and send only its start: the answer must come anyway."""
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.putrequest("POST", "/")
    for k, v in {
        "content-type": "application/x-amz-json-1.0",
        "x-amz-target": "AmazonSQS.SendMessage",
        "content-length": str(size),
    }.items():
        conn.putheader(k, v)
    conn.endheaders(b"x" * 1024)
    resp = conn.getresponse()
    return resp.status, resp.read()


def test_queue_lifecycle_create_get_list_tag_delete(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname, Attributes={"VisibilityTimeout": "45"}, tags={"team": "a"})["QueueUrl"]
    assert url.endswith(f"/000000000000/{qname}")
    assert sqs.create_queue(QueueName=qname, Attributes={"VisibilityTimeout": "45"})["QueueUrl"] == url, (
        "same attributes: same queue"
    )
    with pytest.raises(sqs.exceptions.QueueNameExists):
        sqs.create_queue(QueueName=qname, Attributes={"VisibilityTimeout": "46"})
    assert sqs.get_queue_url(QueueName=qname)["QueueUrl"] == url
    assert url in sqs.list_queues(QueueNamePrefix=qname)["QueueUrls"]
    sqs.tag_queue(QueueUrl=url, Tags={"env": "test"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "a", "env": "test"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["team"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "test"}
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as err:
        sqs.get_queue_url(QueueName=qname)
    assert code(err.value) == "AWS.SimpleQueueService.NonExistentQueue"
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix=qname)


def test_list_queues_is_paged_by_token(sqs: Any, qname: str) -> None:
    names = {f"{qname}-{i}" for i in range(5)}
    for n in names:
        sqs.create_queue(QueueName=n)
    seen: list[str] = []
    kwargs: dict[str, Any] = {"QueueNamePrefix": qname, "MaxResults": 2}
    pages = 0
    while True:
        page = sqs.list_queues(**kwargs)
        pages += 1
        seen += [u.rsplit("/", 1)[-1] for u in page.get("QueueUrls", [])]
        if "NextToken" not in page:
            break
        kwargs["NextToken"] = page["NextToken"]
    assert sorted(seen) == sorted(names) and pages == 3
    with pytest.raises(ClientError) as err:
        sqs.list_queues(NextToken="!!not-a-token!!", MaxResults=2)
    assert code(err.value) == "InvalidParameterValue"


def test_send_receive_delete_each_message_once(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    sent: set[str] = set()
    for b in range(4):
        r = sqs.send_message_batch(
            QueueUrl=url, Entries=[{"Id": f"e{i}", "MessageBody": f"m{b}-{i}"} for i in range(10)]
        )
        assert not r.get("Failed")
        for e in r["Successful"]:
            assert e["MD5OfMessageBody"] == hashlib.md5(f"m{b}-{e['Id'][1:]}".encode()).hexdigest()
        sent |= {e["MessageId"] for e in r["Successful"]}
    got: list[str] = []
    while len(got) < len(sent):
        msgs = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=5, VisibilityTimeout=60).get(
            "Messages", []
        )
        assert msgs, f"{len(sent) - len(got)} messages never came"
        for m in msgs:
            assert m["MD5OfBody"] == hashlib.md5(m["Body"].encode()).hexdigest()
        got += [m["MessageId"] for m in msgs]
        d = sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)]
        )
        assert len(d["Successful"]) == len(msgs) and not d.get("Failed")
    assert sorted(got) == sorted(sent), "lost or duplicated"
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0")


def test_message_attributes_round_trip_with_aws_md5(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    attrs: dict[str, dict[str, Any]] = {
        "meta.color": {"DataType": "String", "StringValue": "red"},
        "n": {"DataType": "Number", "StringValue": "1.5e3"},
        "blob": {"DataType": "Binary", "BinaryValue": bytes(range(256))},
        "custom": {"DataType": "String.custom", "StringValue": "✓ ok"},
    }
    r = sqs.send_message(QueueUrl=url, MessageBody="body ✓", MessageAttributes=attrs)
    assert r["MD5OfMessageBody"] == hashlib.md5("body ✓".encode()).hexdigest()
    assert r["MD5OfMessageAttributes"] == reference_md5_of_attributes(attrs)
    (m,) = sqs.receive_message(
        QueueUrl=url, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"], WaitTimeSeconds=5
    )["Messages"]
    assert m["Body"] == "body ✓" and m["MessageAttributes"] == attrs
    assert m["MD5OfMessageAttributes"] == reference_md5_of_attributes(attrs)
    assert m["Attributes"]["ApproximateReceiveCount"] == "1" and int(m["Attributes"]["SentTimestamp"]) > 0
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    (m2,) = sqs.receive_message(
        QueueUrl=url, MessageAttributeNames=["meta.*"], AttributeNames=["ApproximateReceiveCount"], WaitTimeSeconds=5
    )["Messages"]
    assert m2["MessageAttributes"] == {"meta.color": attrs["meta.color"]} and m2["Attributes"] == {
        "ApproximateReceiveCount": "2"
    }
    assert m2["MD5OfMessageAttributes"] == reference_md5_of_attributes({"meta.color": attrs["meta.color"]})
    with pytest.raises(ClientError) as err:
        sqs.send_message(
            QueueUrl=url, MessageBody="x", MessageAttributes={"AWS.bad": {"DataType": "String", "StringValue": "v"}}
        )
    assert code(err.value) == "InvalidParameterValue"


def test_visibility_timeout_expiry_redelivers_with_receive_count(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname, Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="again")
    (first,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, AttributeNames=["All"])["Messages"]
    t0 = time.monotonic()
    (second,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10, AttributeNames=["All"])["Messages"]
    assert 0.5 < time.monotonic() - t0 < 3.0
    assert second["MessageId"] == first["MessageId"] and second["Attributes"]["ApproximateReceiveCount"] == "2"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])  # stale: succeeds, deletes nothing
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=60)
    # the first receipt changes the message's current delivery, as AWS does (getmoto/moto#4655, checked against
    # AWS): visible at once, received a third time
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    (third,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, AttributeNames=["All"])["Messages"]
    assert third["MessageId"] == first["MessageId"] and third["Attributes"]["ApproximateReceiveCount"] == "3"
    # and a timeout: the first receipt hides it for 60 s (nothing to receive at once)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=60)
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages", []) == []
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    (fourth,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, AttributeNames=["All"])["Messages"]
    assert fourth["Attributes"]["ApproximateReceiveCount"] == "4", "the 60 s ended by the first receipt again"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=fourth["ReceiptHandle"])
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])[
        "Attributes"
    ]
    assert attrs == {"ApproximateNumberOfMessagesNotVisible": "0"}


def test_change_visibility_batch_reports_each_entry(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(2)])
    msgs: list[Any] = []
    while len(msgs) < 2:
        msgs += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, WaitTimeSeconds=5, VisibilityTimeout=600).get(
            "Messages", []
        )
    r = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "ReceiptHandle": msgs[0]["ReceiptHandle"], "VisibilityTimeout": 0},
            {"Id": "b", "ReceiptHandle": "forged", "VisibilityTimeout": 0},
        ],
    )
    assert [e["Id"] for e in r["Successful"]] == ["a"]
    assert [(e["Id"], e["Code"], e["SenderFault"]) for e in r["Failed"]] == [("b", "ReceiptHandleIsInvalid", True)]
    (back,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    assert back["MessageId"] == msgs[0]["MessageId"]


def test_long_poll_returns_as_soon_as_a_message_is_sent(server: sqsserver.SqsServer, sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    assert "Messages" not in sqs.receive_message(
        QueueUrl=url, WaitTimeSeconds=0
    )  # the first visit reads every row once
    result: dict[str, Any] = {}

    def poll() -> None:
        client = make_client(server.url)
        result["r"] = client.receive_message(QueueUrl=url, WaitTimeSeconds=15)
        result["t"] = time.monotonic()

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.5)  # most likely parked by now; if not, a send during its read still wakes it (generation check)
    sent = time.monotonic()
    mid = sqs.send_message(QueueUrl=url, MessageBody="now")["MessageId"]
    t.join(20)
    assert [m["MessageId"] for m in result["r"]["Messages"]] == [mid]
    assert result["t"] - sent < 1.0, f"long poll took {result['t'] - sent:.2f}s after the send"


def test_delay_seconds_hides_a_message_until_due(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname, Attributes={"DelaySeconds": "1"})["QueueUrl"]
    assert "Messages" not in sqs.receive_message(
        QueueUrl=url, WaitTimeSeconds=0
    )  # the first visit reads every row once
    t0 = time.monotonic()
    sqs.send_message(QueueUrl=url, MessageBody="later")
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])["Attributes"]
    assert attrs == {"ApproximateNumberOfMessagesDelayed": "1"}
    (m,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10)["Messages"]
    assert m["Body"] == "later" and 0.9 < time.monotonic() - t0 < 2.5


def test_queue_attributes_map_onto_casque_settings(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={
            "VisibilityTimeout": "120",
            "MessageRetentionPeriod": "3600",
            "ReceiveMessageWaitTimeSeconds": "3",
            "MaximumMessageSize": "2048",
        },
    )
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (
        a["VisibilityTimeout"],
        a["MessageRetentionPeriod"],
        a["ReceiveMessageWaitTimeSeconds"],
        a["MaximumMessageSize"],
    ) == ("120", "3600", "3", "2048")
    assert a["QueueArn"] == f"arn:aws:sqs:us-east-1:000000000000:{qname}"
    for attrs, expected in (
        ({"Nope": "1"}, "InvalidAttributeName"),
        ({"VisibilityTimeout": "43201"}, "InvalidAttributeValue"),
        ({"DelaySeconds": "901"}, "InvalidAttributeValue"),
        ({"MaximumMessageSize": "1048577"}, "InvalidAttributeValue"),
        ({"RedrivePolicy": "{bad json"}, "InvalidAttributeValue"),
    ):
        with pytest.raises(ClientError) as err:
            sqs.set_queue_attributes(QueueUrl=url, Attributes=attrs)
        assert code(err.value) == expected, attrs
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"] == {
        "VisibilityTimeout": "120"
    }
    with pytest.raises(ClientError) as err:
        sqs.send_message(QueueUrl=url, MessageBody="x" * 2049)
    assert code(err.value) == "InvalidParameterValue"


async def test_sqs_queues_are_ordinary_casque_queues(sqs: Any, cq: Casque, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody='{"a": 1}')
    sqs.send_message(
        QueueUrl=url,
        MessageBody="mail",
        MessageAttributes={"casque.task": {"DataType": "String", "StringValue": "send_email"}},
    )
    assert (await queue_stats(cq.stores, qname)).waiting_due == 2
    got = []
    consumer = cq.consumer(qname)
    for _ in range(20):
        got += await consumer.fetch(10)
        if len(got) == 2:
            break
    assert sorted((m.task, m.payload) for m in got) == [("send_email", "mail"), ("sqs", '{"a": 1}')]
    await cq.stores.acker.poison(got[0], "test")
    assert await cq.stores.poison.count(qname) == 1


def test_limits_and_bad_input_get_sqs_errors_and_change_nothing(
    server: sqsserver.SqsServer, sqs: Any, qname: str
) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    cases = [
        (
            lambda: sqs.send_message_batch(
                QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)]
            ),
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        ),
        (
            lambda: sqs.send_message_batch(
                QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "x"}, {"Id": "a", "MessageBody": "y"}]
            ),
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        ),
        (
            lambda: sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "bad id!", "MessageBody": "x"}]),
            "AWS.SimpleQueueService.InvalidBatchEntryId",
        ),
        (
            lambda: sqs.send_message_batch(
                QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x" * 600_000} for i in range(2)]
            ),
            "AWS.SimpleQueueService.BatchRequestTooLong",
        ),
        (lambda: sqs.delete_message_batch(QueueUrl=url, Entries=[]), "AWS.SimpleQueueService.EmptyBatchRequest"),
        (lambda: sqs.send_message(QueueUrl=url, MessageBody="x" * (1024 * 1024 + 1)), "InvalidParameterValue"),
        (lambda: sqs.send_message(QueueUrl=url, MessageBody="bad \x00 char"), "InvalidMessageContents"),
        (lambda: sqs.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=901), "InvalidParameterValue"),
        (lambda: sqs.receive_message(QueueUrl=url, WaitTimeSeconds=21), "InvalidParameterValue"),
        (lambda: sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11), "InvalidParameterValue"),
        (lambda: sqs.receive_message(QueueUrl=url, VisibilityTimeout=43201), "InvalidParameterValue"),
        (lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle="x" * 40), "ReceiptHandleIsInvalid"),
        (
            lambda: sqs.change_message_visibility(QueueUrl=url, ReceiptHandle="x" * 40, VisibilityTimeout=1),
            "ReceiptHandleIsInvalid",
        ),
        (
            lambda: sqs.send_message(QueueUrl=url + "-missing", MessageBody="x"),
            "AWS.SimpleQueueService.NonExistentQueue",
        ),
        (lambda: sqs.create_queue(QueueName="bad name!"), "InvalidParameterValue"),
    ]
    for call, expected in cases:
        with pytest.raises(ClientError) as err:
            call()
        assert code(err.value) == expected
    # malformed requests straight over HTTP: JSON errors with __type and x-amzn-query-error
    j = {"content-type": "application/x-amz-json-1.0"}
    status, headers, body = raw_post(server.url, b"{not json", j | {"x-amz-target": "AmazonSQS.SendMessage"})
    assert status == 400 and "x-amzn-query-error" in {k.lower() for k in headers} and "__type" in json.loads(body)
    status, headers, body = raw_post(server.url, b"{}", j | {"x-amz-target": "AmazonSQS.Explode"})
    assert status == 400 and json.loads(body)["__type"].endswith("#UnknownOperationException")
    status, _, body = raw_post(
        server.url, b"Action=Explode&Version=2012-11-05", {"content-type": "application/x-www-form-urlencoded"}
    )
    assert status == 400 and b"<Code>InvalidAction</Code>" in body
    status, body = oversize_post(server.url, 9 * 1024 * 1024)
    assert status == 413 and "RequestEntityTooLarge" in json.loads(body)["__type"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "0" and attrs["ApproximateNumberOfMessagesDelayed"] == "0", (
        "bad input changed the queue"
    )
    sqs.send_message(QueueUrl=url, MessageBody="still serving")


async def test_aiobotocore_send_receive_delete(server: sqsserver.SqsServer, qname: str) -> None:
    from aiobotocore.session import get_session

    async with get_session().create_client(
        "sqs", endpoint_url=server.url, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    ) as client:
        url = (await client.create_queue(QueueName=qname))["QueueUrl"]
        mid = (await client.send_message(QueueUrl=url, MessageBody="async"))["MessageId"]
        msgs = (await client.receive_message(QueueUrl=url, WaitTimeSeconds=5))["Messages"]
        assert [m["MessageId"] for m in msgs] == [mid]
        await client.delete_message(QueueUrl=url, ReceiptHandle=msgs[0]["ReceiptHandle"])
        assert "Messages" not in await client.receive_message(QueueUrl=url, WaitTimeSeconds=0)
        with pytest.raises(client.exceptions.QueueDoesNotExist):
            await client.get_queue_url(QueueName=qname + "-nope")


def test_binary_attribute_md5_matches_a_fixed_vector() -> None:
    """A vector computed by hand from AWS's algorithm, so the reference above is itself checked."""
    attrs = {"a": {"DataType": "String", "StringValue": "b"}}
    buf = b"\x00\x00\x00\x01a" + b"\x00\x00\x00\x06String" + b"\x01" + b"\x00\x00\x00\x01b"
    assert reference_md5_of_attributes(attrs) == hashlib.md5(buf).hexdigest()
    assert base64.b64encode(b"\x00\x01") == b"AAE="


def test_redrive_policy_moves_to_a_real_dead_letter_queue_and_back(sqs: Any, qname: str) -> None:
    dlq = sqs.create_queue(QueueName=qname + "-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2})
    src = sqs.create_queue(QueueName=qname, Attributes={"RedrivePolicy": policy})["QueueUrl"]
    assert json.loads(
        sqs.get_queue_attributes(QueueUrl=src, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"]
    ) == json.loads(policy)
    mid = sqs.send_message(
        QueueUrl=src, MessageBody="doomed", MessageAttributes={"k": {"DataType": "String", "StringValue": "v"}}
    )["MessageId"]
    for count in ("1", "2"):  # received and never deleted: visible again at once (VisibilityTimeout 0)
        (m,) = sqs.receive_message(QueueUrl=src, WaitTimeSeconds=5, VisibilityTimeout=0, AttributeNames=["All"])[
            "Messages"
        ]
        assert m["MessageId"] == mid and m["Attributes"]["ApproximateReceiveCount"] == count
    assert "Messages" not in sqs.receive_message(QueueUrl=src, WaitTimeSeconds=1), (
        "past maxReceiveCount it must leave the source"
    )
    (dead,) = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=5, MessageAttributeNames=["All"], VisibilityTimeout=0)[
        "Messages"
    ]
    assert dead["Body"] == "doomed" and dead["MessageAttributes"] == {"k": {"DataType": "String", "StringValue": "v"}}
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [src]
    assert sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
    deadline = time.monotonic() + 30  # the move runs in the background (engine/operations/mover.py)
    while (task := sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0])[
        "Status"
    ] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert task["Status"] == "COMPLETED" and task["ApproximateNumberOfMessagesMoved"] == 1 and "TaskHandle" not in task
    (back,) = sqs.receive_message(
        QueueUrl=src, WaitTimeSeconds=5, AttributeNames=["All"], MessageAttributeNames=["All"]
    )["Messages"]
    assert (
        back["Body"] == "doomed"
        and back["Attributes"]["ApproximateReceiveCount"] == "1"
        and back["MessageAttributes"]["k"]["StringValue"] == "v"
    )
    assert "Messages" not in sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=0)
    with pytest.raises(ClientError) as err:
        sqs.set_queue_attributes(
            QueueUrl=src,
            Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn + "-nope", "maxReceiveCount": 2})},
        )
    assert code(err.value) == "InvalidAttributeValue"

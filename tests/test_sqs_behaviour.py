"""Standard-queue behaviour exactly as Amazon SQS has it, checked from outside with real clients
(boto3 over the JSON protocol, signed query-protocol requests where the fix is protocol-specific)
against real ``casque serve`` processes on the test keyspace.

Where SQS's answer is not written in its API reference, the expected value is the one recorded
against AWS by other SQS implementations' test suites (e.g. the JSON ``__type`` names, the 404 of
a GET without an Action): each test says so.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from daemon.engine.client import Casque
from daemon.engine.delivery.receive import VisibilityTooLong
from daemon.engine.operations import queue_actions
from daemon.testing import sqsserver
from tests.conftest import TEST_KEYSPACE
from tests.test_sqs import code, make_client, raw_post, reference_md5_of_attributes
from tests.test_sqs_query import NS, query, text

TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
#: MD5OfMessageSystemAttributes AWS returned for {"AWSTraceHeader": String TRACE} (recorded against AWS).
TRACE_MD5_FROM_AWS = "5ae4d5d7636402d80f4eb6d213245a88"


@pytest.fixture(scope="module")
def other_server(settings: Any) -> Iterator[sqsserver.SqsServer]:
    """A second process on the same keyspace: what one server decides, the other must honour."""
    srv = sqsserver.start(TEST_KEYSPACE)
    yield srv
    srv.stop()


@pytest.fixture
def qname() -> str:
    return f"bhv-{uuid.uuid4().hex[:12]}"


def receive_one(sqs: Any, url: str, deadline_s: float = 20.0, **kw: Any) -> dict[str, Any] | None:
    """The next message received within the deadline (long polls, no sleeps), or None."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        wait = max(1, min(5, int(end - time.monotonic())))
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=wait, **kw).get("Messages", [])
        if got:
            return got[0]
    return None


def arn(sqs: Any, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def redrive(target_arn: str, count: int) -> dict[str, str]:
    return {"RedrivePolicy": json.dumps({"deadLetterTargetArn": target_arn, "maxReceiveCount": count})}


# ---- 1. RedrivePolicy applies to messages already sent ------------------------------------------
@pytest.mark.parametrize("before", [None, 5], ids=["set-after-send", "lowered-after-send"])
def test_redrive_policy_set_or_lowered_after_send_dead_letters_at_the_receive_past_max_receive_count(
    sqs: Any, qname: str, before: int | None
) -> None:
    dlq = sqs.create_queue(QueueName=qname + "-dlq")["QueueUrl"]
    attrs = redrive(arn(sqs, dlq), before) if before else {}
    url = sqs.create_queue(QueueName=qname, Attributes=attrs)["QueueUrl"]
    color = {"color": {"DataType": "String", "StringValue": "red"}}
    mid = sqs.send_message(QueueUrl=url, MessageBody="fails", MessageAttributes=color)["MessageId"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes=redrive(arn(sqs, dlq), 2))
    counts = []
    for _ in range(2):
        m = receive_one(sqs, url, VisibilityTimeout=0, AttributeNames=["All"])
        assert m is not None and m["MessageId"] == mid
        counts.append(m["Attributes"]["ApproximateReceiveCount"])
        sent = m["Attributes"]["SentTimestamp"]
    assert counts == ["1", "2"]
    # the receive past maxReceiveCount moves it (SQS: at that receive, not before)
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages") is None
    dead = receive_one(sqs, dlq, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"])
    assert dead is not None and dead["Body"] == "fails"
    assert dead["Attributes"]["DeadLetterQueueSourceArn"] == arn(sqs, url)
    # AWS keeps the id, the attributes, the enqueue timestamp and the receive count (LocalStack's
    # localstack/localstack#10425; AWS developer guide, dead-letter queues: "the enqueue timestamp is unchanged")
    assert (dead["MessageId"], dead["MessageAttributes"], dead["Attributes"]["SentTimestamp"]) == (mid, color, sent)
    assert dead["Attributes"]["ApproximateReceiveCount"] == "3", "its 2 receives there, and this one"


async def test_removing_the_redrive_policy_keeps_redelivering_and_poisons_nothing(
    sqs: Any, cq: Casque, qname: str
) -> None:
    dlq = sqs.create_queue(QueueName=qname + "-dlq")["QueueUrl"]
    url = sqs.create_queue(QueueName=qname, Attributes=redrive(arn(sqs, dlq), 1))["QueueUrl"]
    mid = sqs.send_message(QueueUrl=url, MessageBody="stays")["MessageId"]
    first = receive_one(sqs, url, VisibilityTimeout=0)
    assert first is not None and first["MessageId"] == mid
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
    assert "RedrivePolicy" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    for n in range(2, 6):  # far past the old maxReceiveCount of 1
        m = receive_one(sqs, url, VisibilityTimeout=0, AttributeNames=["ApproximateReceiveCount"])
        assert m is not None and m["MessageId"] == mid and m["Attributes"]["ApproximateReceiveCount"] == str(n)
    assert await cq.stores.poison.count(qname) == 0, "no policy: SQS redelivers until retention, never out of reach"
    assert sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=1).get("Messages") is None


async def test_a_message_sent_with_max_attempts_0_follows_the_queue_at_each_take(manual: Any, queue_name: str) -> None:
    """The engine rule under item 1: the limit is read at the take, not fixed at the send."""
    cq, clock = manual
    await cq.create_queue(queue_name, shards=1, buckets=1, max_attempts=0)
    mid = await cq.send(queue_name, "t", "x", max_attempts=0)
    for attempt in range(1, 8):  # queue 0: no limit
        (d,) = await cq.receive(queue_name, wait=0, visibility=1)
        assert (str(d.message.id), d.message.attempt) == (mid, attempt)
        clock.advance(1_500)
    await cq.stores.queues.update(queue_name, max_attempts=7)  # lowered below what it had: the next take poisons
    assert await cq.receive(queue_name, wait=0) == []
    assert [str(r.id) for r in await cq.stores.poison.list(queue_name)] == [mid]


async def test_visibility_cap_counts_12_hours_from_the_receive_not_from_the_change(
    manual: Any, queue_name: str
) -> None:
    cq, clock = manual
    await cq.create_queue(queue_name, shards=1, buckets=1)
    await cq.send(queue_name, "t", "x")
    (d,) = await cq.receive(queue_name, wait=0, visibility=3600)
    clock.advance(11 * 3600 * 1000)
    with pytest.raises(VisibilityTooLong):
        await cq.change_visibility(d.receipt, 3600 + 1)
    await cq.change_visibility(d.receipt, 3600)  # exactly 12 h after the receive: allowed
    clock.advance(3600 * 1000 + 1)
    (again,) = await cq.receive(queue_name, wait=0, visibility=43_200)
    assert await cq.change_visibility(again.receipt, 43_200) == clock.now_ms() + 43_200_000, (
        "a new receive starts a new 12 h"
    )


# ---- 2. ApproximateFirstReceiveTimestamp -----------------------------------------------------------
def test_first_receive_timestamp_stays_on_every_later_receive(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    sent_at = int(time.time() * 1000)
    sqs.send_message(QueueUrl=url, MessageBody="x")
    seen = []
    for _ in range(3):
        m = receive_one(
            sqs,
            url,
            VisibilityTimeout=0,
            MessageSystemAttributeNames=["ApproximateFirstReceiveTimestamp", "ApproximateReceiveCount"],
        )
        assert m is not None
        seen.append((m["Attributes"]["ApproximateReceiveCount"], m["Attributes"]["ApproximateFirstReceiveTimestamp"]))
    assert [c for c, _ in seen] == ["1", "2", "3"]
    firsts = {t for _, t in seen}
    assert len(firsts) == 1, f"the first receive's time on every receive: {seen}"
    assert sent_at - 5_000 <= int(firsts.pop()) <= int(time.time() * 1000)


# ---- 3. AWSTraceHeader ---------------------------------------------------------------------------
def test_aws_trace_header_is_kept_returned_and_digested_as_sqs_does(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    system = {"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}}
    user = {"timestamp": {"DataType": "Number", "StringValue": "1493147359900"}}
    plain = sqs.send_message(QueueUrl=url, MessageBody="a", MessageAttributes=user)
    traced = sqs.send_message(QueueUrl=url, MessageBody="b", MessageAttributes=user, MessageSystemAttributes=system)
    assert "MD5OfMessageSystemAttributes" not in plain
    assert (
        traced["MD5OfMessageSystemAttributes"]
        == TRACE_MD5_FROM_AWS
        == reference_md5_of_attributes({"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}})
    )
    assert traced["MD5OfMessageAttributes"] == plain["MD5OfMessageAttributes"], (
        "system attributes are not message attributes"
    )
    batch = sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "t", "MessageBody": "c", "MessageSystemAttributes": system}]
    )
    assert batch["Successful"][0]["MD5OfMessageSystemAttributes"] == TRACE_MD5_FROM_AWS
    got: dict[str, dict[str, Any]] = {}
    while len(got) < 3:
        m = receive_one(sqs, url, AttributeNames=["AWSTraceHeader"], MessageAttributeNames=["All"])
        assert m is not None
        got[m["Body"]] = m
    assert "Attributes" not in got["a"]
    assert got["b"]["Attributes"] == {"AWSTraceHeader": TRACE} == got["c"]["Attributes"]
    assert "AWSTraceHeader" not in got["b"]["MessageAttributes"]
    with pytest.raises(ClientError) as err:
        sqs.send_message(
            QueueUrl=url, MessageBody="x", MessageSystemAttributes={"Other": {"DataType": "String", "StringValue": "v"}}
        )
    assert code(err.value) == "InvalidParameterValue"
    with pytest.raises(ClientError) as err:
        sqs.send_message(
            QueueUrl=url,
            MessageBody="x",
            MessageSystemAttributes={"AWSTraceHeader": {"DataType": "Number", "StringValue": "1"}},
        )
    assert code(err.value) == "InvalidParameterValue"
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages") is None, "refused sends stored nothing"
    status, root = query(
        url,
        "SendMessage",
        {
            "MessageBody": "q",
            "MessageSystemAttribute.1.Name": "AWSTraceHeader",
            "MessageSystemAttribute.1.Value.DataType": "String",
            "MessageSystemAttribute.1.Value.StringValue": TRACE,
        },
    )
    assert status == 200 and text(root, "q:SendMessageResult/q:MD5OfMessageSystemAttributes") == TRACE_MD5_FROM_AWS
    _, root = query(url, "ReceiveMessage", {"WaitTimeSeconds": "5", "MessageSystemAttributeName.1": "AWSTraceHeader"})
    (attr,) = root.findall("q:ReceiveMessageResult/q:Message/q:Attribute", NS)
    assert (text(attr, "q:Name"), text(attr, "q:Value")) == ("AWSTraceHeader", TRACE)


def test_x_amzn_trace_id_header_becomes_the_aws_trace_header(server: sqsserver.SqsServer, qname: str) -> None:
    client = make_client(server.url)
    url = client.create_queue(QueueName=qname)["QueueUrl"]

    def add_header(request: Any, **_: Any) -> None:
        request.headers["X-Amzn-Trace-Id"] = TRACE

    client.meta.events.register("before-send.sqs.SendMessage", add_header)
    client.send_message(QueueUrl=url, MessageBody="x")
    m = receive_one(client, url, AttributeNames=["AWSTraceHeader"])
    assert m is not None and m["Attributes"] == {"AWSTraceHeader": TRACE}


# ---- 4. and 5. ChangeMessageVisibility -----------------------------------------------------------
def test_visibility_change_past_12_hours_from_the_receive_is_refused(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    m = receive_one(sqs, url, VisibilityTimeout=60)
    assert m is not None
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=43_000)
    with pytest.raises(ClientError) as err:  # 43,200 s from now is past 12 h from the receive, a moment ago
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=43_200)
    assert code(err.value) == "InvalidParameterValue"
    assert (
        "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"
        in err.value.response["Error"]["Message"]
    )
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesNotVisible"]) == ("0", "1"), (
        "refusal changed nothing"
    )
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    again = receive_one(sqs, url)
    assert again is not None and again["MessageId"] == m["MessageId"], "the receipt still worked after the refusal"


def test_visibility_change_of_a_deleted_message_is_invalid_parameter_value(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    m = receive_one(sqs, url)
    assert m is not None
    handle = m["ReceiptHandle"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=42)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)
    with pytest.raises(ClientError) as err:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=42)
    assert code(err.value) == "InvalidParameterValue"
    assert err.value.response["Error"]["Message"] == (
        f"Value {handle} for parameter ReceiptHandle is invalid. Reason: Message does not "
        "exist or is not available for visibility timeout change."
    )
    r = sqs.change_message_visibility_batch(
        QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": handle, "VisibilityTimeout": 5}]
    )
    assert [(f["Id"], f["Code"]) for f in r["Failed"]] == [("a", "InvalidParameterValue")]


def test_invalid_receipt_handle_is_404_in_both_protocols(sqs: Any, server: sqsserver.SqsServer, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    with pytest.raises(ClientError) as err:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle="garbage", VisibilityTimeout=5)
    assert (
        code(err.value) == "ReceiptHandleIsInvalid" and err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    )
    with pytest.raises(ClientError) as err:
        sqs.delete_message(QueueUrl=url, ReceiptHandle="garbage")
    assert err.value.response["Error"]["Message"] == 'The input receipt handle "garbage" is not a valid receipt handle.'
    status, root = query(url, "DeleteMessage", {"ReceiptHandle": "garbage"})
    assert status == 404 and text(root, "q:Error/q:Code") == "ReceiptHandleIsInvalid"


def test_missing_queue_is_worded_per_protocol_as_sqs(sqs: Any, server: sqsserver.SqsServer, qname: str) -> None:
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as err:
        sqs.get_queue_url(QueueName=qname)
    assert err.value.response["Error"]["Message"] == "The specified queue does not exist."
    status, root = query(server.url, "GetQueueUrl", {"QueueName": qname})
    assert (status, text(root, "q:Error/q:Code")) == (400, "AWS.SimpleQueueService.NonExistentQueue")
    assert text(root, "q:Error/q:Message") == "The specified queue does not exist for this wsdl version."


# ---- 6. QueueDeletedRecently ---------------------------------------------------------------------
def test_create_of_a_name_deleted_within_60_s_is_refused_by_every_server(
    sqs: Any, other_server: sqsserver.SqsServer, qname: str
) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    sqs.delete_queue(QueueUrl=url)
    other = make_client(other_server.url)
    for client in (sqs, other):
        with pytest.raises(ClientError) as err:
            client.create_queue(QueueName=qname)
        assert code(err.value) == "AWS.SimpleQueueService.QueueDeletedRecently"
        assert err.value.response["Error"]["Message"] == (
            "You must wait 60 seconds after deleting a queue before you can create another with the same name."
        )
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName=qname)
    sqs.create_queue(QueueName=qname + "-x")  # another name is not held up


# ---- 7. PurgeQueueInProgress, and what a purge spares --------------------------------------------
def test_second_purge_within_60_s_is_refused_by_every_server_and_later_sends_survive(
    sqs: Any, other_server: sqsserver.SqsServer, qname: str
) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"old{i}"} for i in range(5)])
    sqs.purge_queue(QueueUrl=url)
    sqs.send_message(QueueUrl=url, MessageBody="new")
    for client in (sqs, make_client(other_server.url)):
        with pytest.raises(ClientError) as err:
            client.purge_queue(QueueUrl=url)
        assert code(err.value) == "AWS.SimpleQueueService.PurgeQueueInProgress"
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        assert (
            err.value.response["Error"]["Message"]
            == f"Only one PurgeQueue operation on {qname} is allowed every 60 seconds."
        )
    m = receive_one(sqs, url)
    assert m is not None and m["Body"] == "new", "the refused purge deleted nothing"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages") is None, (
        "the purge left nothing it should delete"
    )


async def test_purge_spares_messages_sent_after_it_started(manual: Any, queue_name: str) -> None:
    """Whatever row a purge reads when: a message sent after its start (by enqueued_at) stays."""
    cq, clock = manual
    await cq.create_queue(queue_name, shards=2, buckets=1)
    old = {await cq.send(queue_name, "t", i) for i in range(6)}
    clock.advance(10)
    started = clock.now_ms()
    clock.advance(10)
    new = {await cq.send(queue_name, "t", i) for i in range(4)}
    assert await queue_actions.purge(cq.stores, queue_name, sent_before_ms=started) == len(old)
    left = {str(d.message.id) for d in await cq.receive(queue_name, max=20, wait=0)}
    assert left == new


# ---- 8. JSON-protocol error codes ------------------------------------------------------------------
def test_json_errors_carry_the_types_and_query_codes_sqs_sends(
    sqs: Any, server: sqsserver.SqsServer, qname: str
) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    j = {"content-type": "application/x-amz-json-1.0"}
    cases = [  # (target, body, __type recorded against AWS, x-amzn-query-error code, status)
        ("SendMessage", {"QueueUrl": url}, "MissingRequiredParameterException", "MissingParameter", 400),
        (
            "ReceiveMessage",
            {"QueueUrl": url, "MaxNumberOfMessages": 11},
            "InvalidParameterValueException",
            "InvalidParameterValue",
            400,
        ),
        (
            "GetQueueUrl",
            {"QueueName": qname + "-none"},
            "QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
            400,
        ),
        (
            "DeleteMessage",
            {"QueueUrl": url, "ReceiptHandle": "x"},
            "ReceiptHandleIsInvalid",
            "ReceiptHandleIsInvalid",
            404,
        ),
        ("Explode", {}, "UnknownOperationException", "InvalidAction", 400),
    ]
    for target, body, shape, query_code, status in cases:
        got, headers, raw = raw_post(server.url, json.dumps(body).encode(), j | {"x-amz-target": f"AmazonSQS.{target}"})
        headers = {k.lower(): v for k, v in headers.items()}
        assert (got, json.loads(raw)["__type"].split("#")[-1], headers["x-amzn-query-error"]) == (
            status,
            shape,
            f"{query_code};Sender",
        ), target
    with pytest.raises(ClientError) as err:  # boto3 sees what it sees against AWS
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11)
    assert (code(err.value), err.value.response["Error"]["QueryErrorCode"]) == (
        "InvalidParameterValue",
        "InvalidParameterValueException",
    )


# ---- 9. attribute-name filters on ReceiveMessage ---------------------------------------------------
def test_receive_filters_message_and_system_attribute_names_as_sqs(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname, Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
    attrs = {
        "Help.Me": {"DataType": "String", "StringValue": "Me"},
        "Hello": {"DataType": "String", "StringValue": "There"},
        "General": {"DataType": "String", "StringValue": "Kenobi"},
    }
    sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=attrs, MessageGroupId="g1")
    expected = {  # names asked -> message attributes given (as recorded against AWS)
        (): set(),
        ("All",): set(attrs),
        ("*",): set(attrs),
        (".*",): set(attrs),
        ("Hel.*",): {"Hello", "Help.Me"},
        ("Foo", "Help"): set(),
        ("Foo", "Hello"): {"Hello"},
        ("AWS.",): set(),
        ("..foo",): set(),
    }
    for names, want in expected.items():
        m = receive_one(sqs, url, MessageAttributeNames=list(names))
        assert m is not None and set(m.get("MessageAttributes", {})) == want, names
        if want:
            assert m["MD5OfMessageAttributes"] == reference_md5_of_attributes({k: attrs[k] for k in want})
    every = {
        "SenderId",
        "SentTimestamp",
        "ApproximateReceiveCount",
        "ApproximateFirstReceiveTimestamp",
        "MessageGroupId",
    }
    system = {
        ("All",): every,
        ("SenderId",): {"SenderId"},
        ("SenderId", "SequenceNumber", "NoSuchName"): {"SenderId"},
        ("MessageDeduplicationId",): set(),
    }
    for names, want in system.items():
        for key in ("AttributeNames", "MessageSystemAttributeNames"):
            asked: dict[str, Any] = {key: list(names)}  # AttributeNames or MessageSystemAttributeNames
            m = receive_one(sqs, url, **asked)
            assert m is not None and set(m.get("Attributes", {})) == want, (key, names)
    m = receive_one(sqs, url, MessageSystemAttributeNames=["All"], AttributeNames=["SenderId"])
    assert m is not None and set(m["Attributes"]) == every, "MessageSystemAttributeNames wins over AttributeNames"


# ---- 10. GET requests --------------------------------------------------------------------------------
def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_get_requests_are_query_protocol_from_the_url_only(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    assert _get(url) == (404, b"<UnknownOperationException/>"), "SQS's answer to a GET naming no action"
    status, root = query(url, "SendMessage", {"MessageBody": "by get"}, method="GET")
    assert status == 200 and text(root, "q:SendMessageResult/q:MessageId")
    status, root = query(url, "ReceiveMessage", {"WaitTimeSeconds": "5"}, method="GET")
    assert status == 200 and text(root, "q:ReceiveMessageResult/q:Message/q:Body") == "by get"
    for action in ("CreateQueue", "ListQueues"):  # service-level actions are not valid at a queue URL
        status, root = query(url, action, {"QueueName": qname + "-2"}, method="GET")
        assert status == 400 and text(root, "q:Error/q:Code") == "InvalidAction"
        assert text(root, "q:Error/q:Message") == f"The action {action} is not valid for this endpoint."
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName=qname + "-2")
    # a JSON target on a GET is not the JSON protocol: the URL's Action decides, the answer is XML
    status, body = _get(
        url + "?Action=GetQueueAttributes&AttributeName.1=VisibilityTimeout",
        {"x-amz-target": "AmazonSQS.PurgeQueue", "content-type": "application/x-amz-json-1.0"},
    )
    assert status == 200 and b"<GetQueueAttributesResponse" in body and b"<Value>30</Value>" in body


# ---- 11. MessageGroupId on a standard queue ------------------------------------------------------------
def test_message_group_id_on_a_standard_queue_is_kept_and_deduplication_id_refused(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="fair", MessageGroupId="tenant-1")
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "b", "MessageBody": "fair2", "MessageGroupId": "tenant-2"}])
    groups: dict[str, str] = {}
    while len(groups) < 2:
        m = receive_one(sqs, url, AttributeNames=["All"])
        assert m is not None
        groups[m["Body"]] = m["Attributes"]["MessageGroupId"]
    assert groups == {"fair": "tenant-1", "fair2": "tenant-2"}
    for bad in ("", "a" * 129, "group 123"):
        with pytest.raises(ClientError) as err:
            sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId=bad)
        assert code(err.value) == "InvalidParameterValue"
        assert err.value.response["Error"]["Message"] == (
            f"Value {bad} for parameter MessageGroupId is invalid. Reason: MessageGroupId can "
            "only include alphanumeric and punctuation characters. 1 to 128 in length."
        )
    with pytest.raises(ClientError) as err:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d")
    assert code(err.value) == "InvalidParameterValue"
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages") is None, "refused sends stored nothing"


# ---- 12. XML rendering of nested results -----------------------------------------------------------------
def test_xml_renders_nested_lists_and_maps_as_sqs_model(sqs: Any, server: sqsserver.SqsServer, qname: str) -> None:
    dlq = sqs.create_queue(QueueName=qname + "-dlq")["QueueUrl"]
    url = sqs.create_queue(QueueName=qname, Attributes=redrive(arn(sqs, dlq), 3), tags={"team": "a", "env": "t"})[
        "QueueUrl"
    ]
    sqs.start_message_move_task(SourceArn=arn(sqs, dlq))
    deadline = time.monotonic() + 30  # move tasks run in the background: wait for this one to end
    while sqs.list_message_move_tasks(SourceArn=arn(sqs, dlq))["Results"][0]["Status"] != "COMPLETED":
        assert time.monotonic() < deadline, "the move task did not complete within 30 s"
        time.sleep(0.1)
    status, root = query(server.url, "ListMessageMoveTasks", {"SourceArn": arn(sqs, dlq)})
    raw = ET.tostring(root).decode()
    assert status == 200 and "[{" not in raw and "{'" not in raw, raw
    entries = root.findall("q:ListMessageMoveTasksResult/q:ListMessageMoveTasksResultEntry", NS)
    assert (
        len(entries) == 1
        and text(entries[0], "q:Status") == "COMPLETED"
        and text(entries[0], "q:SourceArn") == arn(sqs, dlq)
    )
    _, root = query(url, "ListQueueTags", {})
    tags = {text(t, "q:Key"): text(t, "q:Value") for t in root.findall("q:ListQueueTagsResult/q:Tag", NS)}
    assert tags == {"team": "a", "env": "t"}
    _, root = query(dlq, "ListDeadLetterSourceQueues", {})
    assert [u.text for u in root.findall("q:ListDeadLetterSourceQueuesResult/q:QueueUrl", NS)] == [url]
    _, root = query(url, "GetQueueAttributes", {"AttributeName.1": "RedrivePolicy"})
    (attr,) = root.findall("q:GetQueueAttributesResult/q:Attribute", NS)
    assert json.loads(text(attr, "q:Value"))["maxReceiveCount"] == 3
    _, root = query(
        url,
        "ChangeMessageVisibilityBatch",
        {
            "ChangeMessageVisibilityBatchRequestEntry.1.Id": "a",
            "ChangeMessageVisibilityBatchRequestEntry.1.ReceiptHandle": "bad",
            "ChangeMessageVisibilityBatchRequestEntry.1.VisibilityTimeout": "5",
        },
    )
    (failed,) = root.findall("q:ChangeMessageVisibilityBatchResult/q:BatchResultErrorEntry", NS)
    assert (text(failed, "q:Id"), text(failed, "q:Code")) == ("a", "ReceiptHandleIsInvalid")


def test_batch_errors_are_worded_as_sqs_words_them(sqs: Any, qname: str) -> None:
    """Messages recorded against AWS (moto's aws_verified tests): the empty batch names its own
    entry type, and a repeated id names the first id met a second time (id_2 here, not id_1)."""
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    with pytest.raises(ClientError) as err:
        sqs.delete_message_batch(QueueUrl=url, Entries=[])
    assert code(err.value) == "AWS.SimpleQueueService.EmptyBatchRequest"
    assert (
        err.value.response["Error"]["Message"]
        == "There should be at least one DeleteMessageBatchRequestEntry in the request."
    )
    entries = [{"Id": i, "MessageBody": "b"} for i in ("id_1", "id_2", "id_2", "id_1")]
    with pytest.raises(ClientError) as err:
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert code(err.value) == "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
    assert err.value.response["Error"]["Message"] == "Id id_2 repeated."
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)


def test_a_delay_out_of_range_is_worded_as_aws_words_it_and_sends_nothing(sqs: Any, qname: str) -> None:
    """AWS's text as the Ballerina SQS connector's tests and a Go SDK user's tests recorded it against AWS; in a
    batch only that entry fails (moto's test_send_message_batch_reports_an_invalid_delay_per_entry)."""
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    for delay in (-1, 901):
        with pytest.raises(ClientError) as err:
            sqs.send_message(QueueUrl=url, MessageBody="b", DelaySeconds=delay)
        assert (code(err.value), err.value.response["Error"]["Message"]) == (
            "InvalidParameterValue",
            f"Value {delay} for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900.",
        )
    sent = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": "ok", "MessageBody": "ok"}, {"Id": "late", "MessageBody": "late", "DelaySeconds": 901}],
    )
    assert [e["Id"] for e in sent["Successful"]] == ["ok"]
    assert sent["Failed"] == [
        {
            "Id": "late",
            "SenderFault": True,
            "Code": "InvalidParameterValue",
            "Message": "Value 901 for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900.",
        }
    ]
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2)["Messages"]
    assert [m["Body"] for m in got] == ["ok"]


def test_tag_errors_are_refused_as_sqs_and_leave_the_tags(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname, tags={"k1": "v1"})["QueueUrl"]
    with pytest.raises(ClientError) as err:
        sqs.tag_queue(QueueUrl=url, Tags={})
    assert err.value.response["Error"]["Message"] == "The request must contain the parameter Tags."
    with pytest.raises(ClientError) as err:
        sqs.tag_queue(QueueUrl=url, Tags={f"k{i}": "v" for i in range(51)})
    assert err.value.response["Error"]["Message"] == f"Too many tags added for queue {qname}."
    with pytest.raises(ClientError) as err:
        sqs.tag_queue(QueueUrl=url, Tags={"x" * 129: "v"})
    assert code(err.value) == "InvalidParameterValue"
    with pytest.raises(ClientError) as err:
        sqs.untag_queue(QueueUrl=url, TagKeys=[])
    assert err.value.response["Error"]["Message"] == "Tag keys must be between 1 and 128 characters in length."
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"k1": "v1"}


def test_a_message_whose_visibility_expired_counts_as_visible_again(sqs: Any, qname: str) -> None:
    """SQS counts a message in ApproximateNumberOfMessages again once its visibility timeout has
    passed, before anyone receives it again (moto's test_message_becomes_inflight_when_received)."""
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    assert len(sqs.receive_message(QueueUrl=url, VisibilityTimeout=1, WaitTimeSeconds=5)["Messages"]) == 1
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]

    def counts() -> tuple[str, str]:
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        return attrs[names[0]], attrs[names[1]]

    assert counts() == ("0", "1")
    deadline = time.monotonic() + 10
    while counts() != ("1", "0"):
        assert time.monotonic() < deadline, f"still {counts()} 10 s after a 1 s visibility timeout"
        time.sleep(0.2)


# ---- 13. message attribute names and values (issue 47) -----------------------------------------------
def test_message_attribute_names_take_any_letters_and_bad_values_are_invalid_parameter_value(
    sqs: Any, server: sqsserver.SqsServer, qname: str
) -> None:
    """AWS's API reference: a name is alphanumeric characters, ``_``, ``-`` and ``.``, up to 256, not
    starting with AWS. or Amazon., no period first, last or twice. "Alphanumeric" is any script's:
    AWS accepts ``attr.1øßä`` and refuses ``§`` (recorded against AWS by LocalStack's
    test_send_message_with_invalid_string_attributes). A bad value is InvalidParameterValue with
    AWS's words where they were recorded (the empty String value: LocalStack's aws-validated
    test_send_message_with_empty_string_attribute; the bad type: the Ballerina SQS connector's tests
    against AWS), also for characters outside the allowed set (not the body's InvalidMessageContents)."""
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    attrs = {
        "attr.1øßä": {"DataType": "String", "StringValue": "Valida"},
        "名前": {"DataType": "String", "StringValue": "値"},
        "Ελληνικά_2": {"DataType": "Number", "StringValue": "2"},
        "a" * 256: {"DataType": "String", "StringValue": "the longest name"},
    }
    sent = sqs.send_message(QueueUrl=url, MessageBody="unicode names", MessageAttributes=attrs)
    assert sent["MD5OfMessageAttributes"] == reference_md5_of_attributes(attrs)
    got = receive_one(sqs, url, MessageAttributeNames=["All"])
    assert got is not None and got["MessageAttributes"] == attrs
    assert got["MD5OfMessageAttributes"] == reference_md5_of_attributes(attrs)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])

    def refusal(attributes: dict[str, Any]) -> tuple[str, str]:
        with pytest.raises(ClientError) as err:
            sqs.send_message(QueueUrl=url, MessageBody="refused", MessageAttributes=attributes)
        return code(err.value), str(err.value.response["Error"]["Message"])

    for bad_name in ("Invalid-§-attr", "aWs.x", "AMAZON.x", ".lead", "trail.", "two..dots", "a" * 257, "sp ace"):
        assert refusal({bad_name: {"DataType": "String", "StringValue": "v"}})[0] == "InvalidParameterValue", bad_name
    assert refusal({"ErrorDetails": {"DataType": "String", "StringValue": ""}}) == (
        "InvalidParameterValue",
        "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type 'String'.",
    )
    assert refusal({"n": {"DataType": "Number", "StringValue": ""}}) == (
        "InvalidParameterValue",
        "Message (user) attribute 'n' must contain a non-empty value of type 'Number'.",
    )
    assert refusal({"invalidAttribute": {"DataType": "InvalidType", "StringValue": "value"}}) == (
        "InvalidParameterValue",
        "The type of message (user) attribute 'invalidAttribute' is invalid. You must use only the following "
        "supported type prefixes: Binary, Number, String.",
    )
    bad_chars, message = refusal({"attr1": {"DataType": "String", "StringValue": f"Invalid-{chr(8)},{chr(11)}"}})
    assert bad_chars == "InvalidParameterValue" and "'attr1'" in message
    batch = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "empty", "MessageBody": "b", "MessageAttributes": {"e": {"DataType": "String", "StringValue": ""}}},
            {
                "Id": "ctrl",
                "MessageBody": "b",
                "MessageAttributes": {"c": {"DataType": "String", "StringValue": "\x01"}},
            },
        ],
    )
    assert sorted((f["Id"], f["Code"]) for f in batch["Failed"]) == [
        ("ctrl", "InvalidParameterValue"),
        ("empty", "InvalidParameterValue"),
    ]
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0), "a refused send wrote something"
    # the query protocol: a non-ASCII name travels form-encoded as UTF-8, digested the same way
    status, root = query(
        url,
        "SendMessage",
        {
            "MessageBody": "form",
            "MessageAttribute.1.Name": "größe",
            "MessageAttribute.1.Value.DataType": "String",
            "MessageAttribute.1.Value.StringValue": "M",
        },
    )
    want = reference_md5_of_attributes({"größe": {"DataType": "String", "StringValue": "M"}})
    assert status == 200 and text(root, "q:SendMessageResult/q:MD5OfMessageAttributes") == want
    status, root = query(
        url,
        "SendMessage",
        {
            "MessageBody": "form",
            "MessageAttribute.1.Name": "empty",
            "MessageAttribute.1.Value.DataType": "String",
            "MessageAttribute.1.Value.StringValue": "",
        },
    )
    assert (status, text(root, "q:Error/q:Code")) == (400, "InvalidParameterValue")
    assert (
        text(root, "q:Error/q:Message")
        == "Message (user) attribute 'empty' must contain a non-empty value of type 'String'."
    )


# ---- 14. message and batch sizes (issue 47) ------------------------------------------------------------
def test_a_batch_is_bounded_by_the_service_maximum_and_each_message_by_the_queues(sqs: Any, qname: str) -> None:
    """SendMessageBatch (API reference): "The maximum allowed individual message size and the maximum
    total payload size (the sum of the individual lengths of all of the batched messages) are both
    1 MiB 1,048,576 bytes". The total is SQS's 1 MiB whatever the queue's MaximumMessageSize, which
    bounds each message; BatchRequestTooLong names 1048576. Texts as recorded against AWS (LocalStack's
    aws-validated test_send_message_batch_with_oversized_contents, test_send_batch_message_size)."""
    url = sqs.create_queue(QueueName=qname, Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="a" * 1024)
    with pytest.raises(ClientError) as err:
        sqs.send_message(QueueUrl=url, MessageBody="a" * 1025)
    assert (code(err.value), err.value.response["Error"]["Message"]) == (
        "InvalidParameterValue",
        "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes.",
    )
    # ten entries of 1,000 bytes: 10,000 in all, over the queue's 1,024 but far under SQS's 1 MiB
    many = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "b" * 1000} for i in range(10)])
    assert len(many["Successful"]) == 10 and not many.get("Failed")
    mixed = sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "fits", "MessageBody": "a" * 1024}, {"Id": "over", "MessageBody": "a" * 1025}]
    )
    assert [s["Id"] for s in mixed["Successful"]] == ["fits"]
    assert [(f["Id"], f["Code"], f["Message"], f["SenderFault"]) for f in mixed["Failed"]] == [
        (
            "over",
            "InvalidParameterValue",
            "One or more parameters cannot be validated. Reason: Message must be shorter than 1024 bytes.",
            True,
        )
    ]
    attrs = {"k": {"DataType": "String", "StringValue": "x"}}  # 1 + 6 + 1 bytes count towards the total
    for queue_max in ("2048", "1048576"):
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": queue_max})
        too_long = [
            {"Id": "1", "MessageBody": "a" * (1_048_576 - 8 - 10), "MessageAttributes": attrs},
            {"Id": "2", "MessageBody": "a" * 11},
        ]
        with pytest.raises(ClientError) as err:
            sqs.send_message_batch(QueueUrl=url, Entries=too_long)
        assert (code(err.value), err.value.response["Error"]["Message"]) == (
            "AWS.SimpleQueueService.BatchRequestTooLong",
            "Batch requests cannot be longer than 1048576 bytes. You have sent 1048577 bytes.",
        ), queue_max
    just_fits = [
        {"Id": "1", "MessageBody": "a" * (1_048_576 - 8 - 10), "MessageAttributes": attrs},
        {"Id": "2", "MessageBody": "a" * 10},
    ]
    assert len(sqs.send_message_batch(QueueUrl=url, Entries=just_fits)["Successful"]) == 2
    counted = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert counted == {"ApproximateNumberOfMessages": str(1 + 10 + 1 + 2)}


# ---- 15. encryption attributes and defaults (issue 47) -------------------------------------------------
#: GetQueueAttributes All of a new standard queue, as AWS answered it (LocalStack's aws-validated
#: test_set_queue_attributes_default_values, recorded 2025-12-10), the timestamps and ARN aside.
AWS_NEW_QUEUE = {
    "ApproximateNumberOfMessages": "0",
    "ApproximateNumberOfMessagesDelayed": "0",
    "ApproximateNumberOfMessagesNotVisible": "0",
    "DelaySeconds": "0",
    "MaximumMessageSize": "1048576",
    "MessageRetentionPeriod": "345600",
    "ReceiveMessageWaitTimeSeconds": "0",
    "SqsManagedSseEnabled": "true",
    "VisibilityTimeout": "30",
}


def test_encryption_attributes_and_defaults_answer_as_aws_does(sqs: Any, qname: str) -> None:
    """SSE-SQS is on for a queue made without encryption attributes (AWS's default since 2022-10); a
    KmsMasterKeyId is kept and returned with its KmsDataKeyReusePeriodSeconds and turns SSE-SQS off;
    setting every attribute back to its default answers what AWS answered then (LocalStack's
    aws-validated test_set_queue_attributes_default_values and test_sse_queue_attributes); both kinds
    of SSE at once is AWS's InvalidAttributeName (test_sse_kms_and_sqs_are_mutually_exclusive).
    casque encrypts nothing: these are attributes kept and returned (docs/sqs.md)."""

    def every(url: str) -> dict[str, str]:
        got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        for name in ("CreatedTimestamp", "LastModifiedTimestamp", "QueueArn"):
            assert got.pop(name)
        return dict(got)

    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    assert every(url) == AWS_NEW_QUEUE
    dlq_arn = arn(sqs, sqs.create_queue(QueueName=qname + "-dlq")["QueueUrl"])
    changed = {
        "DelaySeconds": "5",
        "MaximumMessageSize": "2048",
        "MessageRetentionPeriod": "600",
        "ReceiveMessageWaitTimeSeconds": "2",
        "VisibilityTimeout": "45",
        "Policy": json.dumps(
            {"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "sqs:PurgeQueue", "Resource": "*"}]}
        ),
        "RedriveAllowPolicy": json.dumps({"redrivePermission": "denyAll"}),
        # compact, as SQS returns a RedrivePolicy
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3}, separators=(",", ":")),
    }
    sqs.set_queue_attributes(QueueUrl=url, Attributes=changed)
    assert every(url) == AWS_NEW_QUEUE | changed
    defaults = {name: AWS_NEW_QUEUE.get(name, "") for name in changed}
    sqs.set_queue_attributes(QueueUrl=url, Attributes=defaults)
    assert every(url) == AWS_NEW_QUEUE

    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"KmsMasterKeyId": "testKeyId", "KmsDataKeyReusePeriodSeconds": "6000"}
    )
    kms = {"KmsMasterKeyId": "testKeyId", "KmsDataKeyReusePeriodSeconds": "6000", "SqsManagedSseEnabled": "false"}
    assert every(url) == AWS_NEW_QUEUE | kms
    with pytest.raises(ClientError) as err:  # a key and SSE-SQS at once: one kind of SSE at a time
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"SqsManagedSseEnabled": "true"})
    assert (code(err.value), err.value.response["Error"]["Message"]) == (
        "InvalidAttributeName",
        "You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE.",
    )
    assert every(url) == AWS_NEW_QUEUE | kms, "the refused change changed something"
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"KmsMasterKeyId": "", "KmsDataKeyReusePeriodSeconds": "300"})
    assert every(url) == AWS_NEW_QUEUE | {"SqsManagedSseEnabled": "false"}  # as AWS: the key gone, SSE-SQS not back

    other = sqs.create_queue(QueueName=qname + "-sse")["QueueUrl"]
    names = ["KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled"]
    sqs.set_queue_attributes(QueueUrl=other, Attributes={"SqsManagedSseEnabled": "true"})
    assert sqs.get_queue_attributes(QueueUrl=other, AttributeNames=names)["Attributes"] == {
        "SqsManagedSseEnabled": "true"
    }
    with pytest.raises(ClientError) as err:
        sqs.set_queue_attributes(QueueUrl=other, Attributes={"KmsMasterKeyId": "k", "SqsManagedSseEnabled": "true"})
    assert code(err.value) == "InvalidAttributeName"
    with pytest.raises(ClientError) as err:
        sqs.set_queue_attributes(QueueUrl=other, Attributes={"SqsManagedSseEnabled": "maybe"})
    assert code(err.value) == "InvalidAttributeValue"
    keyed = sqs.create_queue(QueueName=qname + "-kms", Attributes={"KmsMasterKeyId": "alias/aws/sqs"})["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=keyed, AttributeNames=names)["Attributes"] == {
        "KmsMasterKeyId": "alias/aws/sqs",
        "KmsDataKeyReusePeriodSeconds": "300",
        "SqsManagedSseEnabled": "false",
    }
    assert (
        sqs.create_queue(QueueName=qname + "-kms", Attributes={"KmsMasterKeyId": "alias/aws/sqs"})["QueueUrl"] == keyed
    )

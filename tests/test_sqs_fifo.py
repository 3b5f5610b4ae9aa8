"""SQS FIFO queues and fair queues on ``casque serve``, checked from outside with boto3 (the JSON
protocol) and signed query-protocol requests, against a real server process on the test keyspace.

Error codes and texts are AWS's as recorded against AWS (LocalStack's validated snapshots, moto's
AWS-verified tests, the texts users quote from AWS); where none was found the test says so. Every
refused request is followed by a check that nothing was written (no queue, no message, no change).
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from daemon.testing import sqsserver
from tests.conftest import TEST_KEYSPACE
from tests.support.sqsfixtures import make_client
from tests.test_sqs_auth import casque, client
from tests.test_sqs_clients import JS
from tests.test_sqs_query import NS, query, text

FIFO_NAME = (
    "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end "
    "with .fifo suffix "
    "and be 1 to 80 in length"
)
STANDARD_NAME = "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
NEEDS_DEDUP = (
    "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly"
)
NEEDS_GROUP = "The request must contain the parameter MessageGroupId."


@pytest.fixture
def qname() -> str:
    return f"fifo-{uuid.uuid4().hex[:12]}"


def refused(call: Callable[[], Any], code: str, message: str | None = None, status: int = 400) -> dict[str, Any]:
    """The call fails with SQS's code (boto3's Error.Code: the query code), status and message."""
    with pytest.raises(ClientError) as err:
        call()
    e = err.value.response
    assert e["Error"]["Code"] == code, e["Error"]
    assert e["ResponseMetadata"]["HTTPStatusCode"] == status
    if message is not None:
        assert e["Error"]["Message"] == message
    return e


def fifo(sqs: Any, name: str, **attrs: str) -> str:
    return sqs.create_queue(QueueName=name + ".fifo", Attributes={"FifoQueue": "true", **attrs})["QueueUrl"]


def attributes(sqs: Any, url: str, *names: str) -> dict[str, str]:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(names) or ["All"]).get("Attributes", {})


def counts(sqs: Any, url: str) -> tuple[int, int, int]:
    """(visible, in flight, delayed): exact for a small queue (docs/sqs.md, "Approximate counts")."""
    a = attributes(
        sqs,
        url,
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    )
    return (
        int(a["ApproximateNumberOfMessages"]),
        int(a["ApproximateNumberOfMessagesNotVisible"]),
        int(a["ApproximateNumberOfMessagesDelayed"]),
    )


def receive(sqs: Any, url: str, wait: int = 2, **kw: Any) -> list[dict[str, Any]]:
    return sqs.receive_message(QueueUrl=url, WaitTimeSeconds=wait, **kw).get("Messages", [])


def receive_until(
    sqs: Any, url: str, pred: Callable[[list[dict[str, Any]]], bool], deadline_s: float = 30.0, **kw: Any
) -> list[dict[str, Any]]:
    """Long polls until a receive answers what ``pred`` accepts (no sleeps), or fail at the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = receive(sqs, url, wait=max(1, min(5, int(end - time.monotonic()))), **kw)
        if pred(got):
            return got
    raise AssertionError("no receive answered as expected before the deadline")


def send(sqs: Any, url: str, body: str, group: str, dedup: str | None = None, **kw: Any) -> dict[str, Any]:
    return sqs.send_message(
        QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=dedup or body, **kw
    )


# ---- queues ------------------------------------------------------------------------------------------
def test_create_refuses_a_fifo_name_and_fifoqueue_apart_with_aws_errors_and_creates_nothing(
    sqs: Any, qname: str
) -> None:
    stem75 = (qname + "x" * 80)[:75]
    cases = [
        (lambda: sqs.create_queue(QueueName=qname + ".fifo"), "InvalidParameterValue", STANDARD_NAME),
        (
            lambda: sqs.create_queue(QueueName=qname + ".fifo", Attributes={"FifoQueue": "false"}),
            "InvalidParameterValue",
            STANDARD_NAME,
        ),
        (
            lambda: sqs.create_queue(QueueName=qname, Attributes={"FifoQueue": "true"}),
            "InvalidParameterValue",
            FIFO_NAME,
        ),
        (
            lambda: sqs.create_queue(QueueName=stem75 + "y.fifo", Attributes={"FifoQueue": "true"}),
            "InvalidParameterValue",
            FIFO_NAME,
        ),
        (
            lambda: sqs.create_queue(QueueName=qname + "!.fifo", Attributes={"FifoQueue": "true"}),
            "InvalidParameterValue",
            FIFO_NAME,
        ),
        # a standard queue has no FIFO attributes (recorded against AWS: LocalStack's validated snapshot)
        (
            lambda: sqs.create_queue(QueueName=qname, Attributes={"FifoQueue": "false"}),
            "InvalidAttributeName",
            "Unknown Attribute FifoQueue.",
        ),
        (
            lambda: sqs.create_queue(QueueName=qname, Attributes={"ContentBasedDeduplication": "false"}),
            "InvalidAttributeName",
            "Unknown Attribute ContentBasedDeduplication.",
        ),
        (
            lambda: sqs.create_queue(QueueName=qname, Attributes={"DeduplicationScope": "queue"}),
            "InvalidAttributeName",
            "You can specify the DeduplicationScope only when FifoQueue is set to true.",
        ),
        (
            lambda: sqs.create_queue(QueueName=qname, Attributes={"FifoThroughputLimit": "perQueue"}),
            "InvalidAttributeName",
            "You can specify the FifoThroughputLimit only when FifoQueue is set to true.",
        ),
        # values (no AWS recording found of these texts: the codes are SQS's for a bad attribute value)
        (lambda: fifo(sqs, qname, DeduplicationScope="everything"), "InvalidAttributeValue", None),
        (lambda: fifo(sqs, qname, FifoThroughputLimit="perTenant"), "InvalidAttributeValue", None),
        (lambda: fifo(sqs, qname, ContentBasedDeduplication="maybe"), "InvalidAttributeValue", None),
        (lambda: fifo(sqs, qname, FifoThroughputLimit="perMessageGroupId"), "InvalidAttributeValue", None),
        (
            lambda: fifo(sqs, qname, DeduplicationScope="queue", FifoThroughputLimit="perMessageGroupId"),
            "InvalidAttributeValue",
            None,
        ),
    ]
    for call, code, message in cases:
        refused(call, code, message)
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix=qname), "a refused CreateQueue made no queue"
    url = fifo(sqs, stem75)  # 75 + ".fifo" = 80: the suffix counts in the 80, and fits
    assert url.endswith("/" + stem75 + ".fifo")
    assert attributes(sqs, url, "FifoQueue") == {"FifoQueue": "true"}


def test_fifo_attributes_round_trip_and_the_type_never_changes(sqs: Any, qname: str) -> None:
    url = fifo(sqs, qname)
    a = attributes(sqs, url)
    assert {
        k: a[k] for k in ("FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
    } == {
        "FifoQueue": "true",
        "ContentBasedDeduplication": "false",
        "DeduplicationScope": "queue",
        "FifoThroughputLimit": "perQueue",
    }
    assert a["QueueArn"].endswith(":" + qname + ".fifo") and a["VisibilityTimeout"] == "30"
    assert attributes(sqs, url, "DeduplicationScope") == {"DeduplicationScope": "queue"}
    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={
            "ContentBasedDeduplication": "True",
            "DeduplicationScope": "messageGroup",
            "FifoThroughputLimit": "perMessageGroupId",
        },
    )
    high = {
        "ContentBasedDeduplication": "true",
        "DeduplicationScope": "messageGroup",
        "FifoThroughputLimit": "perMessageGroupId",
    }
    assert attributes(sqs, url, *high) == high
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": "true"})  # repeating the type is accepted
    refused(
        lambda: sqs.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": "false"}),
        "InvalidAttributeValue",
        "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.",
    )
    # perMessageGroupId needs messageGroup: checked against the value an earlier call set
    refused(
        lambda: sqs.set_queue_attributes(QueueUrl=url, Attributes={"DeduplicationScope": "queue"}),
        "InvalidAttributeValue",
    )
    assert attributes(sqs, url, *high, "FifoQueue") == high | {"FifoQueue": "true"}, "refused changes changed nothing"
    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"FifoThroughputLimit": "perQueue", "DeduplicationScope": "queue"}
    )
    assert attributes(sqs, url, "DeduplicationScope", "FifoThroughputLimit") == {
        "DeduplicationScope": "queue",
        "FifoThroughputLimit": "perQueue",
    }
    # CreateQueue of the existing queue: the same attributes return it, another value is QueueAlreadyExists
    same = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    assert sqs.create_queue(QueueName=qname + ".fifo", Attributes=same)["QueueUrl"] == url
    refused(
        lambda: fifo(sqs, qname, ContentBasedDeduplication="false"),
        "QueueAlreadyExists",
        "A queue already exists with the same name and a different value for attribute ContentBasedDeduplication",
    )
    standard = sqs.create_queue(QueueName=qname)["QueueUrl"]
    refused(
        lambda: sqs.set_queue_attributes(QueueUrl=standard, Attributes={"FifoQueue": "true"}),
        "InvalidAttributeName",
        "Unknown Attribute FifoQueue.",
    )
    assert "FifoQueue" not in attributes(sqs, standard), "a standard queue has no FIFO attributes"


def test_a_fifo_queue_dead_letters_only_to_a_fifo_queue_and_a_standard_only_to_a_standard(sqs: Any, qname: str) -> None:
    fifo_dlq = fifo(sqs, qname + "-dlq")
    std_dlq = sqs.create_queue(QueueName=qname + "-sdlq")["QueueUrl"]
    fifo_arn, std_arn = (
        attributes(sqs, fifo_dlq, "QueueArn")["QueueArn"],
        attributes(sqs, std_dlq, "QueueArn")["QueueArn"],
    )
    for source_fifo, target in ((True, std_arn), (False, fifo_arn)):
        policy = json.dumps({"deadLetterTargetArn": target, "maxReceiveCount": 2})
        why = (
            f"Value {policy} for parameter RedrivePolicy is invalid. Reason: Dead-letter queue must be same type "
            "of queue as the source.."
        )
        create = (
            (lambda policy=policy: fifo(sqs, qname + "-src", RedrivePolicy=policy))
            if source_fifo
            else (
                lambda policy=policy: sqs.create_queue(QueueName=qname + "-src", Attributes={"RedrivePolicy": policy})
            )
        )
        refused(create, "InvalidParameterValue", why)
        plain = fifo(sqs, qname + "-p") if source_fifo else sqs.create_queue(QueueName=qname + "-p")["QueueUrl"]
        refused(
            functools.partial(sqs.set_queue_attributes, QueueUrl=plain, Attributes={"RedrivePolicy": policy}),
            "InvalidParameterValue",
            why,
        )
        assert "RedrivePolicy" not in attributes(sqs, plain), "the refused policy was not stored"
    assert not [u for u in sqs.list_queues(QueueNamePrefix=qname).get("QueueUrls", []) if "-src" in u]


# ---- sending -------------------------------------------------------------------------------------------
def test_fifo_sends_refused_as_sqs_refuses_them_write_nothing(sqs: Any, qname: str) -> None:
    url = fifo(sqs, qname)
    standard = sqs.create_queue(QueueName=qname)["QueueUrl"]
    bad_ids = ("", "a" * 129, "group 123", "é")
    cases: list[tuple[Callable[[], Any], str, str | None]] = [
        (
            lambda: sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d"),
            "MissingParameter",
            NEEDS_GROUP,
        ),
        (lambda: sqs.send_message(QueueUrl=url, MessageBody="x"), "MissingParameter", NEEDS_GROUP),
        (
            lambda: sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g"),
            "InvalidParameterValue",
            NEEDS_DEDUP,
        ),
        (
            lambda: send(sqs, url, "x", "g", DelaySeconds=5),
            "InvalidParameterValue",
            "Value 5 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid "
            "for this queue type.",
        ),
        # a batch entry without its group or dedup id fails the whole request (recorded against AWS)
        (
            lambda: sqs.send_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": "a", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "1"},
                    {"Id": "b", "MessageBody": "y", "MessageDeduplicationId": "2"},
                ],
            ),
            "InvalidParameterValue",
            NEEDS_GROUP,
        ),
        (
            lambda: sqs.send_message_batch(
                QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "x", "MessageGroupId": "g"}]
            ),
            "InvalidParameterValue",
            NEEDS_DEDUP,
        ),
        (
            lambda: sqs.send_message(QueueUrl=standard, MessageBody="x", MessageDeduplicationId="d"),
            "InvalidParameterValue",
            "Value d for parameter MessageDeduplicationId is invalid. Reason: The request include parameter that is "
            "not valid for this queue type.",
        ),
    ]
    for bad in bad_ids:
        for param in ("MessageGroupId", "MessageDeduplicationId"):
            ids = {"MessageGroupId": "g", "MessageDeduplicationId": "d", param: bad}
            cases.append(
                (
                    functools.partial(sqs.send_message, QueueUrl=url, MessageBody="x", **ids),
                    "InvalidParameterValue",
                    f"Value {bad} for parameter {param} is invalid. Reason: {param} can only include "
                    "alphanumeric and punctuation "
                    "characters. 1 to 128 in length.",
                )
            )
    for call, code, message in cases:
        refused(call, code, message)
    assert counts(sqs, url) == (0, 0, 0) and counts(sqs, standard) == (0, 0, 0), "nothing was written"
    # per-entry faults in a batch fail that entry only; the others are sent, with their SequenceNumber
    got = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "ok", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "1"},
            {"Id": "late", "MessageBody": "y", "MessageGroupId": "g", "MessageDeduplicationId": "2", "DelaySeconds": 3},
        ],
    )
    assert [e["Id"] for e in got["Successful"]] == ["ok"] and len(got["Successful"][0]["SequenceNumber"]) == 20
    assert [(e["Id"], e["Code"], e["SenderFault"]) for e in got["Failed"]] == [("late", "InvalidParameterValue", True)]
    longest = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~" + "a" * 96  # every punctuation character SQS allows, 128 in all
    assert send(sqs, url, "z", longest, longest, DelaySeconds=0)["SequenceNumber"], "DelaySeconds 0 is accepted on FIFO"
    assert counts(sqs, url) == (2, 0, 0)


def test_messages_of_each_group_come_in_order_with_sequence_numbers_increasing(sqs: Any, qname: str) -> None:
    url = fifo(sqs, qname)
    groups = ("a", "b", "c")
    sent: dict[str, list[tuple[str, str, str]]] = {g: [] for g in groups}  # group -> [(body, id, sequence)]
    for i in range(6):  # interleaved: a0 b0 c0 a1 b1 c1 ..., singles and batches
        if i % 2:
            entries = [
                {"Id": g, "MessageBody": f"{g}{i}", "MessageGroupId": g, "MessageDeduplicationId": f"{g}{i}"}
                for g in groups
            ]
            for e in sqs.send_message_batch(QueueUrl=url, Entries=entries)["Successful"]:
                sent[e["Id"]].append((f"{e['Id']}{i}", e["MessageId"], e["SequenceNumber"]))
        else:
            for g in groups:
                r = send(sqs, url, f"{g}{i}", g)
                sent[g].append((f"{g}{i}", r["MessageId"], r["SequenceNumber"]))
    for g in groups:
        seqs = [int(s) for _, _, s in sent[g]]
        assert seqs == sorted(seqs) and len(set(seqs)) == 6, f"SequenceNumber increases within group {g}"
    got: dict[str, list[tuple[str, str, str]]] = {g: [] for g in groups}
    end = time.monotonic() + 60
    while sum(map(len, got.values())) < 18 and time.monotonic() < end:
        for m in receive(sqs, url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]):
            a = m["Attributes"]
            got[a["MessageGroupId"]].append((m["Body"], m["MessageId"], a["SequenceNumber"]))
            assert a["MessageDeduplicationId"] == m["Body"]
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert got == sent, "every group in the order sent, each message once, with the sequence number the send returned"


def test_a_group_waits_while_its_message_is_in_flight_then_goes_on_in_order(sqs: Any, qname: str) -> None:
    url = fifo(sqs, qname)
    for body in ("a1", "a2", "a3"):
        send(sqs, url, body, "A")
    send(sqs, url, "b1", "B")
    first: list[str] = []
    while True:  # one at a time: A's head and B's head, and nothing behind A's head while it is in flight
        got = receive(sqs, url, MaxNumberOfMessages=1, VisibilityTimeout=60)
        if not got:
            break
        first.append(got[0]["Body"])
        if got[0]["Body"] == "a1":
            a1 = got[0]["ReceiptHandle"]
    assert sorted(first) == ["a1", "b1"], first
    assert counts(sqs, url) == (2, 2, 0), "a2 and a3 wait (visible), a1 and b1 are in flight"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=a1)
    (m,) = receive_until(
        sqs,
        url,
        bool,
        MaxNumberOfMessages=1,
        VisibilityTimeout=4,
        MessageSystemAttributeNames=["ApproximateReceiveCount"],
    )
    assert (m["Body"], m["Attributes"]["ApproximateReceiveCount"]) == ("a2", "1"), (
        "after the delete: the group's next message"
    )
    assert receive(sqs, url, wait=1, MaxNumberOfMessages=10) == [], "a2 in flight holds a3 back"
    (m,) = receive_until(sqs, url, bool, MaxNumberOfMessages=1, MessageSystemAttributeNames=["ApproximateReceiveCount"])
    assert (m["Body"], m["Attributes"]["ApproximateReceiveCount"]) == ("a2", "2"), (
        "after its visibility timeout: a2 again, not a3"
    )
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    (m,) = receive_until(sqs, url, bool, MaxNumberOfMessages=1)
    assert m["Body"] == "a3"


# ---- which group a receive serves first (AWS's orders: LocalStack's aws-validated FIFO tests) ------------
def bodies(got: list[dict[str, Any]]) -> list[str]:
    return [m["Body"] for m in got]


def send_all(sqs: Any, url: str, *names: str) -> None:
    """``g1-m1``-style bodies, one send each in this order, the group the part before the dash."""
    for body in names:
        send(sqs, url, body, body.split("-")[0])


def wait_counts(sqs: Any, url: str, visible: int, in_flight: int) -> None:
    """Poll the counts until ``visible`` messages wait and ``in_flight`` are in flight (a visibility ran out)."""
    end = time.monotonic() + 30
    while counts(sqs, url)[:2] != (visible, in_flight):
        assert time.monotonic() < end, "the visibility did not end"
        time.sleep(0.1)


def test_a_receive_returns_as_many_of_one_group_as_it_can_before_the_next(
    sqs: Any, server: sqsserver.SqsServer, qname: str
) -> None:
    # AWS developer guide, "FIFO queue delivery logic": "SQS first attempts to return as many messages with the
    # same message group ID as possible"; the order AWS answered: test_fifo_receive_message_group_id_ordering
    url = fifo(sqs, qname)
    send_all(sqs, url, "g1-m1", "g2-m1", "g1-m2", "g1-m3")
    assert bodies(receive(sqs, url, MaxNumberOfMessages=10)) == ["g1-m1", "g1-m2", "g1-m3", "g2-m1"]
    # the query protocol, the same order
    url = fifo(sqs, qname + "-q")
    send_all(sqs, url, "g1-m1", "g2-m1", "g1-m2", "g1-m3")
    status, root = query(url, "ReceiveMessage", {"MaxNumberOfMessages": "10", "WaitTimeSeconds": "2"})
    assert status == 200
    got = [text(m, "q:Body") for m in root.findall("q:ReceiveMessageResult/q:Message", NS)]
    assert got == ["g1-m1", "g1-m2", "g1-m3", "g2-m1"]


def test_the_groups_of_one_batch_come_in_the_order_sent(sqs: Any, qname: str) -> None:
    """Sent together, the groups became visible at once: the batch's order decides (moto's
    test_fifo_send_message_batch expects it). Several rounds: one that happened to come in order proves nothing."""
    url = fifo(sqs, qname)
    for r in range(5):
        sent = [f"r{r}g{i}-m" for i in range(10)]
        entries = [
            {"Id": str(i), "MessageBody": b, "MessageGroupId": b.split("-")[0], "MessageDeduplicationId": b}
            for i, b in enumerate(sent)
        ]
        assert len(sqs.send_message_batch(QueueUrl=url, Entries=entries)["Successful"]) == 10
        got = receive(sqs, url, MaxNumberOfMessages=10)
        assert bodies(got) == sent, f"round {r}"
        sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
        )


def test_a_group_visible_again_after_its_timeout_comes_after_the_groups_waiting_longer(sqs: Any, qname: str) -> None:
    # AWS: test_fifo_receive_message_visibility_timeout_shared_in_group
    url = fifo(sqs, qname, VisibilityTimeout="1")
    send_all(sqs, url, "g1-m1", "g1-m2", "g1-m3", "g1-m4", "g2-m1", "g3-m1")
    assert bodies(receive(sqs, url, MaxNumberOfMessages=2)) == ["g1-m1", "g1-m2"]
    assert bodies(receive(sqs, url, MaxNumberOfMessages=1)) == ["g2-m1"], "group 1 is in flight as a whole"
    wait_counts(sqs, url, 6, 0)
    got = receive(sqs, url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    assert bodies(got) == ["g3-m1", "g1-m1", "g1-m2", "g1-m3", "g1-m4", "g2-m1"], (
        "g3 waits since its send, g1 since its timeout ended, g2 since its own ended later"
    )


def test_a_receive_with_visibility_zero_puts_its_groups_behind_the_others(sqs: Any, qname: str) -> None:
    # AWS: test_fifo_receive_message_with_zero_visibility_timeout
    url = fifo(sqs, qname)
    send_all(sqs, url, "g1-m1", "g2-m1", "g2-m2", "g3-m1", "g1-m2")
    got = receive(sqs, url, MaxNumberOfMessages=3, VisibilityTimeout=0)
    assert bodies(got) == ["g1-m1", "g1-m2", "g2-m1"]
    got = receive(sqs, url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    assert bodies(got) == ["g3-m1", "g1-m1", "g1-m2", "g2-m1", "g2-m2"]


@pytest.mark.parametrize("visibility", [0, 1])
def test_a_message_made_visible_again_comes_after_a_group_waiting_and_its_group_still_waits_behind_it(
    sqs: Any, qname: str, visibility: int
) -> None:
    # AWS: test_fifo_message_group_visibility_after_terminate_visibility_timeout (0) and
    # test_fifo_message_group_visibility_after_change_message_visibility (1)
    url = fifo(sqs, qname, VisibilityTimeout="30")
    send_all(sqs, url, "g1-m1", "g1-m2", "g2-m1")
    first = receive(sqs, url, MaxNumberOfMessages=2)
    assert bodies(first) == ["g1-m1", "g1-m2"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"], VisibilityTimeout=visibility)
    wait_counts(sqs, url, 2, 1)  # g2-m1 and g1-m1 visible, g1-m2 still in flight
    assert bodies(receive(sqs, url, MaxNumberOfMessages=3)) == ["g2-m1", "g1-m1"], "g1-m2 keeps its 30 s"


def test_a_group_unblocked_by_deletes_takes_its_place_by_its_next_messages_send(sqs: Any, qname: str) -> None:
    # AWS: test_fifo_message_group_visibility_after_delete and ..._after_partial_delete
    for partial in (True, False):
        url = fifo(sqs, f"{qname}-{partial}")
        send_all(sqs, url, "g1-m1", "g2-m1", "g1-m2", "g2-m2", "g1-m3", "g1-m4", "g3-m1")
        got = receive(sqs, url, MaxNumberOfMessages=2)
        assert bodies(got) == ["g1-m1", "g1-m2"]
        for m in got[:1] if partial else got:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        expected = ["g2-m1", "g2-m2", "g3-m1"] if partial else ["g2-m1", "g2-m2", "g1-m3", "g1-m4", "g3-m1"]
        assert bodies(receive(sqs, url, MaxNumberOfMessages=10)) == expected, (
            "a partial delete leaves group 1 in flight; a whole one puts it where g1-m3 was sent"
        )


def test_a_delete_after_the_visibility_ended_is_refused_on_fifo_and_deletes_nothing(
    sqs: Any, server: sqsserver.SqsServer, qname: str
) -> None:
    # AWS's answers as users recorded them: DeleteMessage InvalidParameterValue "... Reason: The receipt handle has
    # expired." (aws/aws-sdk-js#1279), a DeleteMessageBatch entry ReceiptHandleIsInvalid (smaskalik/sqsmover#54)
    url = fifo(sqs, qname)
    send_all(sqs, url, "g1-m1", "g1-m2")
    (m,) = receive(sqs, url, MaxNumberOfMessages=1, VisibilityTimeout=1)
    wait_counts(sqs, url, 2, 0)  # its visibility ran out: not received again yet
    handle = m["ReceiptHandle"]
    refused(
        lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle=handle),
        "InvalidParameterValue",
        f"Value {handle} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.",
    )
    out = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": handle}])
    assert out.get("Successful", []) == [] and out["Failed"] == [
        {"Id": "a", "SenderFault": True, "Code": "ReceiptHandleIsInvalid", "Message": "The receipt handle has expired"}
    ]
    status, root = query(url, "DeleteMessage", {"ReceiptHandle": handle})
    assert (status, text(root, "q:Error/q:Code")) == (400, "InvalidParameterValue")
    assert counts(sqs, url) == (2, 0, 0), "nothing was deleted"
    # received again: the old receipt stays refused, the new one deletes
    (again,) = receive(sqs, url, MaxNumberOfMessages=1, VisibilityTimeout=30)
    assert again["Body"] == "g1-m1"
    refused(lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle=handle), "InvalidParameterValue")
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    # a visibility changed to 0 ends it too (AWS: "handles with a VisibilityTimeout of 0 cannot be deleted",
    # aws/aws-sdk-js#1750)
    (m2,) = receive(sqs, url, MaxNumberOfMessages=1, VisibilityTimeout=30)
    assert m2["Body"] == "g1-m2"
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m2["ReceiptHandle"], VisibilityTimeout=0)
    refused(lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle=m2["ReceiptHandle"]), "InvalidParameterValue")
    assert counts(sqs, url) == (1, 0, 0)
    # a standard queue's delete after the visibility ended still deletes (SQS: "might not be deleted", no error)
    std = sqs.create_queue(QueueName=qname + "-std")["QueueUrl"]
    sqs.send_message(QueueUrl=std, MessageBody="s")
    (s1,) = receive(sqs, std, VisibilityTimeout=1)
    wait_counts(sqs, std, 1, 0)
    sqs.delete_message(QueueUrl=std, ReceiptHandle=s1["ReceiptHandle"])
    assert counts(sqs, std) == (0, 0, 0)


def test_a_send_repeated_within_the_window_is_one_message(sqs: Any, qname: str) -> None:
    url = fifo(sqs, qname)
    one = send(sqs, url, "first", "g", "d1")
    again = send(sqs, url, "second body", "g", "d1")
    assert (again["MessageId"], again["SequenceNumber"]) == (one["MessageId"], one["SequenceNumber"]), (
        "the first send's id and sequence"
    )
    batch = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "x", "MessageBody": "third", "MessageGroupId": "g", "MessageDeduplicationId": "d1"},
            {"Id": "y", "MessageBody": "new", "MessageGroupId": "g", "MessageDeduplicationId": "d2"},
        ],
    )
    by_id = {e["Id"]: e for e in batch["Successful"]}
    assert by_id["x"]["MessageId"] == one["MessageId"] and by_id["y"]["MessageId"] != one["MessageId"]
    bodies = []
    for _ in range(2):
        (m,) = receive_until(sqs, url, bool, MaxNumberOfMessages=1)
        bodies.append(m["Body"])
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert bodies == ["first", "new"], "one delivery of the deduplicated message"
    assert send(sqs, url, "after delete", "g", "d1")["MessageId"] == one["MessageId"], (
        "the window outlives the delete (as SQS)"
    )
    assert counts(sqs, url) == (0, 0, 0)


def test_content_based_deduplication_is_the_sha256_of_the_body(sqs: Any, qname: str) -> None:
    url = fifo(sqs, qname, ContentBasedDeduplication="true")
    one = sqs.send_message(QueueUrl=url, MessageBody="same body", MessageGroupId="g")
    assert sqs.send_message(QueueUrl=url, MessageBody="same body", MessageGroupId="g")["MessageId"] == one["MessageId"]
    other = sqs.send_message(QueueUrl=url, MessageBody="other body", MessageGroupId="g")
    explicit = sqs.send_message(
        QueueUrl=url, MessageBody="same body", MessageGroupId="g", MessageDeduplicationId="mine"
    )
    assert len({one["MessageId"], other["MessageId"], explicit["MessageId"]}) == 3, (
        "an explicit id wins over the content"
    )
    seen = []
    for _ in range(3):
        (m,) = receive_until(sqs, url, bool, MessageSystemAttributeNames=["MessageDeduplicationId"])
        seen.append((m["Body"], m["Attributes"]["MessageDeduplicationId"]))
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert seen == [
        ("same body", hashlib.sha256(b"same body").hexdigest()),
        ("other body", hashlib.sha256(b"other body").hexdigest()),
        ("same body", "mine"),
    ]


def test_deduplication_scope_message_group_keeps_ids_apart_per_group(sqs: Any, qname: str) -> None:
    per_group = fifo(sqs, qname, DeduplicationScope="messageGroup")
    per_queue = fifo(sqs, qname + "-q")
    g1, g2, g1_again = (send(sqs, per_group, b, g, "same") for b, g in (("1", "g1"), ("2", "g2"), ("3", "g1")))
    assert g1["MessageId"] != g2["MessageId"] and g1_again["MessageId"] == g1["MessageId"]
    q1, q2 = (send(sqs, per_queue, b, g, "same") for b, g in (("1", "g1"), ("2", "g2")))
    assert q1["MessageId"] == q2["MessageId"], "scope queue: one id across groups"
    assert counts(sqs, per_group)[0] == 2 and counts(sqs, per_queue)[0] == 1


@pytest.mark.parametrize("created", ["queue", "messageGroup"])
def test_a_deduplication_scope_changed_after_creation_deduplicates_as_the_creation_did(
    sqs: Any, qname: str, created: str
) -> None:
    """AWS's answers as LocalStack's aws-validated test_fifo_change_to_high_throughput_after_creation and
    test_fifo_change_to_regular_throughput_after_creation recorded them: the new scope is answered by
    GetQueueAttributes, and the sends after the change, of an id sent before or of a new one, are deduplicated by
    the scope the queue was created with."""
    high = {"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}
    regular = {"DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue"}
    url = fifo(sqs, qname, **(high if created == "messageGroup" else regular))
    before = [send(sqs, url, f"m{g}", f"g{g}", "same")["MessageId"] for g in (1, 2)]
    sqs.set_queue_attributes(QueueUrl=url, Attributes=regular if created == "messageGroup" else high)
    assert attributes(sqs, url, *high) == (regular if created == "messageGroup" else high)
    after = [send(sqs, url, f"m{g}", f"g{g}", dedup)["MessageId"] for g, dedup in ((3, "same"), (4, "new"), (5, "new"))]
    if created == "queue":  # one id per queue, before the change and after it
        assert before[1] == before[0] and after[0] == before[0] and after[2] == after[1] != before[0]
        expected = ["m1", "m4"]
    else:  # one id per group, before the change and after it
        assert len(set(before + after)) == 5
        expected = ["m1", "m2", "m3", "m4", "m5"]
    bodies: list[str] = []
    while len(bodies) < len(expected):
        for m in receive_until(sqs, url, bool, MaxNumberOfMessages=10):
            bodies.append(m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert sorted(bodies) == expected and counts(sqs, url) == (0, 0, 0), "each message once, no duplicate written"


def test_a_retried_receive_with_the_same_attempt_id_returns_the_same_receipts(sqs: Any, qname: str) -> None:
    url = fifo(sqs, qname)
    for g in ("a", "b", "c"):
        send(sqs, url, g, g)
    first = receive_until(
        sqs, url, bool, MaxNumberOfMessages=10, ReceiveRequestAttemptId="attempt-1", VisibilityTimeout=60
    )
    retry = receive(sqs, url, MaxNumberOfMessages=10, ReceiveRequestAttemptId="attempt-1", VisibilityTimeout=60)
    assert [(m["MessageId"], m["ReceiptHandle"]) for m in retry] == [
        (m["MessageId"], m["ReceiptHandle"]) for m in first
    ]
    rest: list[dict[str, Any]] = []
    end = time.monotonic() + 30
    while len(first) + len(rest) < 3 and time.monotonic() < end:  # other attempts get only what the first did not
        rest += receive(
            sqs, url, MaxNumberOfMessages=10, ReceiveRequestAttemptId=f"attempt-{2 + len(rest)}", VisibilityTimeout=60
        )
    assert sorted(m["Body"] for m in first + rest) == ["a", "b", "c"], "each message delivered to one attempt"
    refused(
        lambda: receive(sqs, url, ReceiveRequestAttemptId="two words"),
        "InvalidParameterValue",
        "Value two words for parameter ReceiveRequestAttemptId is invalid. Reason: ReceiveRequestAttemptId can "
        "only include alphanumeric "
        "and punctuation characters. 1 to 128 in length.",
    )
    for m in first + rest:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert counts(sqs, url) == (0, 0, 0)


def test_dedup_and_attempt_ids_hold_across_two_servers(sqs: Any, qname: str) -> None:
    """What one `casque serve` decided, another honours: a duplicate sent through a second process
    is the first send's message, and a receive retried there returns the same receipts."""
    other = sqsserver.start(TEST_KEYSPACE)
    try:
        b = make_client(other.url)
        url = fifo(sqs, qname)
        url_b = url.replace(url.split("/000000000000/")[0], other.url)
        one = send(sqs, url, "once", "g", "d1")
        again = send(b, url_b, "once", "g", "d1")
        assert (again["MessageId"], again["SequenceNumber"]) == (one["MessageId"], one["SequenceNumber"])
        first = receive_until(sqs, url, bool, ReceiveRequestAttemptId="a-1", VisibilityTimeout=60)
        retry = receive(b, url_b, ReceiveRequestAttemptId="a-1", VisibilityTimeout=60)
        assert [m["ReceiptHandle"] for m in retry] == [m["ReceiptHandle"] for m in first]
        b.delete_message(QueueUrl=url_b, ReceiptHandle=retry[0]["ReceiptHandle"])
        assert counts(sqs, url) == (0, 0, 0), "one message, delivered once"
    finally:
        other.stop()


@pytest.mark.parametrize("scope", ["queue", "messageGroup"])
def test_a_purge_clears_the_deduplication_window_for_every_server(sqs: Any, qname: str, scope: str) -> None:
    """SQS's PurgeQueue ends the deduplication of what was sent before it: the same id sent again after
    the purge is a new message (recorded against AWS by LocalStack's aws-validated
    test_purge_queue_clears_fifo_deduplication_cache), then deduplicated as any other, through any
    server (the purge mark in Cassandra, engine/send/fifo_send.py; no server's cache is involved)."""
    other = sqsserver.start(TEST_KEYSPACE)
    try:
        b = make_client(other.url)
        url = fifo(sqs, qname, DeduplicationScope=scope)
        url_b = url.replace(url.split("/000000000000/")[0], other.url)
        before = send(sqs, url, "message-1", "g", "d-1")
        assert send(b, url_b, "message-1 again", "g", "d-1")["MessageId"] == before["MessageId"]
        sqs.purge_queue(QueueUrl=url)
        after = send(b, url_b, "message-2", "g", "d-1")
        assert after["MessageId"] != before["MessageId"] and after["SequenceNumber"] > before["SequenceNumber"]
        repeat = send(sqs, url, "message-2 again", "g", "d-1")
        assert (repeat["MessageId"], repeat["SequenceNumber"]) == (after["MessageId"], after["SequenceNumber"])
        got = receive_until(sqs, url, bool, VisibilityTimeout=60)
        assert [m["Body"] for m in got] == ["message-2"]
        sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
        assert send(b, url_b, "message-2 once more", "g", "d-1")["MessageId"] == after["MessageId"]
        assert counts(sqs, url) == (0, 0, 0), "a duplicate was written"
    finally:
        other.stop()


@pytest.fixture
def two_keys(settings: Any) -> Iterator[list[dict[str, str]]]:
    made = []
    for _ in range(2):
        out = casque("sqs-keys", "create", "--description", "fifo-attempt-test", "--json")
        assert out.returncode == 0, out.stderr
        made.append(json.loads(out.stdout))
    yield made
    for k in made:
        casque("sqs-keys", "delete", k["access_key_id"])


def test_another_key_replaying_an_attempt_id_gets_nothing_of_that_receive(
    two_keys: list[dict[str, str]], qname: str
) -> None:
    """The attack: key B sends key A's ReceiveRequestAttemptId hoping for A's receipt handles (and so
    the power to delete A's messages). B gets none of them; A's retry still gets its own."""
    srv = sqsserver.start(TEST_KEYSPACE, "--auth", "sigv4")
    try:
        a, b = (client(srv.url, k["access_key_id"], k["secret_access_key"]) for k in two_keys)
        url = fifo(a, qname)
        send(a, url, "secret", "g")
        send(a, url, "other", "h")
        first = receive_until(
            a, url, bool, MaxNumberOfMessages=1, ReceiveRequestAttemptId="shared-id", VisibilityTimeout=60
        )
        stolen = receive(
            b, url, wait=1, MaxNumberOfMessages=10, ReceiveRequestAttemptId="shared-id", VisibilityTimeout=60
        )
        mine = {m["ReceiptHandle"] for m in first}
        assert not mine & {m["ReceiptHandle"] for m in stolen}, "B got none of A's receipts"
        assert [m["Body"] for m in stolen] in ([], ["other"] if first[0]["Body"] == "secret" else ["secret"]), (
            "only what A did not take"
        )
        retry = receive(a, url, MaxNumberOfMessages=1, ReceiveRequestAttemptId="shared-id", VisibilityTimeout=60)
        assert {m["ReceiptHandle"] for m in retry} == mine, "A's retry still returns A's receive"
        for m in first + stolen:
            (a if m in first else b).delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        assert counts(a, url) == (0, 0, 0)
    finally:
        srv.stop()


def test_a_fifo_dead_letter_queue_takes_the_message_and_the_group_moves_on(sqs: Any, qname: str) -> None:
    dlq = fifo(sqs, qname + "-dlq")
    policy = json.dumps({"deadLetterTargetArn": attributes(sqs, dlq, "QueueArn")["QueueArn"], "maxReceiveCount": 2})
    url = fifo(sqs, qname, RedrivePolicy=policy, VisibilityTimeout="1")
    send(sqs, url, "poison", "g")
    send(sqs, url, "next", "g")
    for n in ("1", "2"):  # received twice and never deleted
        (m,) = receive_until(
            sqs, url, bool, MaxNumberOfMessages=1, MessageSystemAttributeNames=["ApproximateReceiveCount"]
        )
        assert (m["Body"], m["Attributes"]["ApproximateReceiveCount"]) == ("poison", n)
    (m,) = receive_until(sqs, url, bool, MaxNumberOfMessages=1)
    assert m["Body"] == "next", "past maxReceiveCount the group's next message is delivered"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    (d,) = receive_until(sqs, dlq, bool, MessageSystemAttributeNames=["All"], VisibilityTimeout=0)
    assert d["Body"] == "poison" and d["Attributes"]["MessageGroupId"] == "g"
    assert d["Attributes"]["DeadLetterQueueSourceArn"].endswith(":" + qname + ".fifo")
    # redrive: StartMessageMoveTask puts it back into the FIFO source, in its group
    dlq_arn = attributes(sqs, dlq, "QueueArn")["QueueArn"]
    sqs.start_message_move_task(SourceArn=dlq_arn)
    (back,) = receive_until(sqs, url, bool, MessageSystemAttributeNames=["MessageGroupId"])
    assert (back["Body"], back["Attributes"]["MessageGroupId"]) == ("poison", "g")
    end = time.monotonic() + 30
    while (
        sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]["Status"] == "RUNNING" and time.monotonic() < end
    ):
        receive(sqs, dlq, wait=1)  # a bounded wait between looks, not a hope: the loop ends on the status
    assert sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]["Status"] == "COMPLETED"


def test_a_fifo_dead_letter_keeps_its_id_body_attributes_and_receive_count(sqs: Any, qname: str) -> None:
    # AWS keeps them (LocalStack's localstack/localstack#10425): a source with content-based deduplication
    dlq = fifo(sqs, qname + "-dlq", ContentBasedDeduplication="true")
    policy = json.dumps({"deadLetterTargetArn": attributes(sqs, dlq, "QueueArn")["QueueArn"], "maxReceiveCount": 1})
    url = fifo(sqs, qname, RedrivePolicy=policy, ContentBasedDeduplication="true")
    color = {"color": {"DataType": "String", "StringValue": "red"}}
    mid = sqs.send_message(QueueUrl=url, MessageBody="poison", MessageGroupId="g", MessageAttributes=color)["MessageId"]
    (m,) = receive(sqs, url, VisibilityTimeout=0, MessageSystemAttributeNames=["All"])
    assert m["MessageId"] == mid and m["Attributes"]["ApproximateReceiveCount"] == "1"
    assert receive(sqs, url, wait=1) == [], "the receive past maxReceiveCount moves it (SQS: at that receive)"
    (d,) = receive_until(sqs, dlq, bool, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"])
    assert (d["MessageId"], d["Body"], d["MessageAttributes"]) == (mid, "poison", color)
    assert d["Attributes"]["ApproximateReceiveCount"] == "2", "its receive in the source, and this one"
    assert d["Attributes"]["SentTimestamp"] == m["Attributes"]["SentTimestamp"]
    assert d["Attributes"]["MessageGroupId"] == "g"


def test_the_queues_delay_seconds_delays_every_fifo_message(sqs: Any, qname: str) -> None:
    url = fifo(sqs, qname, DelaySeconds="2")
    sent_at = time.monotonic()
    send(sqs, url, "later", "g", DelaySeconds=0)  # 0 is accepted on FIFO and the queue's delay still applies (as SQS)
    assert counts(sqs, url) == (0, 0, 1)
    (m,) = receive_until(sqs, url, bool)
    assert m["Body"] == "later" and time.monotonic() - sent_at >= 2.0


def test_a_fair_queue_group_is_kept_and_returned_on_a_standard_queue(sqs: Any, qname: str) -> None:
    url = sqs.create_queue(QueueName=qname)["QueueUrl"]
    r = sqs.send_message(QueueUrl=url, MessageBody="t1", MessageGroupId="tenant-1")
    assert "SequenceNumber" not in r
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "b", "MessageBody": "t2", "MessageGroupId": "tenant-2"}])
    groups: dict[str, dict[str, str]] = {}
    while len(groups) < 2:
        (m,) = receive_until(
            sqs, url, bool, MessageSystemAttributeNames=["MessageGroupId", "SequenceNumber", "MessageDeduplicationId"]
        )
        groups[m["Body"]] = m["Attributes"]
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert groups == {"t1": {"MessageGroupId": "tenant-1"}, "t2": {"MessageGroupId": "tenant-2"}}


# ---- the query protocol --------------------------------------------------------------------------------
def test_fifo_over_the_query_protocol(server: sqsserver.SqsServer, qname: str) -> None:
    status, root = query(
        server.url,
        "CreateQueue",
        {"QueueName": qname + ".fifo", "Attribute.1.Name": "FifoQueue", "Attribute.1.Value": "true"},
    )
    assert status == 200
    url = text(root, "q:CreateQueueResult/q:QueueUrl")
    status, root = query(url, "SendMessage", {"MessageBody": "one", "MessageDeduplicationId": "1"})
    assert (status, text(root, "q:Error/q:Code"), text(root, "q:Error/q:Message")) == (
        400,
        "MissingParameter",
        NEEDS_GROUP,
    )
    status, root = query(
        url, "SendMessage", {"MessageBody": "one", "MessageGroupId": "g", "MessageDeduplicationId": "1"}
    )
    assert status == 200
    seq1 = text(root, "q:SendMessageResult/q:SequenceNumber")
    status, root = query(
        url,
        "SendMessageBatch",
        {
            "SendMessageBatchRequestEntry.1.Id": "e",
            "SendMessageBatchRequestEntry.1.MessageBody": "two",
            "SendMessageBatchRequestEntry.1.MessageGroupId": "g",
            "SendMessageBatchRequestEntry.1.MessageDeduplicationId": "2",
        },
    )
    seq2 = text(root, "q:SendMessageBatchResult/q:SendMessageBatchResultEntry/q:SequenceNumber")
    assert status == 200 and int(seq2) > int(seq1)
    status, root = query(url, "GetQueueAttributes", {"AttributeName.1": "All"})
    got = {text(a, "q:Name"): text(a, "q:Value") for a in root.findall("q:GetQueueAttributesResult/q:Attribute", NS)}
    assert got["FifoQueue"] == "true" and got["FifoThroughputLimit"] == "perQueue"
    bodies: list[tuple[str, str, str]] = []
    while len(bodies) < 2:
        status, root = query(
            url,
            "ReceiveMessage",
            {"WaitTimeSeconds": "5", "AttributeName.1": "All", "ReceiveRequestAttemptId": f"r{len(bodies)}"},
        )
        for m in root.findall("q:ReceiveMessageResult/q:Message", NS):
            system = {text(a, "q:Name"): text(a, "q:Value") for a in m.findall("q:Attribute", NS)}
            bodies.append((text(m, "q:Body"), system["SequenceNumber"], system["MessageGroupId"]))
            assert query(url, "DeleteMessage", {"ReceiptHandle": text(m, "q:ReceiptHandle")})[0] == 200
    assert bodies == [("one", seq1, "g"), ("two", seq2, "g")]


# ---- the JS SDK v3 ----------------------------------------------------------------------------------------
def test_javascript_sdk_v3_on_a_fifo_queue(server: sqsserver.SqsServer, qname: str) -> None:
    node = shutil.which("node")
    assert node, "node is needed for the JS SDK test: apt-get install nodejs npm"
    if not (JS / "node_modules" / "@aws-sdk" / "client-sqs").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, capture_output=True, timeout=600)
    out = subprocess.run(
        [node, "sqs_fifo_check.mjs", server.url, qname], cwd=JS, capture_output=True, text=True, timeout=180
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0 and "fatal" not in result, result
    assert result == {
        "fifo": "true",
        "sequences_increase": True,
        "duplicate_same_sequence": True,
        "err_no_group": "MissingParameter",
        "order": {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"]},
    }

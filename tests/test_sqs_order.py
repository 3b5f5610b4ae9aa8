"""A standard queue's best-effort order as AWS has it on a small queue, through boto3 against a real
``casque serve``: sends come back in the order sent (one SendMessageBatch's messages too, all sent
within one millisecond), and a message made visible again comes after the ones that were waiting.
Several rounds each: one that happened to come back in order proves nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.sqsfixtures import server, sqs  # noqa: F401  (fixtures)

ROUNDS = 5


@pytest.fixture
def url(sqs: Any) -> str:  # noqa: F811
    return sqs.create_queue(QueueName=f"ord-{uuid.uuid4().hex[:12]}")["QueueUrl"]


def drain(sqs: Any, url: str, count: int, **kw: Any) -> list[str]:  # noqa: F811
    """Bodies of ``count`` messages, received ten at a time (long polls), deleted as received."""
    bodies: list[str] = []
    while len(bodies) < count:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=5, **kw).get("Messages", [])
        assert got, f"nothing more after {bodies}"
        bodies += [m["Body"] for m in got]
        sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
        )
    return bodies


def test_a_batchs_messages_come_back_in_the_order_sent(sqs: Any, url: str) -> None:  # noqa: F811
    for r in range(ROUNDS):
        sent = [f"r{r}-m{i}" for i in range(10)]
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": b} for i, b in enumerate(sent)])
        assert drain(sqs, url, 10) == sent, f"round {r}"


def test_messages_sent_one_after_another_come_back_in_the_order_sent(sqs: Any, url: str) -> None:  # noqa: F811
    for r in range(ROUNDS):
        sent = [f"r{r}-m{i}" for i in range(4)]
        for body in sent:
            sqs.send_message(QueueUrl=url, MessageBody=body)
        assert drain(sqs, url, 4) == sent, f"round {r}"


@pytest.mark.parametrize("waiting", ["sent-before", "sent-after"])
def test_a_message_made_visible_again_comes_after_those_waiting(sqs: Any, url: str, waiting: str) -> None:  # noqa: F811
    """The others were waiting since before the receive (sent with it in one batch) or since after it."""
    for r in range(ROUNDS):
        first, others = f"r{r}-first", [f"r{r}-m{i}" for i in range(3)]
        if waiting == "sent-before":
            sqs.send_message_batch(
                QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": b} for i, b in enumerate([first, *others])]
            )
        else:
            sqs.send_message(QueueUrl=url, MessageBody=first)
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, VisibilityTimeout=60)["Messages"]
        assert [m["Body"] for m in got] == [first]
        if waiting == "sent-after":
            for body in others:
                sqs.send_message(QueueUrl=url, MessageBody=body)
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"], VisibilityTimeout=0)
        assert drain(sqs, url, 4) == [*others, first], f"round {r}"

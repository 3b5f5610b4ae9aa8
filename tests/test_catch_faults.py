"""A send that hands its message to a parked poll (engine/wake/catch.py), with the server killed in the one window the
catch adds: after the message was written in flight for the poll, before the poll got it (``CASQUE_CRASH_AT=
catch.written``, an ``os._exit`` as kill -9 leaves it). Real ``casque serve`` processes and boto3 clients that retry
on the other server, as SDK users do.

What must hold: the message written in flight comes back after its visibility timeout, on the other server (seen with
ApproximateReceiveCount 2: the dead server's write landed and was never answered), and the body whose send failed is
processed (the client's retry wrote it again: at-least-once, as a standard queue promises). Nothing lost.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from daemon.base.config import Settings
from daemon.base.crashpoints import CRASH_EXIT_CODE
from tests.support import sqsserver
from tests.support.sqs_clients import client, poll

pytestmark = [pytest.mark.reliability]


@pytest.fixture
def victim_and_other(settings: Settings) -> Iterator[tuple[sqsserver.SqsServer, sqsserver.SqsServer]]:
    keyspace = settings.cassandra.keyspace
    pair = (sqsserver.start(keyspace, env={"CASQUE_CRASH_AT": "catch.written"}), sqsserver.start(keyspace))
    yield pair
    for s in pair:
        s.stop()


class Poller(threading.Thread):
    """Long-polls one server, then (once it is gone) the other; records every delivery (body, receive count) and
    deletes what it got."""

    def __init__(self, urls: list[str], path: str) -> None:
        super().__init__(daemon=True)
        self.urls, self.path = urls, path
        self.seen: list[tuple[str, int]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        current = 0
        try:
            while not self.stop.is_set():
                sqs, q = client(self.urls[current]), self.urls[current] + self.path
                try:
                    got = sqs.receive_message(
                        QueueUrl=q,
                        MaxNumberOfMessages=10,
                        WaitTimeSeconds=2,
                        AttributeNames=["ApproximateReceiveCount"],
                    ).get("Messages", [])
                except (BotoCoreError, ClientError):
                    current = 1  # the server is gone: the other one
                    continue
                self.seen += [(m["Body"], int(m["Attributes"]["ApproximateReceiveCount"])) for m in got]
                if got:
                    sqs.delete_message_batch(
                        QueueUrl=q,
                        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)],
                    )
        except BaseException as exc:  # reported by the test
            self.error = exc


def test_a_server_killed_after_writing_a_caught_message_loses_nothing(
    victim_and_other: tuple[sqsserver.SqsServer, sqsserver.SqsServer],
) -> None:
    victim, other = victim_and_other
    made = client(victim.url).create_queue(
        QueueName=f"catch-{uuid.uuid4().hex[:10]}", Attributes={"VisibilityTimeout": "2"}
    )
    path = urlparse(made["QueueUrl"]).path
    poller = Poller([victim.url, other.url], path)
    poller.start()
    sent: list[str] = []
    crashed_on: str | None = None
    try:
        # Each send either finds the poll parked (caught: the victim dies at its crash point) or not (written due, and
        # the poll takes it): send one at a time until one was caught.
        for i in range(200):
            body = f"m{i}"
            sent.append(body)
            try:
                client(victim.url).send_message(QueueUrl=victim.url + path, MessageBody=body)
            except (BotoCoreError, ClientError):
                crashed_on = body
                client(other.url).send_message(QueueUrl=other.url + path, MessageBody=body)  # the SDK user's retry
                break
            poll(lambda body=body: any(b == body for b, _ in poller.seen), 30, f"{body} received", [poller])
        assert crashed_on is not None, "no send was caught by the parked poll in 200 sends"
        assert victim.proc.wait(timeout=30) == CRASH_EXIT_CODE, "the victim did not die at catch.written"
        poll(
            lambda: (
                {b for b, _ in poller.seen} >= set(sent) and any(b == crashed_on and n >= 2 for b, n in poller.seen)
            ),
            60,
            "every body processed, and the caught message back after its visibility",
            [poller],
        )
    finally:
        poller.stop.set()
        poller.join(timeout=30)
    assert poller.error is None, repr(poller.error)
    copies: dict[str, list[int]] = {}
    for body, n in poller.seen:
        copies.setdefault(body, []).append(n)
    print(f"sent={len(sent)} crashed_on={crashed_on} its deliveries (receive counts)={copies[crashed_on]}")
    assert set(copies) == set(sent), "lost"
    assert sorted(copies[crashed_on]) == [1, 2], "the retry's copy once, the caught one back once with count 2"
    assert all(v == [1] for b, v in copies.items() if b != crashed_on), "a message not caught was delivered twice"

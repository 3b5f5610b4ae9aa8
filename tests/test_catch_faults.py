"""A send that hands its message to a parked poll (engine/wake/catch.py), with the server killed in the one window the
catch adds: after the message was written in flight for the poll, before the poll got it (``CASQUE_CRASH_AT=
catch.written``, an ``os._exit`` as kill -9 leaves it). Real ``casque serve`` processes and boto3 clients that retry
on the other server, as SDK users do.

What must hold: the message written in flight comes back after its visibility timeout, on the other server (seen with
ApproximateReceiveCount 2: the dead server's write landed and was never answered), and the body whose send failed is
processed (the client's retry wrote it again: at-least-once, as a standard queue promises). Nothing lost.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from daemon.base.config import Settings
from daemon.base.crashpoints import CRASH_EXIT_CODE
from daemon.devnode import status
from daemon.testing import sqsserver
from daemon.testing.daemonproc import freeze
from daemon.testing.sqs_clients import client, poll
from tests.support.stall_node import STALL_NODE, servers_on_own_node

pytestmark = [pytest.mark.reliability]

#: This file's own node (tests/support/stall_node.py), on ports of its own: it may run beside the other fault files.
STALL_KEYSPACE = "casque_catch_stall"


@pytest.fixture
def victim_and_other(settings: Settings) -> Iterator[tuple[sqsserver.SqsServer, sqsserver.SqsServer]]:
    keyspace = settings.cassandra.keyspace
    pair = (sqsserver.start(keyspace, env={"CASQUE_CRASH_AT": "catch.written"}), sqsserver.start(keyspace))
    yield pair
    for s in pair:
        s.stop()


class Poller(threading.Thread):
    """Long-polls one server, then (once it fails) the next, if there is one; records every delivery (body, receive
    count) and deletes what it got, retrying a failed delete with the same receipts, as an SDK user does."""

    def __init__(self, urls: list[str], path: str) -> None:
        super().__init__(daemon=True)
        self.urls, self.path = urls, path
        self.seen: list[tuple[str, int]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.polling_since: float | None = None  # monotonic, while a receive is under way

    def polling_for(self, seconds: float) -> bool:
        """A receive under way this long: it looked, found nothing and is parked."""
        since = self.polling_since
        return since is not None and time.monotonic() - since >= seconds

    def run(self) -> None:
        current = 0
        try:
            while not self.stop.is_set():
                sqs, q = client(self.urls[current]), self.urls[current] + self.path
                self.polling_since = time.monotonic()
                try:
                    got = sqs.receive_message(
                        QueueUrl=q,
                        MaxNumberOfMessages=10,
                        WaitTimeSeconds=2,
                        AttributeNames=["ApproximateReceiveCount"],
                    ).get("Messages", [])
                except (BotoCoreError, ClientError):
                    current = min(current + 1, len(self.urls) - 1)  # the server is gone or failing: the next one
                    time.sleep(0.1)  # an SDK's backoff
                    continue
                finally:
                    self.polling_since = None
                self.seen += [(m["Body"], int(m["Attributes"]["ApproximateReceiveCount"])) for m in got]
                if got:
                    self.delete_all(sqs, q, got)
        except BaseException as exc:  # reported by the test
            self.error = exc

    @staticmethod
    def delete_all(sqs: Any, q: str, got: list[dict[str, Any]]) -> None:
        entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
        while True:
            try:
                sqs.delete_message_batch(QueueUrl=q, Entries=entries)
                return
            except (BotoCoreError, ClientError):
                time.sleep(0.1)


def deliveries(seen: list[tuple[str, int]]) -> dict[str, list[int]]:
    """Per body, the receive counts it was delivered with, in order."""
    out: dict[str, list[int]] = {}
    for body, n in seen:
        out.setdefault(body, []).append(n)
    return out


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
            # mypy can't type a lambda whose default binds the loop's value (python/mypy#15459)
            poll(lambda body=body: any(b == body for b, _ in poller.seen), 30, f"{body} received", [poller])  # type: ignore[misc]
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
    copies = deliveries(poller.seen)
    print(f"sent={len(sent)} crashed_on={crashed_on} its deliveries (receive counts)={copies[crashed_on]}")
    assert set(copies) == set(sent), "lost"
    assert sorted(copies[crashed_on]) == [1, 2], "the retry's copy once, the caught one back once with count 2"
    assert all(v == [1] for b, v in copies.items() if b != crashed_on), "a message not caught was delivered twice"


def test_a_node_frozen_under_a_caught_send_loses_and_duplicates_nothing() -> None:
    """The node frozen (SIGSTOP) while a send hands its message to a parked poll: the handed write is held, the server
    gives up on it after its 2 s request timeout (``casque_catch_writes_failed_total``), the send fails and the client
    retries it once the node is let go (SIGCONT). The poll goes back to looking. The held write may be applied when
    the node wakes: then that message is in flight, and comes back after its 2 s visibility with a receive count of 2.
    Counted: every body processed; the retried body once with count 1, any other copy only after a visibility
    timeout (count 2 or more); every other body once."""
    with servers_on_own_node(STALL_NODE, STALL_KEYSPACE, count=1, metrics=True) as [srv]:
        made = client(srv.url).create_queue(
            QueueName=f"catchfz-{uuid.uuid4().hex[:10]}", Attributes={"VisibilityTimeout": "2"}
        )
        path = urlparse(made["QueueUrl"]).path
        q = srv.url + path
        poller = Poller([srv.url], path)
        poller.start()
        pid = status(STALL_NODE).nodes[0].pid
        assert pid is not None, "the test's own node is not running"
        sent: list[str] = []
        frozen_on: list[str] = []
        try:
            for i in range(5):  # until a handed write failed under the frozen node
                body = f"m{i}"
                sent.append(body)
                poll(lambda: poller.polling_for(1.0), 30, "a long poll parked", [poller])
                freeze(pid)
                try:
                    client(srv.url).send_message(QueueUrl=q, MessageBody=body)  # held by the frozen node
                    failed = False
                except (BotoCoreError, ClientError):
                    failed = True
                finally:
                    os.kill(pid, signal.SIGCONT)
                if failed:
                    frozen_on.append(body)
                    retry(lambda body=body: client(srv.url).send_message(QueueUrl=q, MessageBody=body))
                if srv.metric("casque_catch_writes_failed_total") > 0:
                    break
            assert srv.metric("casque_catch_writes_failed_total") > 0, "no handed write failed under the frozen node"
            poll(lambda: set(deliveries(poller.seen)) >= set(sent), 60, "every body processed", [poller])
        finally:
            poller.stop.set()
            poller.join(timeout=30)
        # What is left: a held write applied when the node woke comes back 2 s after it; a long poll of 4 s that
        # answers nothing has waited past every such visibility.
        sqs = client(srv.url)
        while got := sqs.receive_message(
            QueueUrl=q, MaxNumberOfMessages=10, WaitTimeSeconds=4, AttributeNames=["ApproximateReceiveCount"]
        ).get("Messages", []):
            poller.seen += [(m["Body"], int(m["Attributes"]["ApproximateReceiveCount"])) for m in got]
            Poller.delete_all(sqs, q, got)
    assert poller.error is None, repr(poller.error)
    copies = deliveries(poller.seen)
    print(f"sent={len(sent)} frozen_on={frozen_on} deliveries={ {b: copies[b] for b in frozen_on} }")
    assert set(copies) == set(sent), "lost"
    for body in sent:
        counts = copies[body]
        assert counts.count(1) == 1 and all(n >= 2 for n in counts if n != 1), (
            f"{body} delivered twice within its visibility: {counts}"
        )
        if body not in frozen_on:
            assert counts == [1], f"{body}, sent with the node awake, was delivered again: {counts}"


def retry(call: Any, for_s: float = 30) -> None:
    """``call`` until it succeeds (the node just woke: its first requests may still time out)."""
    deadline = time.monotonic() + for_s
    while True:
        try:
            call()
            return
        except (BotoCoreError, ClientError):
            assert time.monotonic() < deadline, "the retried send kept failing after the node woke"
            time.sleep(0.1)

"""CQL requests per SQS call, counted in a real ``casque serve`` from outside the code under test
(bench/sqs_cql_serve.py charges each request to the call that caused it, found by the RequestId
boto3 got back), and the guarantees the blind delete rests on, made to happen: a stale receipt (its
visibility expired, the message received again) deletes nothing newer, with and without a
visibility change in between, on standard and FIFO queues; a receipt still deletes after its
visibility was changed; a version 1 receipt (issued before receipts carried the write timestamp)
still deletes."""

from __future__ import annotations

import base64
import struct
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from bench.sqs_requests import CallLog, parked_split
from daemon.engine.client import Casque
from daemon.engine.delivery import receipts
from daemon.testing import sqsserver
from tests.support.sqsfixtures import make_client

CALLS = Path(tempfile.mkdtemp()) / "calls.json"


@pytest.fixture(scope="module")
def server(settings: Any) -> Iterator[sqsserver.SqsServer]:
    srv = sqsserver.start(settings.cassandra.keyspace, launcher=("-m", "bench.sqs_cql_serve", str(CALLS)))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def log(server: sqsserver.SqsServer) -> CallLog:
    return CallLog(CALLS)


def new_queue(sqs: Any, fifo: bool) -> str:
    name = f"reqs-{uuid.uuid4().hex[:10]}" + (".fifo" if fifo else "")
    url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"} if fifo else {})["QueueUrl"]
    sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)  # the first look at its rows, as a serving server has had
    return str(url)


def send(sqs: Any, url: str, n: int, fifo: bool, tag: str = "m") -> None:
    entries: list[dict[str, Any]] = []
    for i in range(n):
        e: dict[str, Any] = {"Id": str(i), "MessageBody": f"{tag}{i}"}
        if fifo:
            e |= {"MessageGroupId": f"g{i}", "MessageDeduplicationId": f"{tag}{i}-{uuid.uuid4().hex}"}
        entries.append(e)
    assert not sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed")


def receive_all(sqs: Any, url: str, n: int, visibility: int = 120) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        got += sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=visibility
        ).get("Messages", [])
    assert len(got) == n, f"received {len(got)} of {n}"
    return got


def received_again(sqs: Any, url: str, body: str, visibility: int = 120) -> dict[str, Any]:
    """The message with ``body``, once its visibility has expired and it is received again."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for m in sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2, VisibilityTimeout=visibility
        ).get("Messages", []):
            if m["Body"] == body:
                return m
    raise AssertionError(f"{body} never came back")


def in_flight(sqs: Any, url: str, handle: str) -> bool:
    """Whether the delivery ``handle`` names is still in flight (its visibility can be changed), left so."""
    try:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=120)
        return True
    except ClientError as exc:
        assert exc.response["Error"]["Code"] in ("InvalidParameterValue", "AWS.SimpleQueueService.MessageNotInflight")
        return False


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_delete_message_batch_of_ten_costs_at_most_two_requests(server: Any, log: CallLog, fifo: bool) -> None:
    sqs = make_client(server.url)
    url = new_queue(sqs, fifo)
    send(sqs, url, 10, fifo)
    got = receive_all(sqs, url, 10)
    entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
    out, reqs = log.call(sqs.delete_message_batch, QueueUrl=url, Entries=entries)
    print(f"DeleteMessageBatch of 10 ({'FIFO' if fifo else 'standard'}): {len(reqs)} CQL requests: {reqs}")
    assert len(out["Successful"]) == 10 and not out.get("Failed")
    # A FIFO group moving on is announced; the due feed's entry for it (engine/wake/due_feed.py: one per queue, second
    # and process, shared by the writes of a loop turn) may land within the call: the announcement's, not the delete's
    own = [r for r in reqs if "INTO due_queues" not in r[1]]
    assert len(own) <= 2 and len(reqs) - len(own) <= 1, reqs
    assert not any(in_flight(sqs, url, m["ReceiptHandle"]) for m in got), "a delete left its delivery in flight"
    assert not sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0, VisibilityTimeout=0).get("Messages")


def test_a_bad_handle_fails_its_entry_only(server: Any, log: CallLog) -> None:
    sqs = make_client(server.url)
    url = new_queue(sqs, False)
    send(sqs, url, 2, False)
    got = receive_all(sqs, url, 2)
    tampered = got[1]["ReceiptHandle"][:-3] + ("AAA" if not got[1]["ReceiptHandle"].endswith("AAA") else "BBB")
    out = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": "a", "ReceiptHandle": got[0]["ReceiptHandle"]}, {"Id": "b", "ReceiptHandle": tampered}],
    )
    assert [e["Id"] for e in out["Successful"]] == ["a"]
    assert [(e["Id"], e["Code"]) for e in out["Failed"]] == [("b", "ReceiptHandleIsInvalid")]
    assert not in_flight(sqs, url, got[0]["ReceiptHandle"])
    assert in_flight(sqs, url, got[1]["ReceiptHandle"]), "a refused handle must change nothing"


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
@pytest.mark.parametrize("changed", [False, True], ids=["expired", "changed-then-expired"])
def test_a_stale_receipt_deletes_nothing_newer(server: Any, fifo: bool, changed: bool) -> None:
    """The first delivery's receipt goes stale (its visibility runs out; with ``changed``, after a
    visibility change moved or rewrote it); the message is received again; the stale receipt's
    delete must leave the new delivery in flight, and the message is there to be received again.
    On a FIFO queue that delete is refused, as AWS refuses it (docs/sqs.md); on a standard one it succeeds."""
    sqs = make_client(server.url)
    url = new_queue(sqs, fifo)
    send(sqs, url, 1, fifo, tag=f"stale-{uuid.uuid4().hex[:6]}-")
    (first,) = receive_all(sqs, url, 1, visibility=1 if not changed else 60)
    if changed:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=1)
    second = received_again(sqs, url, first["Body"])
    assert second["ReceiptHandle"] != first["ReceiptHandle"]
    out = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "old", "ReceiptHandle": first["ReceiptHandle"]}])
    assert [e["Code"] for e in out.get("Failed", [])] == (["ReceiptHandleIsInvalid"] if fifo else [])
    if fifo:
        with pytest.raises(ClientError) as err:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
        assert err.value.response["Error"]["Code"] == "InvalidParameterValue"
    else:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    assert in_flight(sqs, url, second["ReceiptHandle"]), "the stale receipt deleted the newer delivery"
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=0)
    third = received_again(sqs, url, first["Body"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=third["ReceiptHandle"])
    assert not in_flight(sqs, url, third["ReceiptHandle"])


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_a_receipt_deletes_after_its_visibility_was_changed(server: Any, log: CallLog, fifo: bool) -> None:
    sqs = make_client(server.url)
    url = new_queue(sqs, fifo)
    send(sqs, url, 3, fifo)
    got = receive_all(sqs, url, 3, visibility=60)
    for m in got:  # twice: the marker follows the latest change
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=30)
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=90)
    entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
    out, reqs = log.call(sqs.delete_message_batch, QueueUrl=url, Entries=entries)
    # a FIFO delete announces its group's next message: one more request, its due-feed entry (engine/wake/due_feed.py)
    assert len(out["Successful"]) == 3 and len(reqs) <= 2 + fifo, reqs
    assert not any(in_flight(sqs, url, m["ReceiptHandle"]) for m in got)


async def test_a_version_1_receipt_still_deletes(server: Any, cq: Casque) -> None:
    """A receipt issued before receipts carried the write timestamp: re-signed in the version 1
    layout with the shared key, it takes the checked path (read, then delete) and deletes."""
    sqs = make_client(server.url)
    url = new_queue(sqs, False)
    send(sqs, url, 1, False)
    (m,) = receive_all(sqs, url, 1)
    signer = await cq.receiver.signer()
    r = signer.open(m["ReceiptHandle"])
    body = struct.pack(">B16siihqi", 1, r.id.bytes, r.bucket, r.shard, r.rank, r.due_ms, r.attempt) + r.queue.encode()
    v1 = base64.urlsafe_b64encode(body + signer._tag(body)).decode().rstrip("=")
    assert signer.open(v1).write_ts is None and receipts.VERSION == 2
    sqs.delete_message(QueueUrl=url, ReceiptHandle=v1)
    assert not in_flight(sqs, url, m["ReceiptHandle"])


def test_parked_split_tells_the_first_look_from_the_waiting() -> None:
    assert parked_split([[0.0, "a"], [2.0, "b"], [15003.0, "c"]]) == (2, 1)
    assert parked_split([[0.0, "a"]]) == (1, 0)
    assert parked_split([]) == (0, 0)


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_an_empty_long_poll_costs_one_request_before_it_parks_and_none_while_it_waits(
    server: Any, log: CallLog, fifo: bool
) -> None:
    """On a queue that had traffic (its rows' cursors known, a take having named a shard), an
    empty long poll: one
    request (the one-request look of every row a fetch would visit, engine/delivery/idle_look.py),
    then nothing until it times out. Sent then, a message is still received at once."""
    sqs = make_client(server.url)
    url = new_queue(sqs, fifo)
    send(sqs, url, 10, fifo)
    for m in receive_all(sqs, url, 10):
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    out, reqs = log.call(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=4)
    before, waiting = parked_split(reqs)
    print(f"empty 4 s long poll ({'FIFO' if fifo else 'standard'}): {before} before it parks, {waiting} while: {reqs}")
    assert not out.get("Messages")
    assert before <= 1 and waiting == 0, reqs
    send(sqs, url, 1, fifo, tag="after")
    assert receive_all(sqs, url, 1)[0]["Body"] == "after0"

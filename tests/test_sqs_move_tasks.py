"""SQS message move tasks run in the background by real ``casque serve`` processes, driven by boto3:
a task started on one server is seen from another, survives the SIGKILL of the server running it
(another takes its lease and finishes it: counted from a ledger, 0 lost), is paced at its rate,
can be cancelled, and bad requests get SQS's own errors."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from daemon.engine.client import Casque
from daemon.engine.delivery.deadletter import FROM_HEADER, ID_HEADER
from daemon.engine.operations.stats import queue_stats
from daemon.engine.send.producer import Job
from daemon.testing import sqsserver
from tests.conftest import TEST_KEYSPACE


def client(url: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="k",
        aws_secret_access_key="s",
        config=Config(retries={"max_attempts": 1}, read_timeout=40),
    )


@pytest.fixture(scope="module")
def servers(settings: Any) -> Iterator[list[sqsserver.SqsServer]]:
    started = [sqsserver.start(TEST_KEYSPACE), sqsserver.start(TEST_KEYSPACE)]
    yield started
    for s in started:
        s.stop()


@pytest.fixture
def name() -> str:
    return f"mv-{uuid.uuid4().hex[:10]}"


def wait_for(what: Callable[[], Any], deadline_s: float, message: str) -> Any:
    """Poll ``what`` until it returns something true, or fail at the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        found = what()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(message)


def make_dlq(sqs: Any, name: str) -> tuple[str, str, str]:
    """A source queue whose RedrivePolicy names a dead-letter queue: (source url, dlq url, dlq arn)."""
    dlq = sqs.create_queue(QueueName=name + "-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    src = sqs.create_queue(
        QueueName=name, Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 3})}
    )["QueueUrl"]
    return src, dlq, arn


async def dead_letters(cq: Casque, dlq: str, source: str, n: int) -> list[str]:
    """n messages in the dead-letter queue as engine/delivery/deadletter.py leaves them (headers naming
    their source); returns their bodies."""
    bodies = [json.dumps(f"m-{i}") for i in range(n)]
    for i in range(0, n, 500):
        await cq.send_many(
            dlq,
            [
                Job("sqs", json.loads(b), headers={FROM_HEADER: source, ID_HEADER: str(uuid.uuid4())})
                for b in bodies[i : i + 500]
            ],
        )
    return [json.loads(b) for b in bodies]


def drain(sqs: Any, url: str) -> list[str]:
    """Every body in the queue, received and deleted until two empty receives."""
    out: list[str] = []
    empty = 0
    while empty < 2:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        empty = 0 if got else empty + 1
        out += [m["Body"] for m in got]
        if got:
            sqs.delete_message_batch(
                QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
            )
    return out


def newest(sqs: Any, arn: str) -> dict[str, Any]:
    return sqs.list_message_move_tasks(SourceArn=arn)["Results"][0]


async def test_a_move_survives_the_sigkill_of_its_server_and_loses_nothing(
    servers: list[sqsserver.SqsServer], cq: Casque, name: str
) -> None:
    """1,000 dead letters at 100 msg/s, started on A, watched from B; A is killed mid-move; B (or a
    restarted A) takes the lease and finishes. Ledger: every body back in its source, 0 lost."""
    a = sqsserver.start(TEST_KEYSPACE)  # this test's own A: it is killed
    sqs_a, sqs_b = client(a.url), client(servers[1].url)
    try:
        src, dlq, arn = await asyncio.to_thread(make_dlq, sqs_a, name)
        bodies = await dead_letters(cq, name + "-dlq", name, 1000)
        began = time.monotonic()
        handle = (
            await asyncio.to_thread(sqs_a.start_message_move_task, SourceArn=arn, MaxNumberOfMessagesPerSecond=100)
        )["TaskHandle"]
        seen = await asyncio.to_thread(newest, sqs_b, arn)
        assert (
            seen["Status"] == "RUNNING" and seen["TaskHandle"] == handle and seen["MaxNumberOfMessagesPerSecond"] == 100
        )
        assert 0 < seen["ApproximateNumberOfMessagesToMove"] <= 1000, (
            "a bounded estimate at the start (engine/observe/depth_estimate.py)"
        )
        samples: list[tuple[float, int]] = []

        def progressed() -> bool:
            moved = newest(sqs_b, arn)["ApproximateNumberOfMessagesMoved"]
            samples.append((time.monotonic() - began, moved))
            return moved >= 300

        await asyncio.to_thread(wait_for, progressed, 60, "the move made no progress on A")
        a.proc.kill()  # SIGKILL: no lease release, a batch may be half moved
        a.proc.wait()
        killed_at = samples[-1][1]
        done = await asyncio.to_thread(
            wait_for,
            lambda: (t := newest(sqs_b, arn))["Status"] != "RUNNING" and t,
            180,
            "no other server finished the task",
        )
        # Approximate: A's moves after its last progress save (every second: <= 100 + a batch) are not counted
        assert done["Status"] == "COMPLETED" and done["ApproximateNumberOfMessagesMoved"] >= 1000 - 100 - 10
        assert done["ApproximateNumberOfMessagesToMove"] >= 1000 - 100 - 10, (
            "recounted while moving (moved + what is left)"
        )
        for elapsed, moved in samples:  # the rate, as seen by another server while A ran
            assert moved <= 100 * elapsed + 20, f"moved {moved} in {elapsed:.1f} s at 100 msg/s"
        got = await asyncio.to_thread(drain, sqs_b, src)
        counts = Counter(got)
        lost = set(bodies) - set(counts)
        duplicated = sum(n - 1 for n in counts.values())
        print(
            f"\nmove ledger: 1000 sent to the DLQ, killed at {killed_at} moved, {len(got)} received from the source, "
            f"lost {len(lost)}, duplicated {duplicated}, {time.monotonic() - began:.1f} s"
        )
        assert not lost and set(counts) == set(bodies)
        assert (await queue_stats(cq.stores, name + "-dlq")).waiting_due == 0
    finally:
        await asyncio.to_thread(a.stop)


async def test_cancel_stops_the_move_and_leaves_the_rest_in_the_dead_letter_queue(
    servers: list[sqsserver.SqsServer], cq: Casque, name: str
) -> None:
    sqs_a, sqs_b = client(servers[0].url), client(servers[1].url)
    src, dlq, arn = await asyncio.to_thread(make_dlq, sqs_a, name)
    await dead_letters(cq, name + "-dlq", name, 300)
    handle = (await asyncio.to_thread(sqs_a.start_message_move_task, SourceArn=arn, MaxNumberOfMessagesPerSecond=20))[
        "TaskHandle"
    ]
    await asyncio.to_thread(
        wait_for, lambda: newest(sqs_b, arn)["ApproximateNumberOfMessagesMoved"] >= 20, 60, "no progress"
    )
    out = await asyncio.to_thread(sqs_b.cancel_message_move_task, TaskHandle=handle)
    assert out["ApproximateNumberOfMessagesMoved"] >= 20
    done = await asyncio.to_thread(
        wait_for,
        lambda: (t := newest(sqs_a, arn))["Status"] not in ("RUNNING", "CANCELLING") and t,
        30,
        "the cancel was not honoured",
    )
    assert done["Status"] == "CANCELLED" and "TaskHandle" not in done
    moved = done["ApproximateNumberOfMessagesMoved"]
    left = (await queue_stats(cq.stores, name + "-dlq")).waiting_due
    back = (await queue_stats(cq.stores, name)).waiting_due
    assert 0 < moved < 300 and left > 0, "the rest stays in the dead-letter queue"
    assert left + back >= 300, "nothing lost: what was not moved is still in the dead-letter queue"
    with pytest.raises(ClientError) as err:
        await asyncio.to_thread(sqs_a.cancel_message_move_task, TaskHandle=handle)
    assert (
        err.value.response["Error"]["Code"] == "ResourceNotFoundException"
        and err.value.response["Error"]["Message"] == "Task does not exist."
    )
    # the source is free again: a new task starts, and is listed first
    await asyncio.to_thread(sqs_a.start_message_move_task, SourceArn=arn)
    tasks = (await asyncio.to_thread(sqs_b.list_message_move_tasks, SourceArn=arn, MaxResults=10))["Results"]
    assert (
        len(tasks) == 2
        and tasks[1]["Status"] == "CANCELLED"
        and tasks[0]["StartedTimestamp"] >= tasks[1]["StartedTimestamp"]
    )


def test_move_task_errors_are_sqs_errors(servers: list[sqsserver.SqsServer], name: str) -> None:
    sqs = client(servers[0].url)
    src, dlq, arn = make_dlq(sqs, name)
    src_arn = arn.rsplit(":", 1)[0] + ":" + name

    def error(fn: Callable[..., Any], **kw: Any) -> tuple[str, str]:
        with pytest.raises(ClientError) as err:
            fn(**kw)
        return err.value.response["Error"]["Code"], err.value.response["Error"]["Message"]

    assert error(sqs.start_message_move_task, SourceArn=src_arn) == (
        "InvalidParameterValue",
        "Source queue must be configured as a Dead Letter Queue.",
    )
    assert error(sqs.start_message_move_task, SourceArn=arn + "-nope") == (
        "ResourceNotFoundException",
        "The resource that you specified for the SourceArn parameter doesn't exist.",
    )
    assert error(sqs.start_message_move_task, SourceArn=arn, DestinationArn=arn + "-nope") == (
        "ResourceNotFoundException",
        "The resource that you specified for the DestinationArn parameter doesn't exist.",
    )
    for rate in (0, 501):
        assert error(sqs.start_message_move_task, SourceArn=arn, MaxNumberOfMessagesPerSecond=rate) == (
            "InvalidParameterValue",
            f"Value {rate} for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: Must be between 1 and 500.",
        )
    assert error(sqs.list_message_move_tasks, SourceArn=arn, MaxResults=11)[0] == "InvalidParameterValue"
    assert error(sqs.cancel_message_move_task, TaskHandle="foobared") == (
        "InvalidParameterValue",
        "Value for parameter TaskHandle is invalid.",
    )
    assert sqs.list_message_move_tasks(SourceArn=arn)["Results"] == [], "refused starts stored nothing"
    # one active task per source: a slow task (1 msg/s) on 20 messages is still running when the second start comes
    for i in range(20):
        sqs.send_message(QueueUrl=dlq, MessageBody=f"d{i}")
    handle = sqs.start_message_move_task(SourceArn=arn, MaxNumberOfMessagesPerSecond=1, DestinationArn=src_arn)[
        "TaskHandle"
    ]
    assert error(sqs.start_message_move_task, SourceArn=arn) == (
        "InvalidParameterValue",
        "There is already a task running. Only one active task is allowed for a source queue arn at a given time.",
    )
    sqs.cancel_message_move_task(TaskHandle=handle)
    wait_for(lambda: newest(sqs, arn)["Status"] == "CANCELLED", 30, "not cancelled")


def test_a_message_with_no_known_source_fails_the_task_and_stays(servers: list[sqsserver.SqsServer], name: str) -> None:
    """As SQS: a message sent straight to the dead-letter queue has no source to go back to."""
    sqs = client(servers[0].url)
    src, dlq, arn = make_dlq(sqs, name)
    sqs.send_message(QueueUrl=dlq, MessageBody="direct")
    sqs.start_message_move_task(SourceArn=arn)
    task = wait_for(lambda: (t := newest(sqs, arn))["Status"] != "RUNNING" and t, 30, "the task never ended")
    assert (
        task["Status"] == "FAILED"
        and task["FailureReason"] == "CouldNotDetermineMessageSource"
        and task["ApproximateNumberOfMessagesMoved"] == 0
    )
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=5)["Messages"]] == ["direct"]


def test_move_task_actions_over_the_query_protocol(servers: list[sqsserver.SqsServer], name: str) -> None:
    """The XML answers of the three actions (older SDKs): entries as elements, not Python text."""
    import urllib.parse
    import urllib.request

    sqs = client(servers[0].url)
    src, dlq, arn = make_dlq(sqs, name)
    sqs.send_message(QueueUrl=dlq, MessageBody="direct")

    def post(**form: str) -> str:
        data = urllib.parse.urlencode(dict(form, Version="2012-11-05")).encode()
        with urllib.request.urlopen(urllib.request.Request(servers[0].url + "/", data=data), timeout=30) as resp:
            return resp.read().decode()

    assert "<TaskHandle>" in post(Action="StartMessageMoveTask", SourceArn=arn, MaxNumberOfMessagesPerSecond="5")
    body = post(Action="ListMessageMoveTasks", SourceArn=arn, MaxResults="10")
    assert (
        "<ListMessageMoveTasksResultEntry><Status>" in body
        and f"<SourceArn>{arn}</SourceArn>" in body
        and "{" not in body
    )


async def test_a_move_to_a_destination_arn_takes_every_message_there_and_is_kept_14_days(
    servers: list[sqsserver.SqsServer], cq: Casque, name: str
) -> None:
    """With DestinationArn, dead letters and messages sent straight to the DLQ alike go there, with
    their message attributes and without casque's dead-letter headers; the task row's TTL is 14 days."""
    sqs = client(servers[1].url)
    src, dlq, arn = await asyncio.to_thread(make_dlq, sqs, name)
    dest = (await asyncio.to_thread(sqs.create_queue, QueueName=name + "-dest"))["QueueUrl"]
    dest_arn = arn.rsplit(":", 1)[0] + ":" + name + "-dest"
    bodies = await dead_letters(cq, name + "-dlq", name, 30)
    for i in range(5):
        await asyncio.to_thread(
            sqs.send_message,
            QueueUrl=dlq,
            MessageBody=f"direct-{i}",
            MessageAttributes={"k": {"DataType": "String", "StringValue": str(i)}},
        )
    await asyncio.to_thread(sqs.start_message_move_task, SourceArn=arn, DestinationArn=dest_arn)
    task = await asyncio.to_thread(
        wait_for, lambda: (t := newest(sqs, arn))["Status"] != "RUNNING" and t, 60, "the move never ended"
    )
    assert (
        task["Status"] == "COMPLETED"
        and task["DestinationArn"] == dest_arn
        and task["ApproximateNumberOfMessagesMoved"] == 35
    )
    arrived = await cq.peek(name + "-dest", 50)
    assert len(arrived) == 35 and not any(FROM_HEADER in m.headers or ID_HEADER in m.headers for m in arrived)
    got: list[dict[str, Any]] = []
    while len(got) < 35:
        page = (
            await asyncio.to_thread(
                sqs.receive_message,
                QueueUrl=dest,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=2,
                MessageAttributeNames=["All"],
            )
        ).get("Messages", [])
        assert page, f"only {len(got)} of 35 reached the destination"
        got += page
    assert sorted(m["Body"] for m in got) == sorted(bodies + [f"direct-{i}" for i in range(5)])
    assert {m["MessageAttributes"]["k"]["StringValue"] for m in got if m["Body"].startswith("direct")} == {
        str(i) for i in range(5)
    }
    assert (await queue_stats(cq.stores, name)).waiting_due == 0, "nothing went back to the source"
    rows = await cq.db.run(
        f"SELECT TTL(status) AS ttl FROM {TEST_KEYSPACE}.move_tasks WHERE source = %s", [name + "-dlq"]
    )
    assert 14 * 86_400 - 120 <= rows[0].ttl <= 14 * 86_400, "ListMessageMoveTasks keeps a task 14 days"

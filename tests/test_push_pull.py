"""A `casque run` daemon and SQS clients on one queue (docs/design.md, "Push and pull on one queue"),
with real processes: a daemon, a `casque serve`, boto3 receivers long-polling it. Counted from a
ledger: every message sent is handled by the daemon or received and deleted over SQS, none lost,
none poisoned, and a message delivered twice only because a visibility timeout expired.

And `casque serve`'s own sweep: a message written behind a row's cursor on a queue that only the
server reads (no daemon) is put back and received.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from daemon.base.clock import ManualClock
from daemon.base.config import Settings
from daemon.engine.client import Casque
from daemon.testing.daemonproc import records, start_daemon, until, write_config
from tests.conftest import TEST_KEYSPACE
from tests.support import sqsserver
from tests.support.ledger import drain_ids as drain
from tests.support.ledger import ledger

SHARED_TASK = "test.sleep"  # the daemon has a handler for it; SQS receivers take it too
PLAIN = 150  # plain SQS messages: task "sqs", which no daemon handler is registered under
SHARED = 150


@pytest.fixture(scope="module")
def server(settings: Settings) -> Iterator[sqsserver.SqsServer]:
    srv = sqsserver.start(TEST_KEYSPACE)
    yield srv
    srv.stop()


def client(url: str) -> Any:
    cfg = Config(retries={"max_attempts": 3}, read_timeout=40)
    return boto3.client(
        "sqs", endpoint_url=url, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s", config=cfg
    )


class Receiver(threading.Thread):
    """An SQS consumer: long-polls, records (id, ApproximateReceiveCount) of every message, deletes it."""

    def __init__(self, url: str, queue_url: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.sqs, self.queue_url, self.stop = client(url), queue_url, stop
        self.got: list[tuple[str, int, str]] = []  # (id, receive count, task)
        self.polls = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                out = self.sqs.receive_message(
                    QueueUrl=self.queue_url,
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=2,
                    AttributeNames=["ApproximateReceiveCount"],
                    MessageAttributeNames=["All"],
                )
                self.polls += 1
                for m in out.get("Messages", []):
                    task = m.get("MessageAttributes", {}).get("casque.task", {}).get("StringValue", "sqs")
                    self.got.append((m["MessageId"], int(m["Attributes"]["ApproximateReceiveCount"]), task))
                    self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])
        except BaseException as exc:  # reported by the test
            self.error = exc


def send_backlog(sqs: Any, queue_url: str) -> tuple[list[str], list[str]]:
    """PLAIN plain SQS messages and SHARED messages for the daemon's task, interleaved, in batches of 10."""
    plain: list[str] = []
    shared: list[str] = []
    entries = [("p", i) for i in range(PLAIN)] + [("s", i) for i in range(SHARED)]
    entries.sort(key=lambda e: (e[1], e[0]))
    for start in range(0, len(entries), 10):
        batch = []
        for kind, i in entries[start : start + 10]:
            entry: dict[str, Any] = {
                "Id": f"{kind}{i}",
                "MessageBody": json.dumps(0.05) if kind == "s" else f"plain {i}",
            }
            if kind == "s":
                entry["MessageAttributes"] = {"casque.task": {"DataType": "String", "StringValue": SHARED_TASK}}
            batch.append(entry)
        out = sqs.send_message_batch(QueueUrl=queue_url, Entries=batch)
        assert not out.get("Failed"), out.get("Failed")
        for ok in out["Successful"]:
            (shared if ok["Id"].startswith("s") else plain).append(ok["MessageId"])
    return plain, shared


async def test_a_daemon_and_two_sqs_receivers_share_a_mixed_backlog(
    tmp_path: Path, settings: Settings, cq: Casque, server: sqsserver.SqsServer
) -> None:
    """Two SQS receivers long-poll a queue made over SQS while a daemon serves it. The daemon sees
    the pull readers, holds none of the queue's rows and leaves the plain SQS messages (no handler)
    to the receivers: 0 lost, 0 poisoned, each message handled or received+deleted at least once,
    duplicates only from expired visibility (receive count > 1), and both sides took shared tasks."""
    name = f"pp-{uuid.uuid4().hex[:10]}"
    sqs = client(server.url)
    queue_url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "20"})["QueueUrl"]
    stop = threading.Event()
    receivers = [Receiver(server.url, queue_url, stop) for _ in range(2)]
    for r in receivers:
        r.start()
    await until(lambda: cq.pull_readers.readers(name), 20, "the receivers' pull-reader mark")
    record, log = tmp_path / "record.txt", tmp_path / "daemon.log"
    cfg = write_config(tmp_path / "c.toml", settings.cassandra.keyspace, [name], consumers=2, in_flight=5)
    d = start_daemon(cfg, record, log)
    try:
        await until(lambda: "worker_ready" in d.output(), 60, "the daemon's start", d)
        assert '"shared": true' in d.output(), "the daemon did not see the pull readers at its start"
        started = time.monotonic()
        plain, shared = send_backlog(sqs, queue_url)
        sent = set(plain) | set(shared)

        async def ended() -> bool:  # handled, received, or poisoned (which must not happen: counted below)
            seen = {rec[1] for rec in records(record)} | {i for r in receivers for i, _, _ in r.got}
            return sent <= seen or sent <= seen | {str(p.id) for p in await cq.poison.list(name)}

        await until(ended, 180, "every message handled, received or poisoned", d)
        drained_s = time.monotonic() - started
    finally:
        stop.set()
        for r in receivers:
            r.join(timeout=30)
        d.signal(signal.SIGTERM)
        d.wait(60)
    for r in receivers:
        assert r.error is None, r.error
    ran = records(record)
    by_daemon = Counter(rec[1] for rec in ran)
    by_sqs = Counter(i for r in receivers for i, _, _ in r.got)
    deliveries = Counter(by_daemon) + Counter(by_sqs)
    attempts = [int(rec[2]) for rec in ran] + [n for r in receivers for _, n, _ in r.got]
    lost = sent - set(deliveries)
    duplicates = sum(n - 1 for n in deliveries.values())
    redelivered = sum(1 for a in attempts if a > 1)
    poisoned = await cq.poison.count(name)
    plain_by_daemon = sum(1 for i in plain if i in by_daemon)
    split = (
        f"sent={len(sent)} (plain {len(plain)}, {SHARED_TASK} {len(shared)}) in {drained_s:.1f} s: "
        f"lost={len(lost)} poisoned={poisoned} "
        f"duplicates={duplicates} redelivered={redelivered} | daemon ran {SHARED_TASK}: "
        f"{sum(1 for i in shared if i in by_daemon)}, "
        f"plain: {plain_by_daemon} | SQS receivers got {SHARED_TASK}: {sum(1 for i in shared if i in by_sqs)}, "
        f"plain: {sum(1 for i in plain if i in by_sqs)} | per receiver: {[len(r.got) for r in receivers]} "
        f"in {[r.polls for r in receivers]} polls"
    )
    print(split)
    assert not lost and poisoned == 0, split
    assert plain_by_daemon == 0 and "unknown task" not in d.output(), split
    assert duplicates == redelivered, f"a duplicate without an expired visibility: {split}"
    assert any(i in by_daemon for i in shared) and any(i in by_sqs for i in shared), (
        f"one side made no progress on the shared tasks: {split}"
    )
    assert '"message_poisoned"' not in d.output()


async def test_casque_serve_sweeps_a_message_written_behind_a_cursor_of_a_queue_only_it_reads(
    settings: Settings, cq: Casque
) -> None:
    """No daemon serves this queue. The server's take stores a cursor; a producer whose clock lags
    45 s (beyond the 5 s tolerance) then writes a message behind it: a receive can't see it (the
    fault). The server's own sweep finds it once it is past the sweep's lag and puts it back, and a
    parked long poll receives it."""
    name = f"pp-{uuid.uuid4().hex[:10]}"
    await cq.create_queue(name, shards=1, buckets=1)
    server = sqsserver.start(TEST_KEYSPACE)  # its own: its log is read at the end
    try:
        got, waited, stranded = await _strand_and_receive(cq, settings, name, client(server.url))
    finally:
        log = server.stop()
    print(
        f"stranded message {'received' if got else 'NOT received'} {waited:.1f} s after it was written "
        "(sweep lag 60 s, its due 45 s before the write)"
    )
    assert [(m["MessageId"], m["Body"]) for m in got] == [(str(stranded), "stranded")]
    assert "message_below_cursor" in log and str(stranded) in log
    assert await cq.poison.count(name) == 0


async def _strand_and_receive(
    cq: Casque, settings: Settings, name: str, sqs: Any
) -> tuple[list[dict[str, Any]], float, str]:
    queue_url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    await cq.send(name, "sqs", "first")
    first = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=10).get("Messages", [])
    assert [m["Body"] for m in first] == ["first"]
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=first[0]["ReceiptHandle"])  # this take stored the row's cursor
    late = await Casque.connect(settings, clock=ManualClock(cq.clock.now_ms() - 45_000))
    try:
        stranded = await late.send(name, "sqs", "stranded")
    finally:
        await late.close()
    written = time.monotonic()
    assert sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1).get("Messages", []) == [], (
        "nothing was behind the cursor"
    )
    got: list[dict[str, Any]] = []
    while not got and time.monotonic() - written < 120:
        got = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=20).get("Messages", [])
    for m in got:
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
    return got, time.monotonic() - written, str(stranded)


async def test_a_shared_consumer_leaves_other_tasks_behind_its_cursor_and_reads_them_once_per_rescan(
    manual: tuple[Casque, ManualClock], queue_name: str
) -> None:
    """A daemon's consumer sharing a queue with pull readers (``share``) takes only its tasks. What it
    left costs it no more reads: each later fetch is one peek from after the left messages (no lock,
    no re-read), until the rescan interval passes and they are read once more. A pull reader, reading
    from the stored cursor, then receives every message left: the cursor never passed them."""
    cq, clock = manual
    await cq.create_queue(queue_name, shards=1, buckets=1)
    mine: list[str] = []
    theirs: list[str] = []
    for i in range(30):
        clock.advance(1)
        ours = i % 3 == 0
        (mine if ours else theirs).append(await cq.send(queue_name, "mine" if ours else "theirs", i))
    daemon = cq.consumer(queue_name)
    daemon.share(lambda task: task == "mine")
    assert sorted(await drain(daemon)) == sorted(mine)
    before = cq.db.requests
    for _ in range(20):
        assert await daemon.fetch(100) == []
    idle = cq.db.requests - before
    clock.advance(daemon.rescan_ms)  # the skip is forgotten: the left messages are read once more
    before = cq.db.requests
    assert await daemon.fetch(100) == []
    reread = cq.db.requests - before
    before = cq.db.requests
    assert await daemon.fetch(100) == []
    after_reread = cq.db.requests - before
    got = await drain(cq.consumer(queue_name))  # a pull reader, starting from the stored cursors
    lost, duplicated = ledger(theirs, got)
    print(
        f"requests: 20 idle fetches {idle}, the fetch after a rescan interval {reread}, the next {after_reread}; "
        f"pull reader got {len(got)} of {len(theirs)} left (lost {lost}, duplicated {duplicated})"
    )
    assert idle == 20, "one peek per fetch: no lock, no read of what was left"
    assert reread > 1 and after_reread == 1
    assert (lost, duplicated) == (0, 0) and not set(got) & set(mine)


async def test_once_no_pull_reader_has_received_for_the_ttl_the_daemon_poisons_unknown_tasks_again(
    tmp_path: Path, settings: Settings, cq: Casque
) -> None:
    """A pull reader whose last receive's mark has 8 s of its TTL left (written as a receive writes
    it). While it lives the daemon leaves a message of a task it has no handler for, and runs its own;
    once it has expired the daemon takes every task again and poisons the unknown one with its reason
    (the delivery contract: nothing is looped on forever)."""
    name = f"pp-{uuid.uuid4().hex[:10]}"
    await cq.create_queue(name, shards=1, buckets=1)
    mark = cq.db.prepare(
        f"INSERT INTO {settings.cassandra.keyspace}.pull_readers (queue, reader, seen) VALUES (?, ?, ?) USING TTL 8"
    )
    await cq.db.run(mark, [name, "elsewhere:1", cq.clock.now_ms()])
    expires = time.monotonic() + 8
    record, log = tmp_path / "record.txt", tmp_path / "daemon.log"
    d = start_daemon(write_config(tmp_path / "c.toml", settings.cassandra.keyspace, [name]), record, log)
    try:
        await until(lambda: "worker_ready" in d.output(), 60, "the daemon's start", d)
        assert '"shared": true' in d.output()
        unknown = await cq.send(name, "sqs", "for a pull reader")
        known = await cq.send(name, "test.record", "for the daemon")
        await until(lambda: any(r[1] == known for r in records(record)), 30, "the daemon's own task", d)
        left_while_read = await cq.get(name, unknown) is not None and await cq.poison.count(name) == 0
        assert time.monotonic() < expires, "the machine was too slow: the mark expired before the check"
        await until(lambda: cq.poison.count(name), 60, "the unknown task poisoned once the mark expired", d)
        poisoned_after = time.monotonic() - expires
    finally:
        d.signal(signal.SIGTERM)
        d.wait(60)
    (rec,) = await cq.poison.list(name)
    print(
        f"unknown task left while the reader's mark lived: {left_while_read}; poisoned {poisoned_after:.1f} s "
        f"after it expired: {rec.reason}"
    )
    assert left_while_read
    assert str(rec.id) == unknown and "unknown task 'sqs'" in rec.reason
    assert '"shared": false' in d.output()

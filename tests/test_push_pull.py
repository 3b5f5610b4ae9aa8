"""A `casque run` daemon and SQS clients on one queue (docs/design.md, "Push and pull on one queue"),
with real processes: a daemon, a `casque serve`, boto3 receivers long-polling it. Counted from a
ledger: every message sent is handled by the daemon or received and deleted over SQS, none lost,
none poisoned, and a message delivered twice only because a visibility timeout expired. In the
orders users produce: receivers already polling, a receiver that starts only after the sends, one
that pauses 90 s between polls while the daemon restarts.

And `casque serve`'s own sweep: a message written behind a row's cursor on a queue that only the
server reads (no daemon) is put back and received.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
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
from daemon.base.logs import get_logger
from daemon.engine.client import Casque
from daemon.service.hooks import Hooks
from daemon.service.outcomes import Outcomes
from daemon.service.visibility import Visibility
from daemon.testing import sqsserver
from daemon.testing.daemonproc import records, start_daemon, until, write_config
from tests.conftest import TEST_KEYSPACE
from tests.support.ledger import drain_ids as drain
from tests.support.ledger import ledger
from tests.support.longpoll import parked

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
    """Two SQS receivers long-poll a queue made over SQS (a pull queue) while a daemon serves it. The
    daemon holds none of the queue's rows and leaves the plain SQS messages (no handler) to the
    receivers: 0 lost, 0 poisoned, each message handled or received+deleted at least once,
    duplicates only from expired visibility (receive count > 1), and both sides took shared tasks."""
    name = f"pp-{uuid.uuid4().hex[:10]}"
    sqs = client(server.url)
    queue_url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "20"})["QueueUrl"]
    stop = threading.Event()
    receivers = [Receiver(server.url, queue_url, stop) for _ in range(2)]
    for r in receivers:
        r.start()
    record, log = tmp_path / "record.txt", tmp_path / "daemon.log"
    cfg = write_config(tmp_path / "c.toml", settings.cassandra.keyspace, [name], consumers=2, in_flight=5)
    d = start_daemon(cfg, record, log)
    try:
        await until(lambda: "worker_ready" in d.output(), 60, "the daemon's start", d)
        assert '"shared": true' in d.output(), "the daemon did not see that pull clients consume the queue"
        started = time.monotonic()
        plain, shared = send_backlog(sqs, queue_url)
        sent = set(plain) | set(shared)

        async def ended() -> bool:  # handled, received, or poisoned (which must not happen: counted below)
            seen = {rec[1] for rec in records(record)} | {i for r in receivers for i, _, _ in r.got}
            return sent <= seen or sent <= seen | {str(p.id) for p in await cq.stores.poison.list(name)}

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
    poisoned = await cq.stores.poison.count(name)
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
    assert await cq.stores.poison.count(name) == 0


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
    """A daemon's consumer (``handles``) of a queue pull clients consume too takes only its tasks. What it
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
    await cq.admin.update(queue_name, consumers="both")
    daemon = cq.consumer(queue_name)
    daemon.handles = lambda task: task == "mine"
    assert sorted(await drain(daemon)) == sorted(mine)
    await cq.stores.due_feed.flush()  # the sends' due-feed entries, written in the background: not the fetches'
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


WAITING = 50  # plain SQS messages waiting for a receiver that starts late
#: A receiver's pause: past every process's settings cache (5 s) and three of the daemons' rescans of the rows'
#: tasks they skip (``rescan_interval``, 10 s), where a message not theirs could be taken, retried or poisoned.
PAUSE_S = 30
OWN = 20  # messages for the daemon's own task beside them


def send_waiting(sqs: Any, queue_url: str) -> tuple[set[str], set[str]]:
    """WAITING plain messages (no casque.task: task "sqs") and OWN for test.record, with SendMessageBatch."""
    plain: set[str] = set()
    own: set[str] = set()
    for start in range(0, WAITING + OWN, 10):
        batch: list[dict[str, Any]] = []
        for i in range(start, min(start + 10, WAITING + OWN)):
            entry: dict[str, Any] = {"Id": f"m{i}", "MessageBody": f"message {i}"}
            if i >= WAITING:
                entry["MessageAttributes"] = {"casque.task": {"DataType": "String", "StringValue": "test.record"}}
            batch.append(entry)
        out = sqs.send_message_batch(QueueUrl=queue_url, Entries=batch)
        assert not out.get("Failed"), out.get("Failed")
        for ok in out["Successful"]:
            (own if int(ok["Id"][1:]) >= WAITING else plain).add(ok["MessageId"])
    return plain, own


def receive_all(sqs: Any, queue_url: str, want: set[str], within_s: float) -> list[str]:
    """An SQS receiver starting now: long-polls until it has every id of ``want`` (or ``within_s`` passed), deleting
    each message it gets; returns every id received, repeats included."""
    got: list[str] = []
    deadline = time.monotonic() + within_s
    while not want <= set(got) and time.monotonic() < deadline:
        out = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=5)
        for m in out.get("Messages", []):
            got.append(m["MessageId"])
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
    return got


async def test_sqs_messages_sent_before_any_receiver_wait_for_it_while_a_daemon_serves_the_queue(
    tmp_path: Path, settings: Settings, cq: Casque, server: sqsserver.SqsServer
) -> None:
    """The order SQS users produce: a queue created over SQS, a daemon serving it (no handler for task "sqs"), 50
    plain messages and 20 for the daemon's task sent with SendMessageBatch, and only once the daemon has run its 20
    does an SQS receiver start. It receives 50 of 50; none is poisoned (a queue made over SQS is a pull queue from
    its creation, so the daemon leaves it what it can't handle)."""
    name = f"pp-{uuid.uuid4().hex[:10]}"
    sqs = client(server.url)
    queue_url = sqs.create_queue(QueueName=name)["QueueUrl"]
    assert (await cq.queue_settings(name, fresh=True)).consumers == "pull"
    record, log = tmp_path / "record.txt", tmp_path / "daemon.log"
    d = start_daemon(write_config(tmp_path / "c.toml", settings.cassandra.keyspace, [name]), record, log)
    try:
        await until(lambda: "worker_ready" in d.output(), 60, "the daemon's start", d)
        plain, own = send_waiting(sqs, queue_url)
        await until(lambda: own <= {r[1] for r in records(record)}, 60, "the daemon's own tasks", d)
        got = await asyncio.to_thread(receive_all, sqs, queue_url, plain, 60)
    finally:
        d.signal(signal.SIGTERM)
        d.wait(60)
    lost, duplicated = ledger(sorted(plain), got)
    poisoned = await cq.stores.poison.count(name)
    print(f"receiver started after the sends: got {len(set(got) & plain)} of {len(plain)}, poisoned {poisoned}")
    assert (lost, duplicated, poisoned) == (0, 0, 0)
    assert not set(got) & own and "unknown task" not in d.output()


async def test_a_queue_stays_shared_after_its_first_receive_through_a_pause_and_a_daemon_restart(
    tmp_path: Path, settings: Settings, cq: Casque, server: sqsserver.SqsServer
) -> None:
    """A queue made with ``casque queue create`` (push until pulled). An SQS receiver polls it once, which makes it
    shared for good, and then pauses ``PAUSE_S``. Meanwhile a daemon serves it and is restarted while 50 plain messages
    wait (sent with the Python API, task "sqs", so no SQS send marks the queue). After the pause the receiver gets
    50 of 50, none poisoned, and the daemon (both runs) ran every message of its own task."""
    name = f"pp-{uuid.uuid4().hex[:10]}"
    await cq.create_queue(name, shards=2, buckets=2)
    assert (await cq.queue_settings(name, fresh=True)).consumers is None
    sqs = client(server.url)
    queue_url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    assert sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=0).get("Messages", []) == []
    paused = time.monotonic()
    assert (await cq.queue_settings(name, fresh=True)).consumers == "both"
    record, log = tmp_path / "record.txt", tmp_path / "daemon.log"
    cfg = write_config(tmp_path / "c.toml", settings.cassandra.keyspace, [name])
    d = start_daemon(cfg, record, log)
    outputs = []
    try:
        await until(lambda: "worker_ready" in d.output(), 60, "the daemon's start", d)
        plain: set[str] = {await cq.send(name, "sqs", f"plain {i}") for i in range(WAITING // 2)}
        own = {await cq.send(name, "test.record", i) for i in range(OWN // 2)}
        await until(lambda: own <= {r[1] for r in records(record)}, 60, "the first daemon's tasks", d)
        d.signal(signal.SIGTERM)
        d.wait(60)
        outputs.append(d.output())
        plain |= {await cq.send(name, "sqs", f"plain {i}") for i in range(WAITING // 2, WAITING)}  # none runs now
        own |= {await cq.send(name, "test.record", i) for i in range(OWN // 2, OWN)}
        d = start_daemon(cfg, record, tmp_path / "daemon2.log")
        await until(lambda: own <= {r[1] for r in records(record)}, 60, "the restarted daemon's tasks", d)
        await asyncio.sleep(max(0.0, PAUSE_S - (time.monotonic() - paused)))  # the receiver's pause, by design
        got = await asyncio.to_thread(receive_all, sqs, queue_url, plain, 60)
    finally:
        d.signal(signal.SIGTERM)
        d.wait(60)
        outputs.append(d.output())
    lost, duplicated = ledger(sorted(plain), got)
    poisoned = await cq.stores.poison.count(name)
    print(f"after a {PAUSE_S} s pause and a restart: got {len(set(got) & plain)} of {len(plain)}, poisoned {poisoned}")
    assert (lost, duplicated, poisoned) == (0, 0, 0)
    assert all('"shared": true' in out and "unknown task" not in out for out in outputs)


async def test_who_consumes_a_queue_is_its_setting_and_an_operators_choice_stands(
    tmp_path: Path, settings: Settings, cq: Casque, server: sqsserver.SqsServer
) -> None:
    """A queue made by the API is push until a pull client uses it: a send over SQS makes it "both", as a receive
    does. ``casque queue update --consumers push`` makes it push-only again, and later receives leave that alone."""
    sent_to, received_from = f"pp-{uuid.uuid4().hex[:10]}", f"pp-{uuid.uuid4().hex[:10]}"
    for name in (sent_to, received_from):
        await cq.create_queue(name, shards=1, buckets=1)
    sqs = client(server.url)
    sqs.send_message(QueueUrl=sqs.get_queue_url(QueueName=sent_to)["QueueUrl"], MessageBody="for a receiver")
    assert await cq.receive(received_from, wait=0) == []
    assert [(await cq.queue_settings(n, fresh=True)).consumers for n in (sent_to, received_from)] == ["both", "both"]
    cfg = write_config(tmp_path / "c.toml", settings.cassandra.keyspace, [received_from])
    out = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "-c", str(cfg), "queue", "update", received_from, "--consumers", "push"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    await cq.receive(received_from, wait=0)
    assert (await cq.queue_settings(received_from, fresh=True)).consumers == "push"
    bad = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "-c", str(cfg), "queue", "update", received_from, "--consumers", "all"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "--consumers" in bad.stderr


async def test_an_unknown_task_taken_under_settings_cached_before_the_first_receive_is_left_for_the_receiver(
    settings: Settings, queue_name: str
) -> None:
    """The settings cache's window (5 s): a daemon's consumer read the queue row (push: it takes every task) just
    before a pull client's first receive made the queue shared, and takes a task it has no handler for. Before
    poisoning it the daemon reads the row fresh (service/outcomes.py ``left_for_pull_clients``): shared, so the
    message is put back visible now and announced like a send, and the pull client's long poll, parked in another
    process meanwhile, gets it at once; nothing poisoned."""
    daemon_side, puller = await Casque.connect(settings), await Casque.connect(settings)
    try:
        await puller.listen_for_hints([queue_name])  # as casque serve does
        await daemon_side.create_queue(queue_name, shards=1)
        consumer = daemon_side.consumer(queue_name)
        consumer.handles = lambda task: task == SHARED_TASK
        assert (await consumer.settings()).consumers is None and consumer.accepts is None  # push, cached
        assert await puller.receive(queue_name, max=1, wait=0) == []  # the first receive: the queue is shared now
        assert (await puller.stores.queues.get(queue_name, fresh=True)).shared  # (the daemon's cache stays as it was)
        mid = await daemon_side.send(queue_name, "sqs", {"for": "the receiver"})
        taken = await consumer.fetch(10, 0)
        assert [str(m.id) for m in taken] == [mid], "the consumer's cached settings (push) must take the unknown task"
        poll = asyncio.create_task(puller.receive(queue_name, max=1, wait=10))
        await parked(puller, queue_name)
        outcomes = Outcomes(daemon_side, Hooks([]), Visibility(daemon_side.stores.acker, daemon_side.clock, 0), [])
        left_at = time.monotonic()
        assert await outcomes.left_for_pull_clients(consumer, taken[0], get_logger("casque.test"))
        got = await poll
        waited = time.monotonic() - left_at
        assert [str(d.message.id) for d in got] == [mid]
        # woken by the announcement: the poll's safety re-read (30 s here) and its timer (the message's visibility end,
        # 30 s) come later than its 10 s wait
        assert waited < 5, waited
        await puller.delete_many([d.receipt for d in got])
        assert await daemon_side.stores.poison.count(queue_name) == 0
    finally:
        await puller.close()
        await daemon_side.close()


async def test_a_daemon_s_ack_announces_only_a_fifo_group_s_next_message(cq: Casque, queue_name: str) -> None:
    """An ack on a FIFO queue frees its group's next message: announced like a send (parked polls and other daemons
    take it at once). On a standard queue an ack frees nothing: no announcement, which would send every consumer to
    look at the row again for nothing."""
    fifo = queue_name + ".fifo"
    await cq.create_queue(queue_name, shards=1)
    await cq.create_queue(fifo, fifo=True)
    outcomes = Outcomes(cq, Hooks([]), Visibility(cq.stores.acker, cq.clock, 0), [queue_name, fifo])
    heard: list[str] = []
    unsubscribe = [
        # mypy can't type a lambda whose default binds the loop's value (python/mypy#15459)
        cq.stores.wakeups.subscribe(q, lambda due, placement, q=q: heard.append(q))  # type: ignore[misc]
        for q in (queue_name, fifo)
    ]
    try:
        await cq.send(queue_name, "t", 1)
        await cq.send(fifo, "t", 1, group="g", dedup_id="1")
        await cq.send(fifo, "t", 2, group="g", dedup_id="2")
        heard.clear()  # the sends' own announcements
        [standard] = await cq.consumer(queue_name).fetch(10, 0)
        [first] = await cq.consumer(fifo).fetch(10, 0)
        await cq.stores.acker.ack([standard, first])
        for m in (standard, first):
            outcomes.finished(m)
        assert heard == [fifo] and outcomes.fifo_finished == 1
    finally:
        for u in unsubscribe:
            u()

"""A tiny queue grows its shards when its send rate needs it (engine/operations/shard_growth.py), with no loss.

The rule is tested in process (which rates grow which queues, up to the cap; FIFO and opted-out queues
never; the drain finished and the lease given up). Then against real ``casque serve`` processes and
boto3: a queue under a sustained send rate grows twice while a ledger of every message sent shows 0
lost and 0 received twice, and its old layouts are finished by themselves; a quiet queue beside it
never grows; and a server killed with SIGKILL right after it grew a queue (the old layout still
draining, its lease held by a dead process) loses nothing: a new server takes the lease over when it
expires and finishes the drain.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from daemon.base import metrics
from daemon.engine.client import Casque
from daemon.engine.operations.shard_growth import SendCounts, ShardGrowth
from daemon.testing import sqsserver
from daemon.testing.daemonproc import records, start_daemon, until, write_config
from tests.support.sqsfixtures import make_client

#: A server that judges every second and grows a queue past 20 sends/s per shard (the default is
#: 150/s over 10 s: the test's rates are kept low, the box has two cores shared with other tests),
#: and drops its old layouts at the shortest settle allowed (90 s, not the default 120 s).
GROWING = {"CASQUE_SQS__GROW_WINDOW": "1s", "CASQUE_SQS__GROW_RATE": "20", "CASQUE_SQS__GROW_SETTLE": "90s"}


async def _queue(cq: Casque, name: str, max_shards: str | None, **options: Any) -> None:
    await cq.create_queue(name, shards=1, buckets=1, **options)
    if max_shards is not None:
        await cq.extras.set(name, {"casque.max_shards": max_shards}, set(), cq.clock.now_ms())


async def test_the_rule_grows_busy_queues_up_to_their_cap_only(cq: Casque) -> None:
    busy, capped, opted_out, fifo = (f"grow-{uuid.uuid4().hex[:8]}" for _ in range(4))
    await _queue(cq, busy, "4")
    await _queue(cq, capped, "1")
    await _queue(cq, opted_out, None)
    await _queue(cq, fifo + ".fifo", "8", fifo=True)
    growth = ShardGrowth(cq.stores, SendCounts(), f"test-{uuid.uuid4().hex}", rate=100, window_ms=1000, settle_ms=0)
    before = metrics.REGISTRY.get_sample_value("casque_queues_grown_total") or 0
    assert await growth.consider(busy, 99) is None  # under 100/s per shard: stays one row
    grown = await growth.consider(busy, 100)
    assert grown is not None and (grown.shards, grown.draining) == (2, ((1, 1, 60),))
    assert await growth.consider(busy, 150) is None  # 75/s per shard now
    grown = await growth.consider(busy, 200)
    assert grown is not None and grown.shards == 4
    assert await growth.consider(busy, 10_000) is None  # at its cap
    for other in (capped, opted_out, fifo + ".fifo"):
        assert await growth.consider(other, 10_000) is None
        assert (await cq.queue_settings(other, fresh=True)).shards == 1
    assert (metrics.REGISTRY.get_sample_value("casque_queues_grown_total") or 0) - before == 2
    await growth.tick()  # nothing left in the old rows: the drain is finished and the lease given up
    assert (await cq.queue_settings(busy, fresh=True)).draining == ()
    assert growth.draining == {}
    another = ShardGrowth(cq.stores, SendCounts(), "another", rate=100, window_ms=1000)
    assert await another._lease(busy).hold()  # free for whoever grows it next


async def test_counting_is_off_until_a_grower_runs(cq: Casque) -> None:
    counts = SendCounts()
    counts.add("q", 5)
    assert counts.take() == {}  # a plain client keeps nothing per queue
    ShardGrowth(cq.stores, counts, "h", rate=10, window_ms=1000)
    counts.add("q", 5)
    counts.add("q")
    assert counts.take() == {"q": 6} and counts.take() == {}


class Ledger:
    """Every message acknowledged by a send, and every receipt of one (bodies are unique numbers)."""

    def __init__(self) -> None:
        self.sent: set[int] = set()
        self.received: Counter[int] = Counter()
        self.lock = threading.Lock()
        self.sending = threading.Event()  # cleared: producers stop
        self.done = threading.Event()  # set: consumers stop once every message sent was received
        self.sending.set()

    def missing(self) -> set[int]:
        with self.lock:
            return self.sent - set(self.received)


def _produce(url: str, path: str, ledger: Ledger, start: int, per_second: float, task: str = "") -> None:
    """Batches of 10 at ``per_second`` messages/s. A batch that got no answer (its server was
    killed) is not in the ledger: it may or may not have been written, so it may be received,
    and is never counted lost."""
    n = start
    client = make_client(url)
    pause = 10 / per_second
    while ledger.sending.is_set():
        began = time.monotonic()
        entries: list[dict[str, Any]] = [{"Id": str(i), "MessageBody": str(n + i)} for i in range(10)]
        for e in entries if task else []:
            e["MessageAttributes"] = {"casque.task": {"DataType": "String", "StringValue": task}}
        try:
            out = client.send_message_batch(QueueUrl=f"{url}{path}", Entries=entries)
        except Exception:  # noqa: BLE001 - the server is gone
            return
        with ledger.lock:
            ledger.sent |= {n + int(s["Id"]) for s in out.get("Successful", [])}
        n += 10
        time.sleep(max(0.0, pause - (time.monotonic() - began)))


def _consume(url: str, path: str, ledger: Ledger) -> None:
    c = make_client(url)
    while not (ledger.done.is_set() and not ledger.missing()):
        got = c.receive_message(
            QueueUrl=f"{url}{path}", MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=600
        ).get("Messages", [])
        if not got:
            continue
        with ledger.lock:
            ledger.received.update(int(m["Body"]) for m in got)
        c.delete_message_batch(
            QueueUrl=f"{url}{path}",
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)],
        )


def _check(ledger: Ledger) -> None:
    assert ledger.sent and not ledger.missing()  # 0 lost
    assert max(ledger.received.values()) == 1  # 0 received twice (the visibility timeout outlasts the test)


async def _until(cq: Casque, name: str, cond: Any, seconds: float, what: str) -> None:
    """Poll the queue's settings (fresh) until ``cond(settings)``, failing with ``what`` at the deadline."""
    deadline = time.monotonic() + seconds
    while not cond(await cq.queue_settings(name, fresh=True)):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.2)


async def _sent(ledger: Ledger, n: int, seconds: float = 60) -> None:
    """Wait until ``n`` messages were acknowledged (the producers keep their rate meanwhile)."""
    deadline = time.monotonic() + seconds
    while len(ledger.sent) < n:
        assert time.monotonic() < deadline, f"only {len(ledger.sent)} of {n} messages sent"
        await asyncio.sleep(0.1)


def _start(threads: list[threading.Thread]) -> list[threading.Thread]:
    for t in threads:
        t.daemon = True  # a failed test must not leave pytest waiting for them
        t.start()
    return threads


def _join(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "consumers did not receive every message"


@pytest.fixture
def growing(settings: Any) -> Iterator[sqsserver.SqsServer]:
    """A growing server with its /metrics on."""
    srv = sqsserver.start(settings.cassandra.keyspace, env=GROWING, metrics=True)
    yield srv
    srv.stop()


async def test_a_busy_tiny_queue_grows_and_a_quiet_one_does_not(growing: sqsserver.SqsServer, cq: Casque) -> None:
    sqs = make_client(growing.url)
    busy, quiet = f"busy-{uuid.uuid4().hex[:8]}", f"quiet-{uuid.uuid4().hex[:8]}"
    for q in (busy, quiet):
        sqs.create_queue(QueueName=q, Attributes={"casque.max_shards": "4"})
    ledger, quiet_ledger = Ledger(), Ledger()
    busy_path, quiet_path = f"/000000000000/{busy}", f"/000000000000/{quiet}"
    threads = _start(
        [
            threading.Thread(target=_produce, args=(growing.url, busy_path, ledger, 0, 100)),
            threading.Thread(target=_produce, args=(growing.url, quiet_path, quiet_ledger, 0, 5)),
            *(threading.Thread(target=_consume, args=(growing.url, busy_path, ledger)) for _ in range(3)),
            threading.Thread(target=_consume, args=(growing.url, quiet_path, quiet_ledger)),
        ]
    )
    try:
        await _until(cq, busy, lambda qs: qs.shards == 4, 60, "the busy queue did not grow to 4 shards")
        await _sent(ledger, len(ledger.sent) + 300)  # three more windows at full rate: it stays at its cap
    finally:
        for led in (ledger, quiet_ledger):
            led.sending.clear()
            led.done.set()
        _join(threads)
    _check(ledger)
    _check(quiet_ledger)
    assert (await cq.queue_settings(quiet, fresh=True)).shards == 1
    # the old layouts drain and are finished once senders can no longer hold them cached (the settle, 90 s)
    await _until(cq, busy, lambda qs: not qs.draining, 210, "the old layouts were never finished")
    assert (await cq.queue_settings(busy, fresh=True)).shards == 4
    assert growing.metric("casque_queues_grown_total") == 2
    stderr = growing.stop()
    log = _growth_log(stderr, busy)
    assert [(r["shards_before"], r["shards"]) for r in log if r["event"] == "queue_grown"] == [(1, 2), (2, 4)]
    assert [r["event"] for r in log].count("queue_growth_finished") == 1
    grown = max(datetime.fromisoformat(r["timestamp"]) for r in log if r["event"] == "queue_grown")
    [finished] = [datetime.fromisoformat(r["timestamp"]) for r in log if r["event"] == "queue_growth_finished"]
    # the settle held the old layout at least sqs.grow_settle (90 s), and the setting reached the server (default 120 s)
    assert 90 <= (finished - grown).total_seconds() < 120
    assert not _growth_log(stderr, quiet)


async def test_a_server_killed_after_growing_a_queue_loses_nothing(settings: Any, cq: Casque) -> None:
    ks = settings.cassandra.keyspace
    first = sqsserver.start(ks, env=GROWING)
    calm = sqsserver.start(ks, env={"CASQUE_SQS__GROW_RATE": "0"})  # receives throughout, never grows
    second: sqsserver.SqsServer | None = None
    name = f"killed-{uuid.uuid4().hex[:8]}"
    path = f"/000000000000/{name}"
    make_client(calm.url).create_queue(QueueName=name, Attributes={"casque.max_shards": "2"})
    ledger = Ledger()
    consumers = _start([threading.Thread(target=_consume, args=(calm.url, path, ledger)) for _ in range(2)])
    try:
        producer = _start([threading.Thread(target=_produce, args=(first.url, path, ledger, 0, 100))])
        await _until(cq, name, lambda qs: qs.shards == 2, 60, "the queue did not grow")
        first.proc.send_signal(signal.SIGKILL)  # grown, its old layout draining, its lease held by a dead process
        first.proc.wait()
        _join(producer)
        qs = await cq.queue_settings(name, fresh=True)
        assert (qs.shards, qs.draining) == (2, ((1, 1, 300),))
        second = sqsserver.start(ks, env=GROWING)  # sends through it: it sees the queue busy and draining
        producer = _start([threading.Thread(target=_produce, args=(second.url, path, ledger, 1_000_000, 30))])
        await _until(cq, name, lambda qs: not qs.draining, 210, "the drain the killed server left was never finished")
        ledger.sending.clear()
        _join(producer)
        ledger.done.set()
        _join(consumers)
        _check(ledger)  # across the kill
        finished = [r for r in _growth_log(second.stop(), name) if r["event"] == "queue_growth_finished"]
        assert len(finished) == 1
    finally:
        ledger.sending.clear()
        ledger.done.set()
        for srv in (first, calm, second):
            if srv is not None:
                srv.stop()


def _growth_log(stderr: str, queue: str) -> list[dict[str, Any]]:
    """The server's growth log lines (JSON) about ``queue``."""
    out = []
    for line in stderr.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("queue") == queue and str(rec.get("event", "")).startswith("queue_grow"):
            out.append(rec)
    return out


async def test_a_daemon_served_queue_grows_under_the_daemon(
    tmp_path: Path, settings: Any, cq: Casque, growing: sqsserver.SqsServer
) -> None:
    """A ``casque run`` daemon consumes a tiny queue that grows 1 -> 2 -> 4 under it (its sends come
    over SQS through a growing server): every message is handled, and one handled twice only after a
    timeout (its attempt number says so)."""
    name = f"served-{uuid.uuid4().hex[:8]}"
    make_client(growing.url).create_queue(QueueName=name, Attributes={"casque.max_shards": "4"})
    record, log = tmp_path / "record.txt", tmp_path / "daemon.log"
    cfg = write_config(tmp_path / "c.toml", settings.cassandra.keyspace, [name], consumers=2, in_flight=50)
    d = start_daemon(cfg, record, log)
    ledger = Ledger()
    try:
        await until(lambda: "worker_ready" in d.output(), 60, "the daemon's start", d)
        path = f"/000000000000/{name}"
        producer = _start([threading.Thread(target=_produce, args=(growing.url, path, ledger, 0, 100, "test.record"))])
        try:
            await _until(cq, name, lambda qs: qs.shards == 4, 60, "the served queue did not grow to 4 shards")
            await _sent(ledger, 1000)  # and more sends into the grown queue
        finally:
            ledger.sending.clear()
            _join(producer)

        def handled() -> set[int]:
            return {int(r[5]) for r in records(record) if len(r) > 5}

        await until(lambda: ledger.sent <= handled(), 120, "every message sent handled by the daemon", d)
    finally:
        d.signal(signal.SIGTERM)
        d.wait(60)
    runs = records(record)
    times = Counter(int(r[5]) for r in runs)
    retried = sum(1 for r in runs if int(r[2]) > 1)
    print(f"sent {len(ledger.sent)}, handled {len(times)}, runs {len(runs)}, retried after a timeout {retried}")
    assert ledger.sent and not ledger.sent - set(times)  # 0 lost
    assert sum(n - 1 for n in times.values()) == retried  # a second run only after a timeout (attempt > 1)
    assert '"message_poisoned"' not in d.output()

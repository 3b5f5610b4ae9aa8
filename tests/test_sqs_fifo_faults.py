"""FIFO over SQS with the faults made to happen (issue 25): boto3 producers and receivers spread over
two real ``casque serve`` processes, one FIFO queue, 1,000 message groups, counted from a ledger
(tests/support/fifo_ledger.py): every group processed in the order sent, nothing lost, nothing
processed twice, one message per deduplication id.

A message is *processed* when its receiver's DeleteMessageBatch entry succeeds. Clients behave as
SDK users do (tests/support/fifo_clients.py): a request that fails is retried on the other server,
a send with the same MessageDeduplicationId, a delete with the same receipt handles.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Callable, Iterator
from urllib.parse import urlparse

import pytest

from daemon.base.config import Settings
from tests.support import sqsserver
from tests.support.fifo_clients import Producer, Receiver, client, drain, poll
from tests.support.fifo_ledger import Ledger, Outcome

pytestmark = [pytest.mark.reliability, pytest.mark.slow]
GROUPS = 1000
PER_GROUP = 3
PRODUCERS = 4
RECEIVERS = 4


@pytest.fixture
def servers(settings: Settings) -> Iterator[list[sqsserver.SqsServer]]:
    """Two servers of their own (one of them may be killed)."""
    pair = [sqsserver.start(settings.cassandra.keyspace) for _ in range(2)]
    yield pair
    for s in pair:
        s.stop()


def run(urls: list[str], visibility_s: int, fault: Callable[[Ledger], None] | None = None, live: Callable[[], list[str]] | None = None,
        deadline_s: float = 240) -> Outcome:
    """The traffic of one test: PRODUCERS threads send PER_GROUP messages to each of GROUPS groups
    (a producer owns GROUPS / PRODUCERS of them), RECEIVERS threads receive and delete, both spread
    over ``urls``. ``fault(ledger)`` runs in this thread once a third of the messages was processed.
    Ends when every message sent was processed, then drains the queue for what is left over."""
    started = time.monotonic()
    name = f"ff-{uuid.uuid4().hex[:10]}.fifo"
    made = client(urls[0]).create_queue(QueueName=name, Attributes={"FifoQueue": "true", "VisibilityTimeout": str(visibility_s)})
    path = urlparse(made["QueueUrl"]).path
    ledger, stop = Ledger(), threading.Event()
    groups = [f"g{i:04d}" for i in range(GROUPS)]
    receivers = [Receiver(urls, path, ledger, i % len(urls), stop) for i in range(RECEIVERS)]
    producers = [Producer(urls, path, groups[i::PRODUCERS], PER_GROUP, ledger, i % len(urls)) for i in range(PRODUCERS)]
    threads = [*receivers, *producers]
    total = GROUPS * PER_GROUP
    try:
        for t in threads:
            t.start()
        if fault is not None:
            poll(lambda: len(ledger.processed_keys()) >= total // 3, deadline_s, "a third of the messages processed", threads)
            fault(ledger)
        poll(lambda: not any(p.is_alive() for p in producers) and len(ledger.processed_keys()) >= total, deadline_s,
             "every message sent and processed", threads)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    for t in threads:
        assert t.error is None, repr(t.error)
    left = drain(live() if live else urls, path, visibility_s + 1)
    return ledger.tally(len(left), time.monotonic() - started)


def check(out: Outcome) -> None:
    """What every test asserts: the FIFO promises, counted from the ledger."""
    assert out.sent == GROUPS * PER_GROUP, out.line()
    assert out.lost == 0, out.line()
    assert out.processed_twice == 0, out.line()
    assert out.ids_per_dedup_over_one == 0, out.line()
    assert out.groups_out_of_order == 0, out.line()
    assert out.sequence_out_of_order == 0, out.line()
    assert out.leftover == 0, out.line()


def test_two_servers_1000_groups_keep_order_and_lose_and_duplicate_nothing(servers: list[sqsserver.SqsServer]) -> None:
    out = run([s.url for s in servers], visibility_s=5)
    print(out.line())
    check(out)
    assert out.redelivered == 0, out.line()  # no fault: no visibility timeout should have passed


def test_kill_9_of_one_server_mid_run_its_clients_retry_on_the_other(servers: list[sqsserver.SqsServer]) -> None:
    """kill -9 of one server while producers send and receivers take through it. Its clients retry
    on the other: a send retried with its dedup id is not written twice; messages its receives took
    whose answers never arrived come back after the 5 s visibility timeout, in their group's order."""
    killed: list[float] = []

    def kill(ledger: Ledger) -> None:
        servers[0].proc.kill()
        servers[0].proc.wait(timeout=30)
        killed.append(time.monotonic())

    out = run([s.url for s in servers], visibility_s=5, fault=kill, live=lambda: [servers[1].url])
    print(out.line())
    check(out)
    assert killed and servers[0].proc.returncode == -9
    assert out.send_errors + out.receive_errors + out.delete_errors > 0, f"the kill failed no request: {out.line()}"

"""A client receiving in a loop over SQS (receive, delete, receive), with the fault made to happen while its
server keeps the lock of the loop's last take for its next receive (engine/delivery/receive.py ``looping``,
engine/take/holds.py ``adopt``): the next take is then a read and a batch, with no lock protocol of its own.

Two real ``casque serve`` processes, A and B, and one standard queue of one row (``casque.max_shards`` 0, so every
take of the queue contends for the same lock). A producer sends the backlog through B; one boto3 client loops on A.
Once A's loop keeps a lock, A is stopped at the worst step:

* frozen (``CASQUE_PAUSE_AT=take.held_read``: SIGSTOP to itself) right after a take under the kept lock read its
  messages, before it commits. Its column expires while it sleeps (the queue's 5 s lock TTL); a second client on
  B then takes everything, including what A read. Let go, A must find its hold lapsed and commit nothing;
* killed (``CASQUE_CRASH_AT=hold.adopted``: ``os._exit``, what kill -9 leaves) the moment a take committed and
  kept its lock: messages in flight whose answer never left, and a lock column no one will delete. B waits for
  the column to expire and the messages' visibility timeout to pass, then delivers them again;
* held at that same step while the Cassandra node is frozen (SIGSTOP, until A's batch timed out; both servers on
  a node of the test's own, their requests timing out after 2 s; the queue's lock timeout 20 s, so the kept lock is
  still valid however slowly a loaded machine freezes the node), then let go: the batch of its take under the kept
  lock goes to the frozen node and times out. In doubt (the node may apply it once it runs again), A drops the kept
  lock without deleting its column, so the row rests until the column expires, and the client's receive fails over
  to B.

Counted from the ledger (daemon/testing/standard_ledger.py): nothing lost, nothing left over, no delivery handed out
twice, nothing processed twice but what a passed visibility timeout allows.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import urlparse

import pytest

from daemon.base.config import Settings
from daemon.devnode import status
from daemon.testing import sqsserver
from daemon.testing.daemonproc import freeze
from daemon.testing.sqs_clients import Clients, Producer, Receiver, client, drain, poll, run_clients
from daemon.testing.standard_ledger import Ledger, Outcome
from tests.support.stall_node import STALL_NODE, servers_on_own_node
from tests.test_sqs_standard_faults import VIOLATIONS

pytestmark = [pytest.mark.reliability, pytest.mark.slow]
#: Enough receives of 10 that the loop's gap (a delete and the next receive, over HTTP) comes within the 50 ms a
#: kept lock waits (``LINGER_MS``) many times over: the fault needs it once.
MESSAGES = 800
VISIBILITY_S = 5
KEPT = "casque_locks_kept_total"
#: The frozen-node test's queue's lock timeout: A pauses under a kept lock up to half of it old (holds.py keeps
#: none older), and must find it valid when let go, however long a loaded machine takes to freeze the node.
LOCK_TIMEOUT_S = 20
IN_DOUBT = '"event": "hold_dropped"'  # A's log: its take's batch in doubt, its kept lock dropped
EXPIRED = '"event": "hold_expired_before_take"'

#: This file's own node (tests/support/stall_node.py), on ports of its own: it may run beside the other fault files.
STALL_KEYSPACE = "casque_loop_stall"


@pytest.fixture
def pair(request: pytest.FixtureRequest, settings: Settings) -> Iterator[list[sqsserver.SqsServer]]:
    """Server A, with the fault's environment (the test's parameter), and server B; A always let go at the end."""
    env: dict[str, str] = request.param
    a = sqsserver.start(settings.cassandra.keyspace, env=env, metrics=True)
    b = sqsserver.start(settings.cassandra.keyspace)
    yield [a, b]
    if a.proc.poll() is None:
        a.proc.send_signal(signal.SIGCONT)
    b.stop()


@pytest.fixture
def stall_pair() -> Iterator[list[sqsserver.SqsServer]]:
    """A and B on a node of the test's own (their requests time out after 2 s); A pauses after a read under its
    kept lock."""
    with servers_on_own_node(
        STALL_NODE, STALL_KEYSPACE, metrics=True, first_env={"CASQUE_PAUSE_AT": "take.held_read"}
    ) as pair:
        yield pair


def run(
    a: sqsserver.SqsServer,
    b: sqsserver.SqsServer,
    fault: Callable[[Clients[Ledger], Receiver], None],
    lock_timeout: str | None = None,
) -> Outcome:
    """MESSAGES sent through B; then A's client loops, and B's waits (parked) until ``fault(clients, b_client)``,
    which runs in this thread, lets it go. Ends when every message had its latest delivery deleted, then drains.
    ``lock_timeout``: the queue is made by ``casque queue create`` with that lock timeout (SQS has no such
    attribute; one row, no growth, as ``casque.max_shards`` 0 gives)."""
    started = time.monotonic()
    name = f"lf-{uuid.uuid4().hex[:10]}"
    if lock_timeout is None:
        client(b.url).create_queue(
            QueueName=name, Attributes={"VisibilityTimeout": str(VISIBILITY_S), "casque.max_shards": "0"}
        )
    else:
        made = subprocess.run(
            [sys.executable, "-m", "daemon.cli", "queue", "create", name, "--consumers", "pull"]
            + ["--shards", "1", "--buckets", "1", "--timeout", f"{VISIBILITY_S}s", "--lock-timeout", lock_timeout],
            env=dict(
                os.environ,
                CASQUE_CASSANDRA__PORT=str(STALL_NODE.native_port),
                CASQUE_CASSANDRA__KEYSPACE=STALL_KEYSPACE,
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert made.returncode == 0, made.stderr
    path = urlparse(client(b.url).get_queue_url(QueueName=name)["QueueUrl"]).path
    ledger, done = Ledger(), threading.Event()
    on_a = Receiver([a.url, b.url], path, ledger, 0, done)  # on A; on B once A cut its connection
    on_b = Receiver([b.url], path, ledger, 0, done)
    on_b.may_receive.clear()
    c = Clients[Ledger]([Producer([b.url], path, ["p"], MESSAGES, ledger, 0, fifo=False)], [on_a, on_b], ledger)
    run_clients(c, lambda: len(ledger.sent) >= MESSAGES, lambda: fault(c, on_b), ledger.all_processed, 240)
    drain([b.url], path, VISIBILITY_S + 1, ledger)
    return ledger.tally(VISIBILITY_S, time.monotonic() - started)


def check(out: Outcome) -> None:
    assert out.sent == MESSAGES, out.line()
    for name in VIOLATIONS:
        assert getattr(out, name) == 0, f"{name}: {out.line()}"


def checked(a: sqsserver.SqsServer, out: Outcome, more: str = "") -> str:
    """The ledger clean and A's loop kept a lock; A stopped, its log returned."""
    kept = a.metric(KEPT)
    log = a.stop()
    print(f"{out.line()} kept_locks_on_a={kept:.0f} {more}")
    check(out)
    assert kept >= 1, "A kept no lock for its client's loop"
    return log


@pytest.mark.parametrize("pair", [{"CASQUE_PAUSE_AT": "take.held_read"}], indirect=True)
def test_a_server_frozen_between_a_kept_locks_read_and_its_take_commits_nothing(
    pair: list[sqsserver.SqsServer],
) -> None:
    a, b = pair

    def fault(c: Clients[Ledger], on_b: Receiver) -> None:
        poll(a.frozen, 120, "server A frozen between a read under its kept lock and the take", c.threads)
        on_a = c.receivers[0]
        asked = on_a.answered_began  # the receive before the one A sleeps in
        on_b.may_receive.set()
        poll(c.ledger.all_processed, 120, "every message processed through B while A sleeps", c.threads)
        a.proc.send_signal(signal.SIGCONT)
        poll(lambda: on_a.answered_began != asked, 60, "A's answer to the receive it slept in", c.threads)

    log = checked(a, run(a, b, fault))
    assert EXPIRED in log, "A woke and did not find its kept lock lapsed"


@pytest.mark.parametrize("pair", [{"CASQUE_CRASH_AT": "hold.adopted"}], indirect=True)
def test_kill_9_of_a_server_the_moment_its_take_kept_the_lock_loses_nothing(pair: list[sqsserver.SqsServer]) -> None:
    a, b = pair

    def fault(c: Clients[Ledger], on_b: Receiver) -> None:
        poll(lambda: a.proc.poll() is not None, 120, "A gone as a take kept its lock", c.threads)
        on_b.may_receive.set()

    out = run(a, b, fault)
    print(out.line())
    check(out)
    assert a.proc.returncode == 137, f"A ended otherwise than at its crash point: {a.stop()[-2000:]}"
    assert out.redelivered >= 1, f"the messages of A's last take did not come back: {out.line()}"


def test_a_node_frozen_as_a_take_under_a_kept_lock_commits_loses_and_duplicates_nothing(
    stall_pair: list[sqsserver.SqsServer],
) -> None:
    a, b = stall_pair
    node = status(STALL_NODE).nodes[0].pid
    assert node is not None, "the test's own node is not running"
    frozen_for: list[float] = []

    def fault(c: Clients[Ledger], on_b: Receiver) -> None:
        poll(a.frozen, 120, "server A paused between a read under its kept lock and the take", c.threads)
        freeze(node)
        began = time.monotonic()
        try:
            a.proc.send_signal(signal.SIGCONT)  # A sends its take's batch to the frozen node
            # The fault itself: the node stays frozen until A's log says its batch was in doubt (or its hold lapsed),
            # not for a fixed time: the test sees the fault happen, however slowly a loaded machine runs A.
            try:
                poll(lambda: IN_DOUBT in a.output() or EXPIRED in a.output(), 60, "A's take batch in doubt", c.threads)
            except AssertionError as exc:
                raise AssertionError(f"{exc}; A's log ends:\n{a.output()[-6000:]}") from None
        finally:
            os.kill(node, signal.SIGCONT)
            frozen_for.append(time.monotonic() - began)
        on_b.may_receive.set()

    out = run(a, b, fault, lock_timeout=f"{LOCK_TIMEOUT_S}s")
    log = checked(a, out, f"node_frozen_s={frozen_for}")
    expired = [line for line in log.splitlines() if EXPIRED in line]
    assert IN_DOUBT in log, (
        f"A did not drop its kept lock when its take's batch was in doubt (its hold expired first: {expired})"
    )
    assert out.receive_errors > 0, f"no receive failed while the node was frozen: {out.line()}"

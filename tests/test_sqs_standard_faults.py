"""A standard queue over SQS with the faults made to happen while its receives share takes: boto3
producers and 8 receivers per server spread over two real ``casque serve`` processes, one standard
queue, a few thousand messages, counted from a ledger (daemon/testing/standard_ledger.py): nothing
lost, nothing left over, no delivery handed out twice, nothing processed twice but what a passed
visibility timeout allows.

Concurrent receives of one standard queue in one server share a take (engine/delivery/
joint_take.py): while a take of the queue runs (one at a time on a one-row queue), later receives
join a group whose leader takes up to 100 for them all and hands out the shares. The queue is made
by CreateQueue with one row that never grows (``casque.max_shards`` 0: the send rate here would
double it, and each row more lets one more take run at once instead of sharing), so with eight
receivers per server most receives are answered from a share. Each server's
``casque_receives_joined_total`` shows it, and the tests assert it before the fault; and that a take's lock was
kept for the group waiting on it, on either server (``casque_locks_kept_total``, engine/take/holds.py ``adopt``).

A message is *processed* when a receiver's DeleteMessageBatch entry for its latest delivery
succeeds. Clients behave as SDK users do (daemon/testing/sqs_clients.py): a request that fails is
retried on the other server, a send with the same entries, a delete with the same receipt handles.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import urlparse

import pytest

from daemon.base.config import Settings
from daemon.testing import sqsserver
from daemon.testing.sqs_clients import Clients, Producer, Receiver, Seen, client, drain, poll, run_clients
from daemon.testing.standard_ledger import VIOLATIONS, Ledger, Outcome
from tests.support.answer_gate import AnswerGate
from tests.support.stall_node import STALL_KEYSPACE, STALL_NODE, freeze_node, servers_on_own_node

pytestmark = [pytest.mark.reliability, pytest.mark.slow]
PRODUCERS = 2
PER_PRODUCER = 1500
RECEIVERS_PER_SERVER = 8
JOINED = "casque_receives_joined_total"
KEPT = "casque_locks_kept_total"
#: Receives a server must have answered from shares before the fault: a round of its receivers', so
#: sharing is under way, not one lucky overlap.
SHARED_BEFORE_FAULT = RECEIVERS_PER_SERVER
#: How many of the victim's receive answers the kill test holds back before the kill: half its receivers.
HELD_ANSWERS = RECEIVERS_PER_SERVER // 2


@pytest.fixture
def servers(settings: Settings) -> Iterator[list[sqsserver.SqsServer]]:
    """Two servers of their own, with their /metrics (one of them may be killed)."""
    pair = [sqsserver.start(settings.cassandra.keyspace, metrics=True) for _ in range(2)]
    yield pair
    for s in pair:
        s.stop()


@pytest.fixture
def stall_servers() -> Iterator[list[sqsserver.SqsServer]]:
    """A node of this test's own, and two servers on it (with their /metrics) whose Cassandra
    requests time out after 2 s: a request the frozen node holds fails (a take may have been
    applied all the same)."""
    with servers_on_own_node(STALL_NODE, STALL_KEYSPACE, metrics=True) as pair:
        yield pair


def run(
    urls: list[str],
    visibility_s: int,
    fault: Callable[[Clients[Ledger]], None],
    live: Callable[[], list[str]] | None = None,
    receivers_after: float = 0.5,
    deadline_s: float = 240,
) -> Outcome:
    """The traffic of one test: PRODUCERS threads send PER_PRODUCER messages each in batches of 10
    (each batch to the next server in turn); RECEIVERS_PER_SERVER threads per server receive and
    delete, each starting on its server (retrying on the other). Receivers start once
    ``receivers_after`` of the messages were sent (a backlog: their receives take at once, and
    together; half, so that it outlasts many rounds of takes even when other tests slow the clients,
    and the receives share takes before the fault); ``fault(clients)`` then runs in this thread.
    Ends when every message was sent and every message the run knows of had its latest delivery
    deleted, then drains the queue."""
    started = time.monotonic()
    name = f"sf-{uuid.uuid4().hex[:10]}"
    made = client(urls[0]).create_queue(
        QueueName=name, Attributes={"VisibilityTimeout": str(visibility_s), "casque.max_shards": "0"}
    )
    path = urlparse(made["QueueUrl"]).path
    ledger, done = Ledger(), threading.Event()
    c = Clients[Ledger](
        [Producer(urls, path, [f"p{i}"], PER_PRODUCER, ledger, i % len(urls), fifo=False) for i in range(PRODUCERS)],
        [Receiver(urls, path, ledger, s, done) for s in range(len(urls)) for _ in range(RECEIVERS_PER_SERVER)],
        ledger,
    )
    total = PRODUCERS * PER_PRODUCER
    run_clients(
        c,
        lambda: len(ledger.sent) >= total * receivers_after,
        lambda: fault(c),
        ledger.all_processed,
        deadline_s,
    )
    drain(live() if live else urls, path, visibility_s + 1, ledger)
    return ledger.tally(visibility_s, time.monotonic() - started)


def check(out: Outcome) -> None:
    """What every test asserts: a standard queue's promises, counted from the ledger."""
    assert out.sent == PRODUCERS * PER_PRODUCER, out.line()
    for name in VIOLATIONS:
        assert getattr(out, name) == 0, f"{name}: {out.line()}"


def sharing(c: Clients[Ledger], servers: list[sqsserver.SqsServer], kept: int = 1) -> list[float]:
    """Wait until each of ``servers`` answered SHARED_BEFORE_FAULT receives from their shares of
    joint takes, and they kept ``kept`` take's locks for a group between them (a take keeps it only when it
    filled its limit: a server whose receivers keep up with the sends may keep none); returns their
    ``casque_receives_joined_total``."""
    try:
        poll(
            lambda: (
                all(s.metric(JOINED) >= SHARED_BEFORE_FAULT for s in servers)
                and sum(s.metric(KEPT) for s in servers) >= kept
            ),
            60,
            f"receives sharing takes on each server, and {kept} take's lock kept for them",
            c.threads,
        )
    except AssertionError as exc:
        seen = [(s.metric(JOINED), s.metric(KEPT)) for s in servers]
        raise AssertionError(
            f"{exc}: (joined, kept) per server {seen}; sent {len(c.ledger.sent)}, seen {len(c.ledger.seen)}, "
            f"deleted {len(c.ledger.deleted)}, all processed: {c.ledger.all_processed()}"
        ) from None
    return [s.metric(JOINED) for s in servers]


def hold_receives_then_kill(c: Clients[Ledger], victim: sqsserver.SqsServer, gate: AnswerGate) -> tuple[float, float]:
    """Once the victim's receives share takes, hold back its answers that carry messages (the gate
    passes empty ones on, so its receivers go on taking) until HELD_ANSWERS of them were dropped:
    messages the victim took, in flight, whose answers will never arrive. Then kill -9 the victim
    and give the ledger the held deliveries. Returns the victim's joined receives before the hold
    and when the kill came (those answered meanwhile were held, or empty)."""
    [joined] = sharing(c, [victim], kept=0)  # a kill under a kept lock: tests/test_sqs_loop_faults.py
    gate.holding.set()
    poll(lambda: gate.dropped_answers() >= HELD_ANSWERS, 60, "receive answers of the victim held", c.threads)
    at_kill = victim.metric(JOINED)
    victim.proc.kill()
    victim.proc.wait(timeout=30)
    c.ledger.record_held(gate.held_deliveries())
    return joined, at_kill


def test_kill_9_of_a_server_whose_receives_share_takes_loses_and_duplicates_nothing(
    servers: list[sqsserver.SqsServer],
) -> None:
    """kill -9 of one server while its receives share takes and it holds messages taken and not
    answered (hold_receives_then_kill). Its clients retry on the other. The held messages come back
    after the 5 s visibility timeout, each given again with a higher ApproximateReceiveCount; no
    delivery goes to two receives, none is lost or left over."""
    victim = servers[0]
    joined: list[tuple[float, float]] = []
    gate = AnswerGate(victim.url, held_calls=(b"ReceiveMessage",))
    try:
        out = run(
            [gate.url, servers[1].url],
            visibility_s=5,
            live=lambda: [servers[1].url],
            fault=lambda c: joined.append(hold_receives_then_kill(c, victim, gate)),
        )
    finally:
        gate.close()
    print(f"{out.line()} victim_joined_before_the_hold_and_at_the_kill={joined}")
    check(out)
    assert victim.proc.returncode == -9
    assert joined[0][0] >= SHARED_BEFORE_FAULT, f"the victim's receives did not share takes: {joined}"
    assert out.held > 0 and out.held_came_back == out.held, f"the messages the killed server held: {out.line()}"


def test_a_node_frozen_while_receives_share_takes_loses_and_duplicates_nothing(
    stall_servers: list[sqsserver.SqsServer],
) -> None:
    """The Cassandra node frozen (SIGSTOP) for 4 s while receives through both servers share
    takes, then let go (SIGCONT, always). Requests it held fail after the servers' 2 s request
    timeout (a take may have been applied all the same: its messages come back after the 10 s
    visibility timeout); clients retry. Still nothing lost, left over or handed out twice."""
    joined: list[list[float]] = []
    freezes: list[int] = []

    def fault(c: Clients[Ledger]) -> None:
        joined.append(sharing(c, stall_servers))
        o = c.ledger.outcome
        freezes.append(freeze_node(STALL_NODE, c.receivers, lambda: o.receive_errors + o.delete_errors, c.threads))

    out = run([s.url for s in stall_servers], visibility_s=10, fault=fault)
    print(f"{out.line()} joined_before_the_freeze={joined} freezes={freezes}")
    check(out)
    assert all(j >= SHARED_BEFORE_FAULT for j in joined[0]), f"receives did not share takes on each server: {joined}"
    assert out.receive_errors + out.delete_errors > 0, f"the freeze failed no receive or delete: {out.line()}"


def test_the_ledger_counts_each_violation_it_is_shown() -> None:
    """The counting itself, on records made by hand: a check that can't fail proves nothing.
    Visibility 5 s. b: #1 given to two receives. c: never deleted (lost). d: #2 answered 1 s after
    #1's receive began (early). e: #1 deleted by a receive whose visibility had passed (stale: #2
    was given), then #2 deleted: not processed twice. f: its latest delivery deleted twice. g: #2
    given by a receive begun after #1's delete succeeded. h: seen under an id no send answered, no
    send of its body retried (unsent); i: the same after a retried send (a copy). j: held by the
    gate at #1, given again at #2; k: held, never given again nor deleted (lost). a: deleted, then
    drained (left over); m: a retried send's copy no receive saw, drained (not left over). A
    delete of a delivery a later one followed is stale: a's, e's and g's #1."""
    led = Ledger()
    for key, mid in [("a", "A"), ("b", "B"), ("c", "C"), ("d", "D"), ("e", "E"), ("f", "F"), ("g", "G")]:
        led.record_sent((key, 0), mid, "", None)
    for key, mid in [("j", "J"), ("k", "K")]:
        led.record_sent((key, 0), mid, "", None)
    led.record_sent(("i", 0), "I", "", 1)
    led.record_sent(("m", 0), "M", "", 1)

    def seen(key: str, mid: str, rc: int, began: float, at: float) -> Seen:
        return Seen(at, 0, (key, 0), mid, rc, "", began)

    a1, b1, b1_again = seen("a", "A", 1, 0, 0.1), seen("b", "B", 1, 0, 0.1), seen("b", "B", 1, 0, 0.2)
    c1 = seen("c", "C", 1, 0, 0.1)
    d1, d2 = seen("d", "D", 1, 0, 0.1), seen("d", "D", 2, 0.5, 1.0)
    e1, e2 = seen("e", "E", 1, 0, 0.1), seen("e", "E", 2, 5.5, 5.6)
    f1, g1, g2 = seen("f", "F", 1, 0, 0.1), seen("g", "G", 1, 0, 0.1), seen("g", "G", 2, 6.0, 6.1)
    h1, i1, i1_copy = seen("h", "H", 1, 0, 0.1), seen("i", "I", 1, 0, 0.1), seen("i", "I-copy", 1, 0, 0.1)
    j2, m1 = seen("j", "J", 2, 6, 6.1), seen("m", "M", 1, 0, 0.1)
    led.record_seen([a1, b1, b1_again, c1, d1, d2, e1, e2, f1, g1, g2, h1, i1, i1_copy, j2, m1])
    led.record_held([("J", 1), ("K", 1)])
    for d, at in [(a1, 0.2), (b1, 0.3), (d2, 1.1), (e1, 6.0), (e2, 5.7), (f1, 0.2), (f1, 0.3), (g1, 0.2)]:
        led.record_processed(d, at)
    for d in [g2, h1, i1, i1_copy, j2, m1]:
        led.record_processed(d, d.at + 0.1)
    assert not led.all_processed()  # C and K never were
    drained = [seen("a", "A", 2, 20, 20.1), seen("m", "M-copy", 1, 20, 20.1)]
    led.record_drained(drained)
    for d in drained:
        led.record_processed(d, 20.2)
    out = led.tally(visibility_s=5, seconds=0)
    assert (out.sent, out.messages, out.lost, out.unsent, out.copies) == (11, 14, 2, 1, 2), out.line()
    assert (out.deliveries_given_twice, out.early_redeliveries) == (1, 1), out.line()
    assert (out.processed_twice, out.stale_deletes, out.delivered_after_delete) == (1, 3, 2), out.line()
    assert (out.held, out.held_came_back, out.leftover, out.copies_drained) == (2, 1, 1, 1), out.line()
